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
"""

import argparse
import ctypes
import time

import numpy as np

import kvshard
from kvshard._lib import CError, NodeBatch, StepResult, lib


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--steps", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=5)
    a = ap.parse_args()
    if a.batch < 1 or a.steps < 1 or a.rounds < 1:
        ap.error("--batch, --steps and --rounds must be at least 1")
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


if __name__ == "__main__":
    main()
