"""What the Python package adds to a step, measured in one run:

    python3 step_cost.py [--batch 16] [--steps 2000]

One rank on the host twin (bundled topology, device "cpu"). B requests are
admitted and each bound one window page; then the same decode batch is
stepped N times two ways, alternating in rounds so both see the same
machine:
  - baseline: kvs_node_step called directly through ctypes with a batch
    struct built once (the library's step plus one foreign call);
  - package: Node.step(dict), as an engine calls it (argument checks,
    numpy conversions, the result dict with the ring contexts copied out).
It prints the mean microseconds per step of each and their ratio.

Exit status: 0 measured; 1 the library refused (its message on stderr) or
the report could not be written; 2 bad usage (a flag given twice, a value
out of range: --batch 1 to 256 (the node is a 16 GiB host twin), --steps 1 to 10,000,000, --rounds 1 to
100).
"""

import argparse
import ctypes
import sys
import time

import numpy as np

import kvshard
from kvshard._lib import CError, NodeBatch, StepResult, lib


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--steps", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=5)
    given = [w.split("=")[0] for w in sys.argv[1:] if w.startswith("--")]
    twice = sorted({w for w in given if given.count(w) > 1})
    if twice:
        ap.error(f"{twice[0]} is given twice; give it once")
    a = ap.parse_args()
    if a.batch < 1 or a.steps < 1 or a.rounds < 1:
        ap.error("--batch, --steps and --rounds must be at least 1")
    if a.batch > 256 or a.steps > 10_000_000 or a.rounds > 100:
        ap.error("--batch is at most 256, --steps 10,000,000 and --rounds 100")
    try:
        measure(a, ap)
    except kvshard.Error as e:
        print(f"step_cost: {e}", file=sys.stderr)
        return 1
    except OSError as e:
        print(f"step_cost: writing the report: {e.strerror}", file=sys.stderr)
        return 1
    return 0


def measure(a, ap):
    with kvshard.Node(topology="bundled", device="cpu", budget="16GiB", tp=1, pp=1,
                      max_running=max(64, a.batch), bind_numa=False) as node:
        if a.batch > node.num_pages:
            ap.error(f"--batch {a.batch} exceeds the node's {node.num_pages} pages")
        P = node.page
        for r in range(a.batch):
            node.admit(r + 1)
            node.bind(r + 1, np.arange(r * P, (r + 1) * P, dtype=np.int64))
        node.step()  # the binds land
        requests = np.arange(1, a.batch + 1, dtype=np.uint64)
        positions = np.arange(a.batch, dtype=np.int64) * P + P - 1
        table = np.arange(a.batch, dtype=np.int32).reshape(a.batch, 1)
        batch = {"requests": requests, "positions": positions, "block_table": table}
        raw = NodeBatch(ctypes.sizeof(NodeBatch), a.batch, requests.ctypes.data,
                        positions.ctypes.data, table.ctypes.data, 1, False)
        result = StepResult()
        result.size = ctypes.sizeof(StepResult)
        err = CError()
        step = lib().kvs_node_step
        handle = node._node

        def c_steps():
            for _ in range(a.steps):
                if step(handle, ctypes.byref(raw), ctypes.byref(result), ctypes.byref(err)):
                    raise kvshard.Error("step", err.message.decode())

        def py_steps():
            for _ in range(a.steps):
                node.step(batch)

        c_best = py_best = float("inf")
        for _ in range(a.rounds):
            t = time.perf_counter()
            c_steps()
            c_best = min(c_best, time.perf_counter() - t)
            t = time.perf_counter()
            py_steps()
            py_best = min(py_best, time.perf_counter() - t)
        c_us = c_best / a.steps * 1e6
        py_us = py_best / a.steps * 1e6
        print(f"step_cost: batch {a.batch}, {a.steps} steps, best of {a.rounds} rounds")
        print(f"  kvs_node_step via ctypes (baseline)  {c_us:9.2f} us/step")
        print(f"  Node.step(dict)                      {py_us:9.2f} us/step")
        print(f"  package / baseline                   {py_us / c_us:9.2f}x "
              f"(+{py_us - c_us:.2f} us/step)")
        sys.stdout.flush()  # a full disk is found here, not at exit


if __name__ == "__main__":
    sys.exit(main())
