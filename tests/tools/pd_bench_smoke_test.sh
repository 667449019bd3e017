#!/usr/bin/env bash
# kvs_pd_bench (a program to run by hand, whose figures no test asserts)
# still runs: two ranks, a small request on both layouts of its pages, its
# JSON with every key and the in-place baseline's messages; and its usage
# errors are exit 2.
# Usage: pd_bench_smoke_test.sh KVS_PD_BENCH
set -uo pipefail
source tests/shard/common.sh
BENCH=$1
OUT=$TMPDIR/out
ERR=$TMPDIR/err
for layout in "" --scattered; do
  run_mpi 120 -np 2 "$BENCH" --tokens 300,129 --rounds 2 --budget 512MiB $layout --json
  [ "$rc" -eq 0 ] || fail "kvs_pd_bench $layout exited $rc"
  json=$(tail -n 1 "$OUT")
  /usr/bin/python3 - "$json" "$layout" <<'PY' || fail "kvs_pd_bench $layout's JSON"
import json, sys
d = json.loads(sys.argv[1])
scattered = sys.argv[2] == "--scattered"
assert d["scattered"] is scattered and d["rounds"] == 2, d
assert [s["tokens"] for s in d["sizes"]] == [300, 129], d
for s in d["sizes"]:
    for key in ("bytes", "wire_bytes", "messages", "transfer_s", "plain_s", "in_place_s",
                "transfer_over_plain", "transfer_over_in_place"):
        assert s[key] > 0, (key, s)
    # Runs of units adjacent on both ranks: with consecutive pages no more
    # than the transfer's messages (which may also join units a stride
    # apart); with the decode side's pages backwards one a unit, as the
    # transfer's.
    if scattered:
        assert s["in_place_messages"] == s["messages"], s
    else:
        assert 0 < s["in_place_messages"] <= s["messages"], s
PY
done
# Usage errors: exit 2 with the reason.
run_mpi 60 -np 2 "$BENCH" --budget 0
[ "$rc" -eq 2 ] && grep -q "at least one byte" "$ERR" || fail "--budget 0: exit $rc"
# A request larger than the node: exit 1 naming the pages, on both ranks.
run_mpi 60 -np 2 "$BENCH" --tokens 16777216 --rounds 1 --budget 512MiB
[ "$rc" -eq 1 ] && [ "$(grep -c 'raise --budget or lower --tokens' "$ERR")" -eq 2 ] ||
  fail "--tokens past the node: exit $rc"
run_mpi 60 -np 1 "$BENCH" --tokens 64
[ "$rc" -eq 2 ] && grep -q "runs on 2 ranks" "$ERR" || fail "one rank: exit $rc"
echo "ok"
