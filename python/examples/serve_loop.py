"""A toy engine loop over kvshard, one process per rank:

    mpirun -np 4 python3 serve_loop.py [--steps 500] [--seed 1] [--torch]

The leader (rank 0) schedules: it admits requests, gives each full-pool
pages as it grows, binds the newest page's window page, frees the pages a
request's window has left and finishes requests. Like an engine's
scheduler output, the batch goes to every rank over MPI; every rank then
steps its node and reads the ring contexts of the batch. At the end every
rank translates every bound location, checks with its peers, and views its
mapping in place (numpy.from_dlpack, or torch.from_dlpack with --torch),
which must equal the translation.
"""

import argparse
import sys
import zlib

import numpy as np

import kvshard


class Scheduler:
    """The leader's toy scheduler: requests of random lengths, decoding one
    token per step, each holding its last two pages in the window."""

    def __init__(self, node, seed, max_running):
        self.node = node
        self.rng = np.random.default_rng(seed)
        self.page = node.page
        # The engine's full pages: num_pages counts the reserved dummy page
        # (the last), which is never bound; usable_pages leaves it out.
        self.free_full = list(range(node.usable_pages - 1, -1, -1))
        self.max_running = max_running
        self.running = {}  # request -> {"pages": [...], "pos": int, "end": int}
        self.next_id = 1

    def _bind_page(self, request, r):
        full = self.free_full.pop()
        r["pages"].append(full)
        locs = np.arange(full * self.page, (full + 1) * self.page, dtype=np.int64)
        self.node.bind(request, locs)

    def schedule(self):
        """This step's changes, then its batch (requests, positions, rows)."""
        P = self.page
        for request in [q for q, r in self.running.items() if r["pos"] >= r["end"]]:
            r = self.running.pop(request)
            for full in r["pages"][-2:]:
                self.node.free(np.arange(full * P, (full + 1) * P, dtype=np.int64))
            self.free_full.extend(r["pages"])
            self.node.finish(request)
        # Admission control from the node's own count: a request binds a
        # window page now and holds at most three (the newest bound before
        # the oldest is freed), so one is admitted only while three are free
        # for it beyond what the running ones may still take (one each).
        while (len(self.running) < self.max_running and len(self.free_full) > 8
               and self.node.free_window_pages() >= 3 + len(self.running)
               and self.rng.random() < 0.5):
            request = self.next_id
            self.next_id += 1
            self.node.admit(request)
            r = {"pages": [], "pos": 0, "end": int(self.rng.integers(P, 6 * P))}
            self.running[request] = r
        for request, r in self.running.items():
            if r["pos"] // P >= len(r["pages"]):
                self._bind_page(request, r)
                if len(r["pages"]) >= 3:  # left the window: its binding goes back
                    old = r["pages"][-3]
                    self.node.free(np.arange(old * P, (old + 1) * P, dtype=np.int64))
        requests = np.array(list(self.running), dtype=np.uint64)
        positions = np.array([r["pos"] for r in self.running.values()], dtype=np.int64)
        stride = max([len(r["pages"]) for r in self.running.values()], default=1)
        table = np.full((len(requests), stride), -1, dtype=np.int32)
        for i, r in enumerate(self.running.values()):
            table[i, :len(r["pages"])] = r["pages"]
        for r in self.running.values():
            r["pos"] += 1
        return {"requests": requests, "positions": positions, "block_table": table}

    def bound_locations(self):
        P = self.page
        pages = [full for r in self.running.values() for full in r["pages"][-2:]]
        return np.concatenate([np.arange(f * P, (f + 1) * P) for f in pages]) if pages else \
            np.zeros(0, dtype=np.int64)


def run(node, comm, steps, seed):
    """The loop; returns (contexts digest, checks passed, bound locations)."""
    sched = Scheduler(node, seed, node.max_running - 1) if node.is_leader else None
    digest = 0
    checks = 0
    for step in range(steps):
        batch = comm.bcast(sched.schedule() if sched else None, root=0)
        result = node.step(batch)
        if result["diverged"]:
            raise kvshard.Error("KVS_ERR_DIVERGENCE", result["message"])
        # Every rank read the same ring contexts: fold them in.
        for name in ("own", "prev", "ring", "csa_loc", "hca_loc"):
            digest = zlib.crc32(result[name].tobytes(), digest)
        if step % 50 == 49:
            report = node.check()
            if not report["ok"]:
                raise kvshard.Error("KVS_ERR_DIVERGENCE", report["message"])
            checks += 1
    locs = comm.bcast(sched.bound_locations() if sched else None, root=0)
    return digest, checks, locs


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=500)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--torch", action="store_true",
                        help="view the mapping with torch.from_dlpack")
    args = parser.parse_args(argv)
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    with kvshard.Node(comm, topology="bundled", device="cpu", tp=comm.size, pp=1,
                      budget="4GiB", max_running=9, max_seq_len=8192, bind_numa=False,
                      timeout_ms=20000) as node:
        digest, checks, locs = run(node, comm, args.steps, args.seed)
        window = node.translate(locs)
        mapping = node.tables()["mapping"]
        if args.torch:
            import torch
            seen = torch.from_dlpack(mapping)[torch.from_numpy(locs)].numpy()
        else:
            seen = np.from_dlpack(mapping)[locs]
        if not np.array_equal(seen, window):
            raise SystemExit(f"rank {node.rank}: the mapping viewed in place differs from "
                             "translate")
        report = node.check()
        everyone = comm.allgather((digest, window.tobytes(), report["digest"], report["ok"]))
        if node.rank == 0:
            agree = all(e == everyone[0] for e in everyone)
            print(f"ranks {comm.size}, steps {args.steps}, checks {checks + 1}, bound locations "
                  f"{len(locs)}, digest {report['digest']:016x}, "
                  f"{'agree' if agree and report['ok'] else 'DIFFER'}")
            if not (agree and report["ok"]):
                return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
