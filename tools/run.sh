#!/usr/bin/env bash
# The main job on a fresh machine: install what is missing, build, and run
# kvplan (on its embedded defaults unless flags are given).
set -euo pipefail
cd "$(dirname "$0")/.."
tools/setup.sh
exec bazel run --ui_event_filters=-info --noshow_progress //tools:kvplan -- "$@"
