#!/bin/bash
# Runs docs_check.py (its first argument) with Debian's python3, else the
# first on PATH: it needs the standard library alone.
py=/usr/bin/python3
[ -x "$py" ] || py=python3
exec "$py" "$@"
