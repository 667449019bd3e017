#!/usr/bin/env bash
# tools/device-check.sh: the cuda/ device tests and the device benchmark on a
# GPU machine, in one command, in well under 5 minutes, with a JSON summary.
#
# Two halves, so the machine with the GPU need not have Bazel:
#
#   1. STAGE, on a build machine (Bazel 4.2.3 and CUDA 13 in /usr/local/cuda,
#      as tools/setup.sh installs them), from the repository root:
#
#        tools/device-check.sh stage
#
#      builds the test binaries, the NCCL backend's test (tests/shard),
#      kvsim_local (kvsim with ranks as threads, no MPI) and
#      kvs_device_bench (kernels compiled for sm_80 and sm_90, plus compute_90
#      PTX, with -lineinfo) and copies them into out/device-check/bin, with
#      the shared libraries they need beyond the C and C++ runtimes
#      (libcudart.so.13, libjansson, libxxhash) in out/device-check/lib and a
#      MANIFEST. libnccl.so.2 (over 200 MiB) is not staged: the GPU
#      machine's own is used (a CUDA image carries NCCL; run() finds it).
#      out/ is git-ignored; when the GPU is on another machine, copy the
#      repository with out/device-check in it there (about 5 MiB; the
#      binaries need glibc >= 2.34 and GLIBCXX 3.4.29). When the build
#      machine has the GPU, run the second half in place.
#
#   2. RUN, on the machine with the GPU, from the repository root (the
#      working tree with the staged folder in it):
#
#        tools/device-check.sh            # same as: tools/device-check.sh run
#
#      It sets LD_LIBRARY_PATH to the staged lib/ itself. Results go to
#      $KVS_DEVICE_CHECK_OUT, else $OUT when set, else
#      out/device-check-results, four files:
#        summary.json              what passed, timings, the benchmark, and
#                                  node_runs: kvsim on the node with device
#                                  tables (1 NCCL rank; 4 loopback ranks on
#                                  GPU 0; 1 NCCL rank at 256 requests), each
#                                  with steps/s and the per-step split
#        bench.json                the benchmark alone
#        device_kernels_test.log   the device test's output
#        logs.tar.gz               every step's log (tests, bench, memcheck)
#      The exit status is 0 only when every step passed and the device tests
#      ran (a skip on a GPU machine means the GPU was not usable: a failure):
#      the kernels against the references, and the NCCL backend at one rank
#      (nccl_test: collectives, a shard over device buffers, adopt mode, a
#      consumer stream ordered by kvs_comm_nccl_reads_done, a thread left
#      without a context). A compute-sanitizer that does not support the
#      device (as under gVisor) counts as not run, not as failed.
#
#   Environment (all optional):
#     KVS_DEVICE_CHECK_DIR        staged folder (default out/device-check)
#     KVS_DEVICE_CHECK_OUT        results folder (see above)
#     KVS_DEVICE_CHECK_BUDGET_S   wall-clock budget, default 280 s; each step's
#                                 timeout is cut to what is left
#     KVS_DEVICE_CHECK_SANITIZER  1 (default) runs compute-sanitizer memcheck
#                                 on the device test when the tool is there
#                                 and time is left; 0 skips it
#     KVS_DEVICE_CHECK_ALLOW_SKIP 1 accepts skipped device tests (a dry run on
#                                 a machine without a GPU)
#     KVS_BENCH_REF_GBS           the bandwidth the benchmark compares with
#                                 (default 4300: an H200's measured copy rate)
#
#   If nothing is staged and bazel is on the PATH, `run` stages first.
#
#   With the GPU on the build machine: `tools/device-check.sh stage &&
#   tools/device-check.sh`, then read out/device-check-results/summary.json
#   (about a minute).
set -uo pipefail

cd "$(dirname "$0")/.." || exit 1
MODE=${1:-run}
STAGE=${KVS_DEVICE_CHECK_DIR:-out/device-check}
BINARIES=(device_kernels_test device_ref_test device_layout_test cuda_status_test
  kernel_emulation_test nccl_test kvs_device_bench kvsim_local)
# Where each staged binary is built, under bazel-bin.
package_of() {
  case $1 in
    kvs_device_bench) echo cuda ;;
    nccl_test) echo tests/shard ;;
    kvsim_local) echo tools ;;
    *) echo tests/backends/cuda ;;
  esac
}

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

# The folder of this machine's libnccl.so.2, or nothing.
find_nccl() {
  local d
  d=$(ldconfig -p 2>/dev/null | awk '/libnccl\.so\.2 /{print $NF; exit}')
  if [[ -n $d ]]; then
    dirname "$d"
    return
  fi
  for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib /usr/lib/x86_64-linux-gnu \
    /usr/local/nvidia/lib64; do
    [[ -e $d/libnccl.so.2 ]] && { echo "$d"; return; }
  done
  if command -v python3 >/dev/null; then
    d=$(python3 -c 'import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], "lib"))' 2>/dev/null)
    [[ -n $d && -e $d/libnccl.so.2 ]] && { echo "$d"; return; }
  fi
}

stage() {
  command -v bazel >/dev/null || { log "stage needs bazel on the PATH"; return 1; }
  log "building with bazel"
  bazel build //tests/cuda:device_kernels_test //tests/cuda:device_ref_test \
    //tests/cuda:device_layout_test //tests/cuda:cuda_status_test \
    //tests/cuda:kernel_emulation_test //tests/shard:nccl_test //tools:kvs_device_bench \
    //tools:kvsim_local >&2 ||
    return 1
  local bin_dir
  bin_dir=$(bazel info bazel-bin 2>/dev/null) || return 1
  rm -rf "$STAGE"
  mkdir -p "$STAGE/bin" "$STAGE/lib" || return 1
  local name src
  for name in "${BINARIES[@]}"; do
    src=$bin_dir/$(package_of "$name")/$name
    cp -L "$src" "$STAGE/bin/$name" || return 1
    chmod u+wx "$STAGE/bin/$name"
  done
  # bazel-bin is shared with every build of this workspace: refuse binaries
  # that another command built with sanitizers (--config=asan) meanwhile.
  if grep -l -a '__asan_init' "$STAGE"/bin/* >/dev/null 2>&1; then
    log "bazel-bin holds sanitizer builds of $(grep -l -a '__asan_init' "$STAGE"/bin/* | tr '\n' ' ');" \
      "run 'tools/device-check.sh stage' again once that build is done"
    return 1
  fi
  # Every shared library the binaries load except the C and C++ runtimes,
  # which the GPU machine has (newer ones serve: glibc and libstdc++ are
  # backward compatible).
  local lib path
  while read -r lib path; do
    case $lib in
      libc.so.* | libm.so.* | libdl.so.* | libpthread.so.* | librt.so.* | libstdc++.so.* | \
        libgcc_s.so.* | ld-linux*) ;;
      libnccl.so.*) ;; # the GPU machine's own (see above)
      *) cp -L "$path" "$STAGE/lib/$lib" || return 1 ;;
    esac
  done < <(for name in "${BINARIES[@]}"; do ldd "$STAGE/bin/$name"; done |
    awk '$2 == "=>" && $3 ~ /^\// { print $1, $3 }' | sort -u)
  {
    echo "staged: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "commit: $(git rev-parse HEAD 2>/dev/null || echo unknown)$(git diff --quiet HEAD -- cuda core tests/backends/cuda 2>/dev/null || echo ' (with uncommitted changes)')"
    echo "nvcc: $(/usr/local/cuda/bin/nvcc --version 2>/dev/null | tail -1)"
    echo "targets: sm_80 sm_90 (SASS), compute_90 (PTX), -lineinfo"
    echo "nccl: $(sed -n 's/^#define NCCL_\(MAJOR\|MINOR\|PATCH\) \([0-9]*\)/\2/p' /usr/local/cuda/include/nccl.h | paste -sd.) headers; libnccl.so.2 not staged"
    echo "glibc needed: $(objdump -T "$STAGE"/bin/* 2>/dev/null | grep -o 'GLIBC_[0-9.]*' | sort -V -u | tail -1)"
    (cd "$STAGE" && sha256sum bin/* lib/*)
  } >"$STAGE/MANIFEST"
  log "staged $(du -sh "$STAGE" | cut -f1) in $STAGE:"
  cat "$STAGE/MANIFEST" >&2
}

run() {
  local start
  local budget=${KVS_DEVICE_CHECK_BUDGET_S:-280}
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
  # Step logs are gathered here and packed into one archive at the end, so
  # the results are four files however many steps ran.
  logs=$(mktemp -d) || return 1
  start=$SECONDS # the budget is the checks' own, staging excluded
  export LD_LIBRARY_PATH="$dir/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  # libnccl.so.2 is not staged (over 200 MiB): the machine's own, found where
  # its CUDA image keeps it (the loader's cache, the CUDA toolkit, the
  # nvidia-nccl Python wheel).
  local nccl_dir=""
  nccl_dir=$(find_nccl)
  if [[ -n $nccl_dir ]]; then
    export LD_LIBRARY_PATH="$LD_LIBRARY_PATH:$nccl_dir"
    log "libnccl.so.2 from $nccl_dir"
  else
    log "no libnccl.so.2 on this machine: the NCCL test cannot run"
  fi
  local have_timeout=0
  command -v timeout >/dev/null && have_timeout=1

  # Runs one step: name, cap in seconds, then the command. Records rc and
  # seconds in STEP_RC / STEP_SECONDS.
  local STEP_RC STEP_SECONDS
  step() {
    local name=$1 cap=$2
    shift 2
    local left=$((budget - (SECONDS - start) - 5))
    ((cap > left)) && cap=$left
    if ((cap < 5)); then
      log "$name: no time left in the ${budget}s budget"
      STEP_RC=124
      STEP_SECONDS=0
      echo "not run: the budget was spent" >"$logs/$name.log"
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
    log "$name: exit $STEP_RC in ${STEP_SECONDS}s"
  }

  # gtest's closing counts from a log: passed failed skipped.
  counts() {
    local f=$1 p s x
    p=$(sed -n 's/^\[  PASSED  \] \([0-9]*\) tests\{0,1\}\..*/\1/p' "$f" | tail -1)
    x=$(sed -n 's/^\[  FAILED  \] \([0-9]*\) tests\{0,1\}, listed below.*/\1/p' "$f" | tail -1)
    s=$(sed -n 's/^\[  SKIPPED \] \([0-9]*\) tests\{0,1\}, listed below.*/\1/p' "$f" | tail -1)
    echo "${p:-0} ${x:-0} ${s:-0}"
  }

  local gpu="" driver_ok=1 missing
  if command -v nvidia-smi >/dev/null; then
    local smi=(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader)
    if ((have_timeout)); then gpu=$(timeout 20 "${smi[@]}" 2>&1); else gpu=$("${smi[@]}" 2>&1); fi
  fi
  missing=$(for b in "$dir"/bin/*; do ldd "$b" 2>/dev/null; done | grep 'not found' | sort -u | tr '\n' ' ')
  [[ -n $missing ]] && log "unresolved libraries: $missing"

  local json_tests="" all_pass=1 name p x s rc
  # The device test first: it is the point of the exercise.
  for name in device_kernels_test device_ref_test device_layout_test cuda_status_test \
    kernel_emulation_test; do
    local cap=60
    [[ $name == device_kernels_test ]] && cap=150
    step "$name" "$cap" "$dir/bin/$name" --gtest_color=no
    rc=$STEP_RC
    read -r p x s < <(counts "$logs/$name.log")
    local ok=1
    ((rc != 0 || x != 0 || p + s == 0)) && ok=0
    if [[ $name == device_kernels_test && $s != 0 && ${KVS_DEVICE_CHECK_ALLOW_SKIP:-0} != 1 ]]; then
      ok=0
      log "device_kernels_test skipped $s tests: $(grep -m1 'no CUDA device visible' "$logs/$name.log")"
    fi
    ((ok)) || all_pass=0
    json_tests+="${json_tests:+, }\"$name\": {\"exit\": $rc, \"seconds\": $STEP_SECONDS, \"passed\": $p, \"failed\": $x, \"skipped\": $s, \"ok\": $( ((ok)) && echo true || echo false)}"
    if [[ $name == device_kernels_test ]]; then
      # The benchmark right after the device test, before the slower CPU tests.
      step bench 120 "$dir/bin/kvs_device_bench" --json "$results/bench.json" \
        --ref-gbs "${KVS_BENCH_REF_GBS:-4300}"
      local bench_rc=$STEP_RC bench_seconds=$STEP_SECONDS
      if ((bench_rc == 77)) && [[ ${KVS_DEVICE_CHECK_ALLOW_SKIP:-0} == 1 ]]; then
        :
      elif ((bench_rc != 0)); then
        all_pass=0
      fi
    fi
  done

  # The NCCL backend at one rank, with the real runtime and NCCL. Every case
  # but the no-device one must run.
  local nccl_json
  if [[ -n $nccl_dir ]]; then
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
    nccl_json="{\"exit\": $rc, \"seconds\": $STEP_SECONDS, \"passed\": $p, \"failed\": $x, \"skipped\": $s, \"ok\": $( ((nccl_ok)) && echo true || echo false)}"
  else
    all_pass=0
    nccl_json="{\"ran\": false, \"ok\": false, \"reason\": \"no libnccl.so.2 on this machine\"}"
  fi
  json_tests+=", \"nccl_test\": $nccl_json"

  # ---- kvsim on the node ----
  # kvsim_local (ranks as threads, no MPI) with the node's device tables:
  # one rank over NCCL on the live machine (the tables apply each step's
  # journal from the broadcast's device buffer), four ranks over loopback
  # sharing GPU 0 (journals applied from host entries), and one NCCL rank
  # at 256 running requests for the step / bare-broadcast ratio. Every step
  # of the first two compares the device ring contexts with the pool's CPU
  # reference (kvsim's verify); each records steps/s and the per-step split
  # (broadcast, mirror, apply, ring_ctx, digest, schedule) in its JSON.
  local json_node=""
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
      elif ((rc == 5)) && [[ ${KVS_DEVICE_CHECK_ALLOW_SKIP:-0} == 1 ]]; then
        ok=1 # a dry run without a GPU: kvsim said the device is unavailable
        result=$(json_string "not run: $(grep -m1 'unavailable\|no CUDA device' "$logs/kvsim_$name.log")")
      fi
      ((ok)) || all_pass=0
      json_node+="${json_node:+, }{\"name\": \"$name\", \"exit\": $rc, \"seconds\": $STEP_SECONDS, \"ok\": $( ((ok)) && echo true || echo false), \"result\": ${result:-null}}"
    done
  }
  node_runs

  # compute-sanitizer memcheck over the device test, when the tool works on
  # this machine (it does in a VM; not in a gVisor sandbox) and time is left.
  local san_json='{"ran": false}'
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

  local bench="null"
  [[ -s $results/bench.json ]] && bench=$(cat "$results/bench.json")
  local cubins=""
  if command -v cuobjdump >/dev/null; then
    cubins=$(cuobjdump --list-elf "$dir/bin/kvs_device_bench" 2>/dev/null | grep -o 'sm_[0-9]*' | sort -u | tr '\n' ' ')
    cubins+=$(cuobjdump --list-ptx "$dir/bin/kvs_device_bench" 2>/dev/null | grep -o 'sm_[0-9]*' | sort -u | sed 's/sm_/ptx_compute_/' | tr '\n' ' ')
  fi
  {
    printf '{\n  "pass": %s,\n' "$( ((all_pass)) && echo true || echo false)"
    printf '  "elapsed_s": %d,\n  "budget_s": %d,\n' $((SECONDS - start)) "$budget"
    printf '  "host": %s,\n  "gpu": %s,\n' "$(json_string "$(uname -nmr)")" "$(json_string "$gpu")"
    printf '  "unresolved_libraries": %s,\n' "$(json_string "$missing")"
    printf '  "embedded_code": %s,\n' "$(json_string "$cubins")"
    printf '  "staged": %s,\n' "$(json_string "$(head -4 "$dir/MANIFEST" 2>/dev/null)")"
    printf '  "tests": {%s},\n' "$json_tests"
    printf '  "bench_exit": %s,\n' "${bench_rc:-null}"
    printf '  "sanitizer": %s,\n' "$san_json"
    printf '  "node_runs": [%s],\n' "$json_node"
    printf '  "bench": %s\n}\n' "$bench"
  } >"$results/summary.json"
  cp "$logs/device_kernels_test.log" "$results/" 2>/dev/null
  tar -czf "$results/logs.tar.gz" -C "$logs" . && rm -rf "$logs"
  log "summary: $results/summary.json (pass: $( ((all_pass)) && echo true || echo false), $((SECONDS - start))s)"
  ((all_pass))
}

case $MODE in
  stage) stage ;;
  run) run ;;
  -h | --help | help) sed -n '2,60p' "$0" | sed -n '/^#/p' | sed 's/^# \{0,1\}//' ;;
  *)
    log "unknown mode '$MODE': use 'stage' or 'run'"
    exit 2
    ;;
esac
