#!/usr/bin/env bash
# Installs the Debian packages kvshard builds and tests with, and does
# nothing when they are all present. Installing needs root: run as root, or
# with sudo available without a password prompt.
set -euo pipefail

packages=(
  bazel-bootstrap     # Bazel 4.2.3, offline
  g++                 # C11 library, C++ GoogleTest tests
  libgtest-dev        # GoogleTest
  libjansson-dev      # model configs, JSON output
  libxxhash-dev       # block checksums and chain hashes
  libhwloc-dev        # topology discovery and NUMA binding
  libopenmpi-dev      # host ranks
  openmpi-bin         # mpirun
  clang               # libFuzzer targets
  clang-format-14     # tools/format-check.sh (tools/test.sh runs it)
  libclang-rt-14-dev  # sanitizer and fuzzer runtimes
  jq                  # JSON checks in the end-to-end tests
  pkgconf             # pkg-config: the installed library's test builds with it
  patch               # tests/mutants: the Python package's planted bugs
  python3-numpy       # the Python package (its tests run Debian's /usr/bin/python3)
  python3-mpi4py      # its MPI tests
  python3-torch       # its torch.from_dlpack tests
  python3-venv        # its offline pip install test
  python3-pip
  python3-setuptools
)

missing=()
for package in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$package")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all ${#packages[@]} packages present"
  exit 0
fi

echo "setup: installing ${missing[*]}"
if [ "$(id -u)" -eq 0 ]; then
  as_root=()
elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
  as_root=(sudo -n)
else
  echo "setup: installing packages needs root; run: sudo $0" >&2
  exit 1
fi
export DEBIAN_FRONTEND=noninteractive
# A fresh machine may have no package lists yet; refresh them once if the
# install cannot find a package.
if ! "${as_root[@]}" apt-get install -y --no-install-recommends "${missing[@]}"; then
  "${as_root[@]}" apt-get update
  "${as_root[@]}" apt-get install -y --no-install-recommends "${missing[@]}"
fi
