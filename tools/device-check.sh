#!/usr/bin/env bash
# tools/device-check.sh: the CUDA backend's device tests, the NCCL backend at
# one rank, the device benchmark and kvsim on the node with device tables, on
# a GPU machine, in one command, at most 6 minutes of GPU time by design (a
# 360 s budget that cuts every step's timeout to what is left), for a lease
# of about 15 minutes, machine start included. It starts with a probe of a
# few seconds (kvs_device_probe: driver, runtime and NCCL versions, the
# device's maximum pitch, one launch of a kvshard kernel); each step's log
# and the running summary are written under the results folder as the step
# ends, so a run that is cut off still returns what it learned; the tests
# that need no GPU ran at stage time and are reported, not run again.
#
# Two halves, so the machine with the GPU need not have Bazel:
#
#   1. STAGE, on a build machine (Bazel 4.2.3 and CUDA 13 in /usr/local/cuda,
#      as tools/setup.sh installs them), from the repository root:
#
#        tools/device-check.sh stage
#
#      builds with `bazel build -c opt` (host code -O2, from .bazelrc's
#      --copt=-O2, and -DNDEBUG; the kernels are nvcc -O3 -lineinfo for
#      sm_80, sm_90 and sm_100, with compute_100 PTX, whatever the mode) and
#      copies into out/device-check:
#        bin/  the probe (tools/device_probe.c), the CUDA tests
#              (tests/backends/cuda: device_kernels_test, cuda_status_test),
#              the NCCL backend's test
#              (tests/shard/nccl_test, with its point-to-point case: one
#              rank's send of 256 MiB to itself and its receive in one NCCL
#              group, compared byte for byte, at the GB/s it prints), the
#              host tier's rows on the device
#              (tests/shard/node_host_rows_gpu_test: pages spilled to pinned
#              slots and fetched back on the engine's stream), issue 33's
#              engine cases (tests/shard/node_engine_gpu_test: a forward
#              captured as a CUDA graph on the engine's stream reading the
#              engine's result buffers across replays, an engine on stream
#              0, the host tier at a 100 GiB carve past the largest pitch),
#              kvs_device_bench (tools/device_bench.c)
#              and kvsim_local (kvsim with ranks as threads, no MPI), with the
#              CUDA and NCCL backends beside them (libkvshard-cuda.so.1,
#              libkvshard-nccl.so.1), where the backend registry looks for
#              them: the program's own folder (backends/registry.c), and
#              libkvshard.so.2 for the Python package's reference engine
#              (python/examples/reference_engine.py --device cuda, run
#              from the working tree when torch with CUDA imports). The MPI
#              backend is not staged: nothing here runs MPI.
#        lib/  every shared library those need beyond the C and C++ runtimes,
#              as ldd finds them here (libcudart.so.13, libjansson, libxxhash,
#              libhwloc.so.15 and its own), checked with readelf: every
#              NEEDED entry of every staged file is staged, a runtime the GPU
#              machine has, or libnccl.so.2.
#        MANIFEST  the commit, the build mode, nvcc, the highest GLIBC_ and
#              GLIBCXX_ symbol versions any staged file (binaries and
#              libraries) requires and which file, each file's needs, and the
#              sha256 of every file.
#      libnccl.so.2 (over 200 MiB) is not staged: the GPU machine's own is
#      used. out/ is git-ignored; when the GPU is on another machine, copy the
#      repository with out/device-check in it there (a few MiB). When the
#      build machine has the GPU, run the second half in place.
#        stage-results/  the tests that need no GPU (device_ref_test,
#              device_layout_test, kernel_emulation_test), run here at stage
#              time, one log each and results.tsv (name, exit, seconds,
#              passed, failed, skipped); run reports them.
#
#   2. RUN, on the machine with the GPU, from the repository root (the
#      working tree with the staged folder in it):
#
#        tools/device-check.sh            # same as: tools/device-check.sh run
#
#      A preflight first finds libnccl.so.2: in $KVS_NCCL_LIB_DIR when set
#      (and only there), else on the loader's path (LD_LIBRARY_PATH, then
#      ld.so's cache), else in a pip wheel's nvidia/nccl/lib under the
#      site-packages of any python3 on the PATH; it says where, or exits 1
#      with the places it looked (summary.json says so too); without NCCL
#      the NCCL steps are "not run" and the rest goes on. It also refuses a stage whose files do not resolve
#      here (ldd: a missing library or a glibc older than the MANIFEST's).
#      Then the staged lib/ and NCCL's folder go first on LD_LIBRARY_PATH and
#      are the only places the backends' vendor libraries are taken from
#      (KVSHARD_CUDA_PATH); KVSHARD_BACKEND_PATH is unset, so the backends
#      beside the binaries load; NCCL_DEBUG=WARN puts NCCL's warnings in the
#      logs. Results go to $KVS_DEVICE_CHECK_OUT, else $OUT when set, else
#      out/device-check-results:
#        progress.tsv              one line per step as it ends: name, exit,
#                                  seconds, ok / failed / not run
#        logs/NAME.log             each step's log, written as it runs
#        summary.json              rewritten as each step ends ("complete":
#                                  false until the last): what passed,
#                                  timings, the probe, the preflight, the
#                                  benchmark, tests.reference_engine (run,
#                                  or "ran": false with torch's answer
#                                  where python3 has no torch with CUDA),
#                                  and node_runs: kvsim_local on the
#                                  node with device tables (1 rank whose node
#                                  makes its own NCCL communicator on its plan's
#                                  GPU, --backend nccl; 4 loopback ranks on GPU
#                                  0; the NCCL rank at 256 requests), each with
#                                  steps/s and the per-step split
#        bench.json                the benchmark alone
#        device_kernels_test.log   the device test's output
#        logs.tar.gz               every step's log, packed at the end
#      Bad usage (a mode other than stage or run, or more than one word)
#      exits 2 before anything runs.
#      The exit status is 0 only when every step passed and the device tests
#      ran (a skip on a GPU machine means the GPU was not usable: a failure):
#      the kernels against the references, and the NCCL backend at one rank
#      (nccl_test: collectives and a shard over device buffers, split mode
#      leaving the engine's communicator and device alone, a consumer stream
#      and a thread without a device, and an exchange of 256 MiB to itself
#      in one group, whose GB/s summary.json keeps as
#      tests.nccl_test.exchange_gbs, null where it did not run). A
#      compute-sanitizer that does not support the device (as under gVisor)
#      counts as not run, not as failed.
#
#   Environment (all optional):
#     KVS_DEVICE_CHECK_DIR        staged folder (default out/device-check)
#     KVS_DEVICE_CHECK_OUT        results folder (see above)
#     KVS_DEVICE_CHECK_BUDGET_S   wall-clock budget, default 360 s; each step's
#                                 timeout is cut to what is left
#     KVS_DEVICE_CHECK_SANITIZER  1 (default) runs compute-sanitizer memcheck
#                                 on the device test when the tool is there
#                                 and time is left; 0 skips it
#     KVS_DEVICE_CHECK_ALLOW_SKIP 1 accepts skipped device tests and kvsim's
#                                 "no device" (exit 5): a dry run on a machine
#                                 without a GPU
#     KVS_NCCL_LIB_DIR            the folder of the libnccl.so.2 to use
#     KVS_BENCH_REF_GBS           the bandwidth the benchmark compares with
#                                 (default 4300: an H200's measured copy rate)
#
#   If nothing is staged and bazel is on the PATH, `run` stages first.
#
#   With the GPU on the build machine: `tools/device-check.sh stage &&
#   tools/device-check.sh`, then read out/device-check-results/summary.json.
set -uo pipefail

cd "$(dirname "$0")/.." || exit 1
MODE=${1:-run}
if (($# > 1)); then
  echo "device-check: one mode ('stage' or 'run'), got $#: $*" >&2
  exit 2
fi
STAGE=${KVS_DEVICE_CHECK_DIR:-out/device-check}
# What is staged, as Bazel labels: the programs into bin/ ...
PROGRAMS=(
  //tools:kvs_device_probe
  //tests/backends/cuda:device_kernels_test
  //tests/backends/cuda:cuda_status_test
  //tests/shard:nccl_test
  //tests/shard:node_host_rows_gpu_test
  //tests/shard:node_engine_gpu_test
  //tools:kvs_device_bench
  //tools:kvsim_local
)
# The tests that need no GPU: built and run at stage time, on the build
# machine, so the lease's minutes go to the GPU's.
CPU_TESTS=(
  //tests/backends/cuda:device_ref_test
  //tests/backends/cuda:kernel_emulation_test
  //tests/plan:device_layout_test
)
# ... and the backends beside them. Not libkvshard-mpi.so.1: MPI stays out.
BACKENDS=(
  //backends/cuda:libkvshard-cuda.so.1
  //backends/nccl:libkvshard-nccl.so.1
  //:libkvshard.so.2
)
# The host code is built optimised; .bazelrc adds --copt=-O2 to every mode.
BUILD_MODE=(-c opt)

log() { printf 'device-check: %s\n' "$*" >&2; }

# A JSON string literal of $1.
json_string() {
  local s=$1
  s=${s//\\/\\\\}
  s=${s//\"/\\\"}
  s=${s//$'\n'/\\n}
  s=${s//$'\r'/}
  s=${s//$'\t'/ }
  printf '"%s"' "$s"
}

# The file name of a label (//a/b:name -> name) and its path under bazel-bin.
label_name() { echo "${1##*:}"; }
label_path() {
  local l=${1#//}
  local pkg=${l%%:*}
  echo "${pkg:+$pkg/}${l##*:}"
}

# Libraries the GPU machine provides itself: the C and C++ runtimes (newer
# ones serve: glibc and libstdc++ are backward compatible, and the MANIFEST
# says which versions are needed), the driver, and NCCL (found by run's
# preflight).
provided() {
  case $1 in
    libc.so.* | libm.so.* | libdl.so.* | libpthread.so.* | librt.so.* | libstdc++.so.* | \
      libgcc_s.so.* | ld-linux* | linux-vdso.so.* | libcuda.so.* | libnccl.so.*)
      return 0
      ;;
  esac
  return 1
}

# The NEEDED entries of an ELF file, one per line.
needed_of() { readelf -d "$1" 2>/dev/null | sed -n 's/.*(NEEDED).*\[\(.*\)\].*/\1/p'; }

# The highest version of each of GLIBC_, GLIBCXX_ and CXXABI_ the file
# requires (its .gnu.version_r), as "GLIBC_2.34 GLIBCXX_3.4.29 ...".
versions_of() {
  readelf -W -V "$1" 2>/dev/null |
    awk '/Version needs section/ { on = 1; next } /Version (definition|symbols) section/ { on = 0 }
         on && match($0, /Name: (GLIBC|GLIBCXX|CXXABI)_[0-9.]+/) {
           v = substr($0, RSTART + 6, RLENGTH - 6); print v }' |
    sort -t_ -k1,1 -k2,2V -u |
    awk -F_ '{ best[$1] = $0 } END { for (k in best) print best[k] }' | sort | tr '\n' ' '
}

# The highest of one family (GLIBC, GLIBCXX, CXXABI) over the staged files,
# and which need it: "VERSION (FILE)" or "VERSION (N files: FILE, ...)";
# nothing when no file needs the family.
highest_of() {
  local family=$1 f v
  for f in "$STAGE"/bin/* "$STAGE"/lib/*; do
    for v in $(versions_of "$f"); do
      [[ $v == "${family}"_* ]] && echo "$v ${f#"$STAGE"/}"
    done
  done | sort -t_ -k2,2V |
    awk '{ if ($1 != top) { top = $1; n = 0; files = "" } n++; files = files (n > 1 ? ", " : "") $2 }
         END { if (n == 1) print top " (" files ")"; else if (n > 1) print top " (" n " files: " files ")" }'
}

# RUNPATH (or RPATH) of an ELF file: LD_LIBRARY_PATH comes before a
# RUNPATH, after an RPATH.
runpath_of() {
  readelf -d "$1" 2>/dev/null | sed -n 's/.*(\(RUNPATH\|RPATH\)).*\[\(.*\)\].*/\1 \2/p' | tr '\n' ' '
}

# The targets' machine code, as backends/cuda/BUILD.bazel's NVCC_ARCHS asks.
nvcc_targets() {
  local sass ptx
  sass=$(sed -n 's/.*code=\(sm_[0-9]*\).*/\1/p' backends/cuda/BUILD.bazel | sort -u | tr '\n' ' ')
  ptx=$(sed -n 's/.*code=\(compute_[0-9]*\).*/\1/p' backends/cuda/BUILD.bazel | sort -u | tr '\n' ' ')
  echo "${sass}(SASS), ${ptx}(PTX), -lineinfo"
}

stage() {
  command -v bazel >/dev/null || { log "stage needs bazel on the PATH"; return 1; }
  log "building with bazel ${BUILD_MODE[*]}"
  bazel build "${BUILD_MODE[@]}" "${PROGRAMS[@]}" "${BACKENDS[@]}" >&2 || return 1
  local bin_dir
  bin_dir=$(bazel info "${BUILD_MODE[@]}" bazel-bin 2>/dev/null) || return 1
  rm -rf "$STAGE"
  mkdir -p "$STAGE/bin" "$STAGE/lib" || return 1
  local label name
  for label in "${PROGRAMS[@]}" "${BACKENDS[@]}"; do
    name=$(label_name "$label")
    cp -L "$bin_dir/$(label_path "$label")" "$STAGE/bin/$name" || return 1
    chmod u+w "$STAGE/bin/$name"
    [[ $name == *.so.* ]] || chmod u+x "$STAGE/bin/$name"
  done
  # bazel-bin is shared with every build of this workspace: refuse binaries
  # that another command built with sanitizers (--config=asan) meanwhile.
  if grep -l -a '__asan_init' "$STAGE"/bin/* >/dev/null 2>&1; then
    log "bazel-bin holds sanitizer builds of $(grep -l -a '__asan_init' "$STAGE"/bin/* | tr '\n' ' ');" \
      "run 'tools/device-check.sh stage' again once that build is done"
    return 1
  fi
  # Every shared library the staged files load, as this machine's loader
  # resolves them (ldd follows the whole closure), but what the GPU machine
  # provides.
  local lib path
  while read -r lib path; do
    provided "$lib" || cp -L "$path" "$STAGE/lib/$lib" || return 1
  done < <(for f in "$STAGE"/bin/*; do ldd "$f"; done |
    awk '$2 == "=>" && $3 ~ /^\// { print $1, $3 }' | sort -u)
  check_needs || return 1
  write_manifest || return 1
  stage_cpu_tests "$bin_dir" || return 1
  log "staged $(du -sh "$STAGE" | cut -f1) in $STAGE:"
  cat "$STAGE/MANIFEST" >&2
}

# gtest's closing counts from a log: passed failed skipped.
counts() {
  local f=$1 p s x
  p=$(sed -n 's/^\[  PASSED  \] \([0-9]*\) tests\{0,1\}\..*/\1/p' "$f" | tail -1)
  x=$(sed -n 's/^\[  FAILED  \] \([0-9]*\) tests\{0,1\}, listed below.*/\1/p' "$f" | tail -1)
  s=$(sed -n 's/^\[  SKIPPED \] \([0-9]*\) tests\{0,1\}, listed below.*/\1/p' "$f" | tail -1)
  echo "${p:-0} ${x:-0} ${s:-0}"
}

# The tests that need no GPU, run here: their logs and results.tsv go into
# the stage for run to report.
stage_cpu_tests() {
  local bin_dir=$1 label name out=$STAGE/stage-results t0 rc p x s
  mkdir -p "$out" || return 1
  bazel build "${BUILD_MODE[@]}" "${CPU_TESTS[@]}" >&2 || return 1
  : >"$out/results.tsv"
  for label in "${CPU_TESTS[@]}"; do
    name=$(label_name "$label")
    t0=$SECONDS
    "$bin_dir/$(label_path "$label")" --gtest_color=no >"$out/$name.log" 2>&1
    rc=$?
    read -r p x s < <(counts "$out/$name.log")
    printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$name" "$rc" $((SECONDS - t0)) "$p" "$x" "$s" >>"$out/results.tsv"
    log "stage: $name exit $rc in $((SECONDS - t0))s ($p passed, $x failed, $s skipped)"
  done
}

# readelf's word on every staged file: each NEEDED entry is staged (lib/, or
# a backend in bin/) or provided by the GPU machine, and nothing needs MPI.
check_needs() {
  local f n bad=""
  for f in "$STAGE"/bin/* "$STAGE"/lib/*; do
    for n in $(needed_of "$f"); do
      if [[ $n == libmpi* ]]; then
        bad+=" ${f#"$STAGE"/} needs $n (MPI stays out of the device check);"
      elif ! provided "$n" && [[ ! -e $STAGE/lib/$n && ! -e $STAGE/bin/$n ]]; then
        bad+=" ${f#"$STAGE"/} needs $n, which is not staged;"
      fi
    done
  done
  if [[ -e $STAGE/bin/libkvshard-mpi.so.1 || -e $STAGE/lib/libkvshard-mpi.so.1 ]]; then
    bad+=" libkvshard-mpi.so.1 is staged;"
  fi
  [[ -z $bad ]] && return 0
  log "the stage is incomplete:$bad"
  return 1
}

write_manifest() {
  local glibc glibcxx cxxabi f
  glibc=$(highest_of GLIBC)
  glibcxx=$(highest_of GLIBCXX)
  cxxabi=$(highest_of CXXABI)
  {
    echo "staged: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "commit: $(git rev-parse HEAD 2>/dev/null || echo unknown)$(git diff --quiet HEAD -- backends core plan shard tests/backends tests/plan tests/shard tools 2>/dev/null || echo ' (with uncommitted changes)')"
    echo "build: bazel ${BUILD_MODE[*]}: host code -O2 (.bazelrc --copt=-O2) -DNDEBUG; kernels nvcc -O3"
    echo "glibc needed: ${glibc:-none}; GLIBCXX needed: ${glibcxx:-none}; CXXABI needed: ${cxxabi:-none}"
    echo "nvcc: $(/usr/local/cuda/bin/nvcc --version 2>/dev/null | tail -1)"
    echo "targets: $(nvcc_targets)"
    echo "nccl: $(sed -n 's/^#define NCCL_\(MAJOR\|MINOR\|PATCH\) \([0-9]*\)/\2/p' /usr/local/cuda/include/nccl.h 2>/dev/null | paste -sd.) headers; libnccl.so.2 not staged (run's preflight finds the machine's)"
    echo "backends: bin/libkvshard-cuda.so.1 bin/libkvshard-nccl.so.1 (libkvshard-mpi.so.1 not staged)"
    echo "needs (NEEDED; highest GLIBC/GLIBCXX/CXXABI versions; RUNPATH):"
    for f in "$STAGE"/bin/* "$STAGE"/lib/*; do
      echo "  ${f#"$STAGE"/}: $(needed_of "$f" | tr '\n' ' '); $(versions_of "$f"); $(runpath_of "$f")"
    done
    echo "sha256:"
    (cd "$STAGE" && sha256sum bin/* lib/* | sed 's/^/  /')
  } >"$STAGE/MANIFEST"
}

# The folder of the libnccl.so.2 to use, in NCCL_DIR, and where it was found
# in NCCL_FROM; or 1 with the places looked in NCCL_WHY. KVS_NCCL_LIB_DIR, when
# set, is the only place: a named folder without it is an error, not a
# reason to take another NCCL.
NCCL_DIR="" NCCL_FROM="" NCCL_WHY="" NCCL_MISSING=""
find_nccl() {
  local d tried=()
  if [[ -n ${KVS_NCCL_LIB_DIR:-} ]]; then
    if [[ -e $KVS_NCCL_LIB_DIR/libnccl.so.2 ]]; then
      NCCL_DIR=$(cd "$KVS_NCCL_LIB_DIR" && pwd) NCCL_FROM="KVS_NCCL_LIB_DIR"
      return 0
    fi
    NCCL_WHY="KVS_NCCL_LIB_DIR=$KVS_NCCL_LIB_DIR has no libnccl.so.2 (it names the only place to look)"
    return 1
  fi
  # The loader's path: LD_LIBRARY_PATH's folders, then ld.so's cache.
  local dirs=()
  IFS=: read -r -a dirs <<<"${LD_LIBRARY_PATH:-}"
  for d in "${dirs[@]}"; do
    if [[ -n $d && -e $d/libnccl.so.2 ]]; then
      NCCL_DIR=$(cd "$d" && pwd) NCCL_FROM="LD_LIBRARY_PATH"
      return 0
    fi
  done
  tried+=("LD_LIBRARY_PATH (${LD_LIBRARY_PATH:-unset})")
  d=$(ldconfig -p 2>/dev/null | awk '$1 == "libnccl.so.2" { print $NF }' |
    while read -r f; do [[ -e $f ]] && { echo "$f"; break; }; done)
  if [[ -n $d ]]; then
    NCCL_DIR=$(dirname "$d") NCCL_FROM="the loader's cache (ldconfig -p)"
    return 0
  fi
  tried+=("the loader's cache (ldconfig -p)")
  # pip wheels (nvidia-nccl-cu*): nvidia/nccl/lib under the site-packages of
  # every python3 on the PATH.
  local py sp seen=""
  for py in $(compgen -c | grep -E '^python3(\.[0-9]+)?$' | sort -u); do
    command -v "$py" >/dev/null || continue
    while read -r sp; do
      [[ -z $sp || $seen == *"|$sp|"* ]] && continue
      seen+="|$sp|"
      if [[ -e $sp/nvidia/nccl/lib/libnccl.so.2 ]]; then
        NCCL_DIR=$sp/nvidia/nccl/lib NCCL_FROM="$py's site-packages (pip nvidia-nccl)"
        return 0
      fi
    done < <("$py" -c 'import site, sys
for p in site.getsitepackages() + [site.getusersitepackages()] + sys.path:
    print(p)' 2>/dev/null)
    tried+=("$py's site-packages")
  done
  local IFS=';'
  NCCL_WHY="no libnccl.so.2 in: ${tried[*]}"
  NCCL_WHY=${NCCL_WHY//;/; }
  return 1
}

# Before any GPU time: NCCL found, the stage complete and resolvable here,
# and the environment every step runs in. On a failure, the reason goes to
# the log and to summary.json, and run exits 1.
preflight() {
  local dir=$1 results=$2 why=""
  if [[ ! -e $dir/bin/libkvshard-cuda.so.1 || ! -e $dir/bin/libkvshard-nccl.so.1 ]]; then
    why="$STAGE/bin lacks the CUDA or NCCL backend (libkvshard-cuda.so.1, libkvshard-nccl.so.1): stage again"
  elif ! find_nccl; then
    # Not fatal: the NCCL steps are marked not run and the rest goes on.
    NCCL_MISSING="$NCCL_WHY (install NCCL: a CUDA image's libnccl2, or pip install nvidia-nccl-cu13, or name its folder in KVS_NCCL_LIB_DIR)"
    log "preflight: no NCCL, its steps will not run: $NCCL_MISSING"
  fi
  if [[ -z $why ]]; then
    [[ -n $NCCL_DIR ]] && log "preflight: libnccl.so.2 from $NCCL_DIR ($NCCL_FROM)"
    # The staged libraries first, then NCCL's folder; the backends' vendor
    # libraries from those two places only; the backends beside the
    # binaries (the registry's program folder), not any named elsewhere.
    export LD_LIBRARY_PATH="$dir/lib${NCCL_DIR:+:$NCCL_DIR}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    export KVSHARD_CUDA_PATH="$dir/lib${NCCL_DIR:+:$NCCL_DIR}"
    unset KVSHARD_BACKEND_PATH
    export NCCL_DEBUG=WARN
    # Every staged file resolves here: no library missing, no symbol version
    # this machine's glibc or libstdc++ lacks (ldd names both).
    local f unresolved=""
    for f in "$dir"/bin/* "$dir"/lib/*; do
      # Without NCCL, its own absence is already said.
      unresolved+=$(ldd "$f" 2>&1 | grep -E 'not found' | { if [[ -n $NCCL_MISSING ]]; then grep -v libnccl; else cat; fi; } |
        sed "s|^|${f#"$dir"/}: |" | tr -s ' \t' ' ')
    done
    [[ -n $unresolved ]] && why="staged files do not resolve on this machine: $unresolved (the MANIFEST says what they need)"
  fi
  [[ -z $why ]] && return 0
  log "preflight: $why"
  printf '{"pass": false, "reason": %s}\n' "$(json_string "preflight: $why")" >"$results/summary.json"
  return 1
}

run() {
  local start
  local budget=${KVS_DEVICE_CHECK_BUDGET_S:-360}
  local results=${KVS_DEVICE_CHECK_OUT:-${OUT:-out/device-check-results}}
  mkdir -p "$results" || return 1
  results=$(cd "$results" && pwd)
  # A copy that travelled (a tarball, a mount, a file transfer) may have
  # lost the executable bits: put them back.
  [[ -d $STAGE/bin ]] && chmod u+x "$STAGE"/bin/* 2>/dev/null
  if [[ ! -x $STAGE/bin/device_kernels_test ]]; then
    if command -v bazel >/dev/null; then
      log "nothing staged in $STAGE; staging with bazel first"
      stage || return 1
    else
      log "nothing staged in $STAGE and no bazel here: run 'tools/device-check.sh stage' on a build machine and copy $STAGE here"
      printf '{"pass": false, "reason": %s}\n' \
        "$(json_string "nothing staged in $STAGE and no bazel on this machine")" >"$results/summary.json"
      return 1
    fi
  fi
  local dir logs
  dir=$(cd "$STAGE" && pwd)
  if ! preflight "$dir" "$results"; then
    return 1
  fi
  # Each step's log goes straight into the results (a run cut off by the
  # lease still returns it), with a line in progress.tsv as the step ends;
  # the logs are also packed into one archive at the end.
  logs=$results/logs
  rm -rf "$logs" && mkdir -p "$logs" || return 1
  printf 'step\texit\tseconds\n' >"$results/progress.tsv"
  start=$SECONDS # the budget is the checks' own, staging excluded
  local have_timeout=0
  command -v timeout >/dev/null && have_timeout=1

  # summary.json from what has run so far ("complete": false until the
  # end), rewritten before each step and at the end.
  write_summary() {
    local complete=$1 bench="null" cubins=""
    [[ -s $results/bench.json ]] && bench=$(cat "$results/bench.json")
    if [[ $complete == true ]] && command -v cuobjdump >/dev/null; then
      cubins=$(cuobjdump --list-elf "$dir/bin/kvs_device_bench" 2>/dev/null | grep -o 'sm_[0-9]*' | sort -u | tr '\n' ' ')
      cubins+=$(cuobjdump --list-ptx "$dir/bin/kvs_device_bench" 2>/dev/null | grep -o 'sm_[0-9]*' | sort -u | sed 's/sm_/ptx_compute_/' | tr '\n' ' ')
    fi
    {
      printf '{\n  "pass": %s,\n  "complete": %s,\n' "$( ((all_pass)) && echo true || echo false)" "$complete"
      printf '  "elapsed_s": %d,\n  "budget_s": %d,\n' $((SECONDS - start)) "$budget"
      printf '  "host": %s,\n  "gpu": %s,\n' "$(json_string "$(uname -nmr)")" "$(json_string "$gpu")"
      printf '  "probe": %s,\n' "${probe:-null}"
      printf '  "preflight": {"nccl_dir": %s, "nccl_from": %s, "nccl_missing": %s, "nccl_debug": "WARN"},\n' \
        "$(json_string "$NCCL_DIR")" "$(json_string "$NCCL_FROM")" "$(json_string "$NCCL_MISSING")"
      printf '  "embedded_code": %s,\n' "$(json_string "$cubins")"
      printf '  "staged": %s,\n' "$(json_string "$(head -4 "$dir/MANIFEST" 2>/dev/null)")"
      printf '  "tests": {%s},\n' "$json_tests"
      printf '  "bench_exit": %s,\n  "bench_seconds": %s,\n' "${bench_rc:-null}" "${bench_seconds:-null}"
      printf '  "sanitizer": %s,\n' "$san_json"
      printf '  "node_runs": [%s],\n' "$json_node"
      printf '  "bench": %s\n}\n' "$bench"
    } >"$results/summary.json.tmp" && mv "$results/summary.json.tmp" "$results/summary.json"
  }

  # Runs one step: name, cap in seconds, then the command. Records rc and
  # seconds in STEP_RC / STEP_SECONDS.
  local STEP_RC STEP_SECONDS
  step() {
    local name=$1 cap=$2
    shift 2
    write_summary false # what the steps before this one found
    local left=$((budget - (SECONDS - start) - 5))
    ((cap > left)) && cap=$left
    if ((cap < 5)); then
      log "$name: no time left in the ${budget}s budget"
      STEP_RC=124
      STEP_SECONDS=0
      echo "not run: the budget was spent" >"$logs/$name.log"
      printf '%s\tnot run\t0\n' "$name" >>"$results/progress.tsv"
      return
    fi
    log "$name (up to ${cap}s)"
    local t0=$SECONDS
    if ((have_timeout)); then
      timeout --kill-after=5 "$cap" "$@" >"$logs/$name.log" 2>&1
    else
      "$@" >"$logs/$name.log" 2>&1
    fi
    STEP_RC=$?
    STEP_SECONDS=$((SECONDS - t0))
    printf '%s\t%s\t%s\n' "$name" "$STEP_RC" "$STEP_SECONDS" >>"$results/progress.tsv"
    log "$name: exit $STEP_RC in ${STEP_SECONDS}s ($((SECONDS - start))s of ${budget}s used)"
  }
  # A step that cannot run here (no NCCL): its reason as its log.
  not_run() {
    echo "not run: $2" >"$logs/$1.log"
    printf '%s\tnot run\t0\n' "$1" >>"$results/progress.tsv"
    log "$1: not run: $2"
  }

  local gpu=""
  if command -v nvidia-smi >/dev/null; then
    local smi=(nvidia-smi "--query-gpu=name,driver_version,memory.total" "--format=csv,noheader")
    if ((have_timeout)); then gpu=$(timeout 20 "${smi[@]}" 2>&1); else gpu=$("${smi[@]}" 2>&1); fi
  fi

  local json_tests="" all_pass=1 name p x s rc probe="null" json_node="" san_json='{"ran": false}'
  local bench_rc="" bench_seconds=""
  # The tests that need no GPU ran at stage time: reported, not run again.
  local secs
  if [[ -s $dir/stage-results/results.tsv ]]; then
    while IFS=$'\t' read -r name rc secs p x s; do
      cp "$dir/stage-results/$name.log" "$logs/" 2>/dev/null
      local ok=1
      ((rc != 0 || x != 0 || p + s == 0)) && ok=0
      ((ok)) || all_pass=0
      json_tests+="${json_tests:+, }\"$name\": {\"at\": \"stage\", \"exit\": $rc, \"seconds\": $secs, \"passed\": $p, \"failed\": $x, \"skipped\": $s, \"ok\": $( ((ok)) && echo true || echo false)}"
    done <"$dir/stage-results/results.tsv"
  fi

  # The probe, a few seconds: versions, the maximum pitch, one kernel
  # launch. Without a usable GPU nothing after it can pass: say so now.
  step probe 30 "$dir/bin/kvs_device_probe"
  probe=$(grep -m1 '^{' "$logs/probe.log")
  [[ -n $probe ]] || probe=$(json_string "$(tail -3 "$logs/probe.log")")
  if ((STEP_RC != 0)); then
    if ((STEP_RC == 77)) && [[ ${KVS_DEVICE_CHECK_ALLOW_SKIP:-0} == 1 ]]; then
      log "probe: no CUDA device: a dry run, the device steps will skip"
    else
      all_pass=0
      log "probe failed (exit $STEP_RC): $(tail -1 "$logs/probe.log"); the device steps cannot pass"
      write_summary true
      tar -czf "$results/logs.tar.gz" -C "$logs" .
      return 1
    fi
  fi

  # The device test first: it is the point of the exercise.
  for name in device_kernels_test node_host_rows_gpu_test node_engine_gpu_test cuda_status_test; do
    local cap=60
    [[ $name == device_kernels_test ]] && cap=120
    [[ $name == node_engine_gpu_test ]] && cap=90
    step "$name" "$cap" "$dir/bin/$name" --gtest_color=no
    rc=$STEP_RC
    read -r p x s < <(counts "$logs/$name.log")
    local ok=1 short
    ((rc != 0 || x != 0 || p + s == 0)) && ok=0
    # A device with too little free memory for the 100 GiB carve skips
    # that case, saying what it has: reported, not a failure.
    short=0
    grep -q 'bytes free of .*; a carve of' "$logs/$name.log" && short=1
    if [[ $name != cuda_status_test ]] && ((s > short)) &&
      [[ ${KVS_DEVICE_CHECK_ALLOW_SKIP:-0} != 1 ]]; then
      ok=0
      log "$name skipped $s tests: $(grep -m1 'no CUDA device visible' "$logs/$name.log")"
    fi
    ((short > 0)) && log "$name: $(grep -m1 'bytes free of' "$logs/$name.log")"
    ((ok)) || all_pass=0
    json_tests+="${json_tests:+, }\"$name\": {\"exit\": $rc, \"seconds\": $STEP_SECONDS, \"passed\": $p, \"failed\": $x, \"skipped\": $s, \"ok\": $( ((ok)) && echo true || echo false)}"
    if [[ $name == device_kernels_test ]]; then
      # The benchmark right after the device test, before the slower CPU tests.
      step bench 60 "$dir/bin/kvs_device_bench" --json "$results/bench.json" \
        --ref-gbs "${KVS_BENCH_REF_GBS:-4300}"
      bench_rc=$STEP_RC bench_seconds=$STEP_SECONDS
      if ((bench_rc == 77)) && [[ ${KVS_DEVICE_CHECK_ALLOW_SKIP:-0} == 1 ]]; then
        :
      elif ((bench_rc != 0)); then
        all_pass=0
      fi
    fi
  done

  # The reference engine with its KV on the GPU (torch's current stream as
  # the engine's), one ring placement, two thread ranks: only where torch
  # with CUDA imports; else "not run" with torch's own answer.
  local torch_says
  torch_says=$(python3 -c 'import torch; print(torch.__version__, torch.version.cuda, torch.cuda.is_available())' 2>&1 | tail -1)
  if [[ $torch_says == *" True" ]]; then
    step reference_engine 90 env KVSHARD_LIBRARY="$dir/bin/libkvshard.so.2" \
      PYTHONPATH="$PWD/python${PYTHONPATH:+:$PYTHONPATH}" PYTHONDONTWRITEBYTECODE=1 \
      python3 python/examples/reference_engine.py --device cuda --rings per-request --tp 2
    local ref_ok=true
    if ((STEP_RC != 0)) || ! grep -q 'every attention output and logit matches' "$logs/reference_engine.log"; then
      ref_ok=false
      all_pass=0
    fi
    json_tests+=", \"reference_engine\": {\"exit\": $STEP_RC, \"seconds\": $STEP_SECONDS, \"torch\": $(json_string "$torch_says"), \"ok\": $ref_ok}"
  else
    not_run reference_engine "python3 has no torch with CUDA: $torch_says"
    json_tests+=", \"reference_engine\": {\"ran\": false, \"reason\": $(json_string "python3 has no torch with CUDA: $torch_says")}"
  fi

  # The NCCL backend at one rank, with the real runtime and NCCL. Every case
  # but the no-device one must run.
  local nccl_json
  if [[ -n $NCCL_MISSING ]]; then
    not_run nccl_test "no libnccl.so.2: $NCCL_MISSING"
    json_tests+=", \"nccl_test\": {\"ran\": false, \"reason\": $(json_string "no libnccl.so.2")}"
  else
  step nccl_test 90 "$dir/bin/nccl_test" --gtest_color=no
  rc=$STEP_RC
  read -r p x s < <(counts "$logs/nccl_test.log")
  local nccl_ok=1 skipped_gpu
  skipped_gpu=$(grep '^\[  SKIPPED \] CommNccl\.' "$logs/nccl_test.log" | grep -cv 'without_a_device')
  ((rc != 0 || x != 0 || p == 0)) && nccl_ok=0
  if ((skipped_gpu > 0)) && [[ ${KVS_DEVICE_CHECK_ALLOW_SKIP:-0} != 1 ]]; then
    nccl_ok=0
    log "nccl_test skipped $skipped_gpu GPU tests: $(grep -m1 'no CUDA device visible' "$logs/nccl_test.log")"
  fi
  ((nccl_ok)) || all_pass=0
  # The point-to-point case's rate: "exchange to itself: 256 MiB ..., X GB/s (...)".
  local exchange_gbs
  exchange_gbs=$(sed -n 's/^exchange to itself: .*, \([0-9.]*\) GB\/s (.*/\1/p' "$logs/nccl_test.log" | head -1)
  [[ -n $exchange_gbs ]] && log "nccl_test: $(grep -m1 '^exchange to itself: ' "$logs/nccl_test.log")"
  nccl_json="{\"exit\": $rc, \"seconds\": $STEP_SECONDS, \"passed\": $p, \"failed\": $x, \"skipped\": $s, \"exchange_gbs\": ${exchange_gbs:-null}, \"ok\": $( ((nccl_ok)) && echo true || echo false)}"
  json_tests+=", \"nccl_test\": $nccl_json"
  fi

  # ---- kvsim on the node ----
  # kvsim_local (ranks as threads, no MPI) with the node's device tables:
  # one rank with --backend nccl on the live machine (its node makes its own
  # NCCL communicator on its plan's GPU over kvsim_local's loopback one, and
  # the tables apply each step's journal from the broadcast's device
  # buffer), four ranks over loopback sharing GPU 0 (journals applied from
  # host entries), and the NCCL rank at 256 running requests for the step /
  # bare-broadcast ratio. Every step
  # of the first two compares the device ring contexts with the pool's CPU
  # reference (kvsim's verify); each records steps/s and the per-step split
  # (broadcast, mirror, apply, ring_ctx, digest, schedule) in its JSON.
  node_runs() {
    local runs=(
      "nccl_1_rank|--ranks 1 --tp 1 --backend nccl --topology live --budget 8GiB --requests 64"
      "loopback_4_ranks_1_gpu|--ranks 4 --tp 4 --backend loopback --topology bundled --cuda-device 0 --budget 4GiB --requests 64"
      "nccl_1_rank_256_requests|--ranks 1 --tp 1 --backend nccl --topology live --budget 16GiB --max-running 256 --requests 256 --arrival-rate 4 --no-verify --check-every 100000"
    )
    local run name args result ok
    for run in "${runs[@]}"; do
      name=${run%%|*}
      read -r -a args <<<"${run#*|}"
      if [[ -n $NCCL_MISSING && $name == nccl_* ]]; then
        not_run "kvsim_$name" "no libnccl.so.2"
        json_node+="${json_node:+, }{\"name\": \"$name\", \"ran\": false, \"reason\": \"no libnccl.so.2\"}"
        continue
      fi
      step "kvsim_$name" 90 "$dir/bin/kvsim_local" "${args[@]}" --device cuda --steps 2000 \
        --seed 1 --json --progress-s 0 --timeout-ms 20000
      rc=$STEP_RC
      # Rank 0's object is the line that starts with {"ranks" (other ranks'
      # threads may still print their closing lines after it).
      result=$(grep -m1 '^{"ranks"' "$logs/kvsim_$name.log")
      ok=0
      if ((rc == 0)) && [[ $result == *'"digests_agree":true'* &&
        $result == *'"ring_ctx_digest_agree":true'* && $result == *'"device":"cuda"'* ]]; then
        ok=1
      elif [[ ${KVS_DEVICE_CHECK_ALLOW_SKIP:-0} == 1 ]] && ((rc == 4 || rc == 5)) &&
        grep -qE "no CUDA device visible|has no NVIDIA GPU" "$logs/kvsim_$name.log"; then
        # A dry run without a GPU: kvsim said there is none, as the device
        # being unavailable (exit 5) or, with --topology live, as the live
        # machine having no NVIDIA GPU to plan (exit 4).
        ok=1
        result=$(json_string "not run: $(grep -m1 -E 'no CUDA device visible|has no NVIDIA GPU' "$logs/kvsim_$name.log")")
      fi
      ((ok)) || all_pass=0
      json_node+="${json_node:+, }{\"name\": \"$name\", \"exit\": $rc, \"seconds\": $STEP_SECONDS, \"ok\": $( ((ok)) && echo true || echo false), \"result\": ${result:-null}}"
    done
  }
  node_runs

  # compute-sanitizer memcheck over the device test, when the tool works on
  # this machine (it does in a VM; not in a gVisor sandbox) and time is left.
  local sanitizer
  sanitizer=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null || true)
  if [[ ${KVS_DEVICE_CHECK_SANITIZER:-1} == 1 && -n $sanitizer ]]; then
    step sanitizer 150 "$sanitizer" --tool memcheck --error-exitcode 3 \
      "$dir/bin/device_kernels_test" --gtest_color=no \
      '--gtest_filter=-*impossible_allocation*'  # its failed cudaMalloc is on purpose
    local errors
    errors=$(sed -n 's/.*ERROR SUMMARY: \([0-9]*\) error.*/\1/p' "$logs/sanitizer.log" | tail -1)
    if grep -qiE 'device not supported|not supported on this device|unsupported device' \
      "$logs/sanitizer.log"; then
      # The tool refuses the device (gVisor's GPU): memcheck did not run,
      # which is not a finding against the kernels.
      san_json="{\"ran\": false, \"exit\": $STEP_RC, \"reason\": $(json_string "compute-sanitizer does not support this device: $(grep -m1 -iE 'not supported|unsupported' "$logs/sanitizer.log")")}"
    elif [[ -n $errors ]]; then
      san_json="{\"ran\": true, \"exit\": $STEP_RC, \"seconds\": $STEP_SECONDS, \"errors\": $errors}"
      ((errors > 0)) && all_pass=0
    else
      san_json="{\"ran\": false, \"exit\": $STEP_RC, \"reason\": $(json_string "$(tail -3 "$logs/sanitizer.log")")}"
    fi
  fi

  write_summary true
  cp "$logs/device_kernels_test.log" "$results/" 2>/dev/null
  tar -czf "$results/logs.tar.gz" -C "$logs" .
  log "summary: $results/summary.json (pass: $( ((all_pass)) && echo true || echo false), $((SECONDS - start))s)"
  ((all_pass))
}

case $MODE in
  stage) stage ;;
  run) run ;;
  -h | --help | help) sed -n '2,/^set -uo pipefail/p' "$0" | sed -n '/^#/p' | sed 's/^# \{0,1\}//' ;;
  *)
    log "unknown mode '$MODE': use 'stage' or 'run'"
    exit 2
    ;;
esac
