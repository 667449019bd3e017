"""What the Python package adds to a step, measured in one run:

    python3 step_cost.py [--batch 16,64] [--steps 2000] [--rounds 5]

One rank on the host twin (bundled topology, device "cpu", DSV4-Flash).
For each batch size B, B requests decode in an engine's loop: every step
each request's position advances by one, a request entering a new page
gets it bound and the page that left its window freed (the leader's calls
between steps), a request reaching the end of its pages finishes and a new
one is admitted in its place, and the step carries those bindings with
the batch: the requests, their positions and their block-table rows
(their pages from the first, as the reference engine passes them). The
loop's steps go three ways, alternating in rounds of --steps steps each so
all see the same machine and the same mix of bindings:
  - baseline: kvs_node_step called directly through ctypes with the batch
    struct prepared once over the loop's arrays, which the loop updates in
    place (the library's step plus one foreign call);
  - package: Node.step(dict) over the same arrays, as an engine calls it
    (argument checks, numpy conversions, the result dict with the ring
    contexts copied out);
  - stepper: Node.stepper's step(n) after the loop's rows are copied into
    its arrays (untimed, as the baseline's arrays are filled untimed), its
    ring contexts taken in place from the result.
Only the step calls are timed, each alone. It prints, per batch, the
median microseconds per step of each and their ratio (the median: on
shared cores a step the scheduler preempts costs milliseconds, which a
mean of a few thousand steps of microseconds cannot absorb), then the
means.

Exit status: 0 measured; 1 the library refused (its message on stderr) or
the report could not be written; 2 bad usage (a flag given twice, a value
out of range: each --batch 1 to 256 (the node is a 16 GiB host twin),
--steps 1 to 10,000,000, --rounds 1 to 100).
"""

import argparse
import ctypes
import sys
import time

import numpy as np

import kvshard
from _cli import parse_once, unwritable
from kvshard._lib import CError, NodeBatch, StepResult, lib

SPAN = 8  # pages a request runs through before it finishes


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    ap.add_argument("--batch", default="16,64",
                    help="batch sizes, comma-separated (default 16,64)")
    ap.add_argument("--steps", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=5)
    a = parse_once(ap)
    try:
        a.batches = [int(b) for b in a.batch.split(",")]
    except ValueError:
        ap.error(f"--batch takes sizes separated by commas, got {a.batch!r}")
    if min(a.batches) < 1 or a.steps < 1 or a.rounds < 1:
        ap.error("--batch, --steps and --rounds must be at least 1")
    if max(a.batches) > 256 or a.steps > 10_000_000 or a.rounds > 100:
        ap.error("--batch is at most 256, --steps 10,000,000 and --rounds 100")
    try:
        with kvshard.Node(topology="bundled", device="cpu", budget="16GiB", tp=1, pp=1,
                          max_running=max(64, *a.batches), bind_numa=False) as node:
            if max(a.batches) * SPAN > node.num_pages - 1:
                ap.error(f"--batch {max(a.batches)} needs {max(a.batches) * SPAN} pages; the "
                         f"node has {node.num_pages - 1}")
            print(f"step_cost: {a.rounds} rounds of {a.steps} steps each way, a decode loop on "
                  f"one host-twin rank")
            for b in a.batches:
                measure(node, b, a.steps, a.rounds)
            sys.stdout.flush()  # a full disk is found here, not at exit
    except kvshard.Error as e:
        print(f"step_cost: {e}", file=sys.stderr)
        return 1
    except OSError as e:
        return unwritable("step_cost", e)
    return 0


class Loop:
    """B requests decoding: request slot r owns full pages [r * SPAN,
    (r + 1) * SPAN); its position starts one page in (staggered so pages
    fill on different steps) and keeps the last two pages bound."""

    def __init__(self, node, batch, first_id):
        self.node, self.B, self.P = node, batch, node.page
        P = self.P
        self.next_id = first_id
        self.requests = np.zeros(batch, dtype=np.uint64)
        self.positions = np.zeros(batch, dtype=np.int64)
        self.table = (np.arange(batch, dtype=np.int32)[:, None] * SPAN
                      + np.arange(SPAN, dtype=np.int32)[None, :])
        for r in range(batch):
            self.start(r, P + (r * 37) % P)
        node.step()  # the admissions and binds land

    def locs(self, r, page):
        full = int(self.table[r, page])
        return np.arange(full * self.P, (full + 1) * self.P, dtype=np.int64)

    def start(self, r, pos):
        self.requests[r] = self.next_id
        self.next_id += 1
        self.positions[r] = pos
        self.node.admit(int(self.requests[r]))
        for page in range(max(0, pos // self.P - 1), pos // self.P + 1):
            self.node.bind(int(self.requests[r]), self.locs(r, page))

    def advance(self):
        """The leader's calls between two steps, then the next positions."""
        P, node = self.P, self.node
        self.positions += 1
        for r in np.flatnonzero(self.positions % P == 0):
            pos = int(self.positions[r])
            if pos // P == SPAN:  # done: its pages back, a new request in its place
                node.free(np.concatenate([self.locs(r, pos // P - 2), self.locs(r, pos // P - 1)]))
                node.finish(int(self.requests[r]))
                self.start(r, P)
            else:
                if pos // P >= 2:
                    node.free(self.locs(r, pos // P - 2))
                node.bind(int(self.requests[r]), self.locs(r, pos // P))

    def close(self):
        """Every request finished, its pages back."""
        for r in range(self.B):
            self.node.free(np.concatenate([self.locs(r, page) for page in range(SPAN)]))
            self.node.finish(int(self.requests[r]))
        self.node.step()


def measure(node, batch, steps, rounds):
    loop = Loop(node, batch, first_id=1 + batch * 1_000_000)
    args = {"requests": loop.requests, "positions": loop.positions, "block_table": loop.table}
    raw = NodeBatch(ctypes.sizeof(NodeBatch), batch, loop.requests.ctypes.data,
                    loop.positions.ctypes.data, loop.table.ctypes.data, SPAN, False)
    result = StepResult()
    result.size = ctypes.sizeof(StepResult)
    err = CError()
    step = lib().kvs_node_step
    handle = node._node
    clock = time.perf_counter

    def c_steps(out):
        for i in range(steps):
            loop.advance()
            t = clock()
            status = step(handle, ctypes.byref(raw), ctypes.byref(result), ctypes.byref(err))
            out[i] = clock() - t
            if status:
                raise kvshard.Error("step", err.message.decode())

    def py_steps(out):
        for i in range(steps):
            loop.advance()
            t = clock()
            node.step(args)
            out[i] = clock() - t

    # The stepper's arrays are the loop's: it fills them in place.
    fast = node.stepper(SPAN)
    fast_step = fast.step

    def fast_steps(out):
        for i in range(steps):
            loop.advance()
            fast.requests[:batch] = loop.requests
            fast.positions[:batch] = loop.positions
            fast.block_table[:batch] = loop.table
            t = clock()
            rows = fast_step(batch)
            rows.ring  # the results as an engine takes them (in place)
            out[i] = clock() - t

    c_times = np.zeros((rounds, steps))
    py_times = np.zeros((rounds, steps))
    fast_times = np.zeros((rounds, steps))
    for r in range(rounds):
        c_steps(c_times[r])
        py_steps(py_times[r])
        fast_steps(fast_times[r])
    loop.close()
    print(f"batch {batch} (block-table rows of {SPAN} pages):")
    for what, stat in (("median", np.median), ("mean", np.mean)):
        c_us, py_us, fast_us = (stat(t) * 1e6 for t in (c_times, py_times, fast_times))
        print(f"  {what:6} kvs_node_step via ctypes (baseline)  {c_us:9.2f} us/step")
        print(f"  {what:6} Node.step(dict)                      {py_us:9.2f} us/step")
        print(f"  {what:6} Stepper.step(n)                      {fast_us:9.2f} us/step")
        print(f"  {what:6} Node.step / baseline                 {py_us / c_us:9.2f}x "
              f"(+{py_us - c_us:.2f} us/step)")
        print(f"  {what:6} Stepper.step / baseline              {fast_us / c_us:9.2f}x "
              f"(+{fast_us - c_us:.2f} us/step)")

if __name__ == "__main__":
    sys.exit(main())
