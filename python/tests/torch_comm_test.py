"""kvshard.torch_comm: a node over a torch.distributed gloo group of two
processes (a FileStore in a temporary folder, gloo on the loopback
interface: nothing leaves the machine). A TP 2 node on the host twin steps
and its check agrees on both ranks; the adapter's unsigned reductions are
exact at the words' extremes; a callback that raises (Exception or
BaseException) becomes kvshard.Error with its text and poisons the
communicator, never a crash; a peer that dies makes the survivor raise.
Point to point (Comm.exchange through torch_comm's batch_isend_irecv):
sends and receives both ways and to itself with zero-byte ones between,
64 MiB each way byte for byte, refusals that change nothing, a raising
callback that poisons, and a peer that dies mid-exchange. Skipped, with the
reason, where torch or torch.distributed's gloo is missing; the same
exchange over loopback ranks (threads) runs without torch."""

import ctypes
import datetime
import threading
import json
import os
import subprocess
import sys
import tempfile
import time
import traceback
import unittest

import numpy as np

import kvshard

SMALL = dict(topology="bundled", device="cpu", budget="2GiB", tp=2, pp=1, max_running=4,
             max_seq_len=65536, bind_numa=False)


def torch_missing():
    """Why torch cannot carry the test, or None."""
    try:
        import torch.distributed as dist
    except ImportError as e:
        return f"{sys.executable} cannot import torch ({e}); Debian's python3-torch has it"
    if not dist.is_available() or not dist.is_gloo_available():
        return "this torch build has no torch.distributed gloo backend"
    return None


# ---- the ranks: `torch_comm_test.py worker MODE RANK FOLDER` ----

def page_locs(page, first, count):
    return np.arange(first * page, (first + count) * page, dtype=np.int64)


def start_group(rank, folder, seconds):
    import torch.distributed as dist
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")  # localhost only
    store = dist.FileStore(os.path.join(folder, "store"), 2)
    dist.init_process_group("gloo", store=store, rank=rank, world_size=2,
                            timeout=datetime.timedelta(seconds=seconds))
    return dist


def words_after(state, values, op):
    w = (ctypes.c_uint64 * len(values))(*values)
    state.allreduce_u64(ctypes.addressof(w), len(values), op)
    return list(w)


def steps_and_check(comm, rank):
    """Four steps of a TP 2 node, the leader binding 3 pages each time."""
    with kvshard.Node(comm, **SMALL) as node:
        for step in range(4):
            if node.is_leader:
                node.admit(10 + step)
                node.bind(10 + step, page_locs(node.page, 3 * step, 3))
            node.step()
        return node.check()


def mode_node(rank, folder):
    dist = start_group(rank, folder, 60)
    out = {}
    comm = kvshard.torch_comm(timeout_ms=20000)
    out["comm"] = [comm.backend, comm.rank, comm.size]
    state = comm._keep
    # The adapter's own collectives at the words' extremes.
    top = (1 << 64) - 1
    out["min"] = words_after(state, [top - rank, rank, 1 << 63], 0)
    out["max"] = words_after(state, [top - rank, rank, 1 << 63], 1)
    out["sum"] = words_after(state, [top - rank, rank, 1 << 63], 2)
    buf = (ctypes.c_uint8 * 5)(*(b"hello" if rank == 1 else b"....."))
    state.broadcast(ctypes.addressof(buf), 5, 1)
    out["broadcast"] = bytes(buf).decode()
    state.barrier()
    out["check"] = steps_and_check(comm, rank)
    comm.close()
    # A subgroup (torch's src is then a global rank) and a ProcessGroup
    # given to Node directly.
    sub = dist.new_group([0, 1])
    with kvshard.torch_comm(sub, timeout_ms=20000) as c:
        buf = (ctypes.c_uint8 * 3)(*(b"sub" if rank == 1 else b"..."))
        c._keep.broadcast(ctypes.addressof(buf), 3, 1)
        out["subgroup"] = bytes(buf).decode()
    out["direct"] = steps_and_check(dist.group.WORLD, rank)
    try:
        kvshard.torch_comm(timeout_ms=0)
    except kvshard.Error as e:
        out["zero_timeout"] = [e.status, str(e)]
    dist.destroy_process_group()
    return out


def mode_raise(rank, folder):
    dist = start_group(rank, folder, 60)
    out = {}
    comm = kvshard.torch_comm(timeout_ms=20000)
    with kvshard.Node(comm, **SMALL) as node:
        node.step()

        def boom(*args):
            raise RuntimeError(f"injected failure on rank {rank}")

        comm._keep.broadcast = boom  # the next step's broadcast raises, on both ranks
        for attempt in ("first", "later"):
            try:
                node.step()
                out[attempt] = None
            except kvshard.Error as e:
                out[attempt] = [e.status, str(e)]
    comm.close()
    # A BaseException (an interrupt, say) is a failure too, never success.
    comm = kvshard.torch_comm(timeout_ms=20000)

    def interrupt(*args):
        raise KeyboardInterrupt("interrupted in a collective")

    comm._keep.broadcast = comm._keep.allreduce_u64 = comm._keep.barrier = interrupt
    try:
        kvshard.Node(comm, **SMALL)
        out["base"] = None
    except kvshard.Error as e:
        out["base"] = [e.status, str(e)]
    comm.close()
    dist.destroy_process_group()
    return out


def mode_dies(rank, folder):
    start_group(rank, folder, 10)
    out = {}
    comm = kvshard.torch_comm(timeout_ms=5000)
    node = kvshard.Node(comm, **SMALL)
    node.step()
    if rank == 1:
        os._exit(0)  # dies between steps, its sockets closed by the kernel
    start = time.monotonic()
    try:
        for _ in range(3):
            node.step()
        node.check()
        out["error"] = None
    except kvshard.Error as e:
        out["error"] = [e.status, str(e)]
    out["elapsed"] = time.monotonic() - start
    try:
        node.step()
    except kvshard.Error as e:
        out["after"] = [e.status, str(e)]
    return out


def message(src, dst, k, n):
    """The k-th message from src to dst: n bytes, different for every
    position, pair and k."""
    i = np.arange(n, dtype=np.uint64)
    x = (i + np.uint64(1)) * np.uint64(0x9E3779B97F4A7C15) ^ np.uint64(
        (src << 48) | (dst << 32) | (k << 16))
    return ((x ^ (x >> np.uint64(29))) >> np.uint64(24)).astype(np.uint8)


def pairs_batch(comm, sizes):
    """Every rank sends two messages to every rank (itself included) and
    receives two from each, with zero-byte transfers between; even ranks
    receive first. Returns the batch and what each receive must hold."""
    rank, n = comm.rank, comm.size
    sends, receives, expect = [], [], []
    for peer in range(n):
        for k in range(2):
            sends.append((peer, "send", message(rank, peer, k, sizes(rank, peer, k))))
            buf = np.zeros(sizes(peer, rank, k), dtype=np.uint8)
            receives.append((peer, "recv", buf))
            expect.append((buf, message(peer, rank, k, buf.size)))
    first, second = (receives, sends) if rank % 2 == 0 else (sends, receives)
    batch = []
    for i, t in enumerate(first):
        batch += [t, ((rank + i) % n, "send", bytearray())]
    return batch + second, expect


def wrong(expect):
    """Which receives differ from their message: [(index, first wrong byte)]."""
    out = []
    for i, (got, want) in enumerate(expect):
        if not np.array_equal(got, want):
            out.append((i, int(np.flatnonzero(got != want)[0])))
    return out


def mode_exchange(rank, folder):
    dist = start_group(rank, folder, 60)
    out = {}
    comm = kvshard.torch_comm(timeout_ms=20000)
    batch, expect = pairs_batch(comm, lambda s, d, k: 1000 + 37 * s + 11 * d + 5 * k)
    comm.exchange(batch)
    out["pairs_wrong"] = wrong(expect)
    big = 64 << 20
    got = np.zeros(big, dtype=np.uint8)
    start = time.monotonic()
    comm.exchange([(1 - rank, "recv", got), (1 - rank, "send", message(rank, 1 - rank, 9, big))])
    out["large_seconds"] = time.monotonic() - start
    out["large_equal"] = bool(np.array_equal(got, message(1 - rank, rank, 9, big)))
    # Refusals change nothing: the next batch matches as if they never were.
    buf = np.zeros(64, dtype=np.uint8)
    refusals = []
    for bad in ([(2, "recv", buf)], [(1 - rank, "recv", b"read-only")],
                [(1 - rank, "both", buf)], [(1 - rank, "send")]):
        try:
            comm.exchange(bad)
            refusals.append(None)
        except (kvshard.Error, ValueError, TypeError) as e:
            refusals.append([type(e).__name__, getattr(e, "status", None), str(e)])
    out["refusals"] = refusals
    comm.exchange([(1 - rank, "send", message(rank, 1 - rank, 10, 64)), (1 - rank, "recv", buf)])
    out["after_refusals"] = bool(np.array_equal(buf, message(1 - rank, rank, 10, 64)))
    # The node's collectives still run over the same communicator.
    out["check"] = steps_and_check(comm, rank)

    # A raising exchange poisons, naming the call and its text.
    def boom(*args):
        raise RuntimeError(f"injected exchange failure on rank {rank}")

    comm._keep.exchange = boom
    for attempt in ("first", "later"):
        try:
            comm.exchange([(1 - rank, "send", buf)])
            out[attempt] = None
        except kvshard.Error as e:
            out[attempt] = [e.status, str(e)]
    comm.close()
    dist.destroy_process_group()
    return out


def mode_exchange_dies(rank, folder):
    start_group(rank, folder, 10)
    out = {}
    comm = kvshard.torch_comm(timeout_ms=5000)
    buf = np.zeros(1 << 20, dtype=np.uint8)
    comm.exchange([(1 - rank, "send", buf), (1 - rank, "recv", buf.copy())])
    if rank == 1:
        os._exit(0)  # dies between exchanges, its sockets closed by the kernel
    start = time.monotonic()
    try:
        comm.exchange([(1, "recv", buf), (1, "send", buf.copy())])
        out["error"] = None
    except kvshard.Error as e:
        out["error"] = [e.status, str(e)]
    out["elapsed"] = time.monotonic() - start
    try:
        comm.exchange([(0, "send", buf), (0, "recv", buf.copy())])
    except kvshard.Error as e:
        out["after"] = [e.status, str(e)]
    return out


def worker(mode, rank, folder):
    rank = int(rank)
    try:
        out = {"node": mode_node, "raise": mode_raise, "dies": mode_dies,
               "exchange": mode_exchange,
               "exchange_dies": mode_exchange_dies}[mode](rank, folder)
    except BaseException:
        out = {"exception": traceback.format_exc()}
    with open(os.path.join(folder, f"out{rank}.json"), "w") as f:
        json.dump(out, f)
    sys.stdout.flush()
    os._exit(0)  # no teardown of a group whose peer may be gone


# ---- the test ----

@unittest.skipIf(torch_missing(), torch_missing())
class TorchComm(unittest.TestCase):
    def run_pair(self, mode, ranks=(0, 1), timeout=240):
        with tempfile.TemporaryDirectory() as folder:
            procs = [subprocess.Popen([sys.executable, os.path.abspath(__file__), "worker", mode,
                                       str(r), folder], stdout=subprocess.PIPE,
                                      stderr=subprocess.STDOUT) for r in (0, 1)]
            logs = []
            for p in procs:
                try:
                    logs.append(p.communicate(timeout=timeout)[0].decode(errors="replace"))
                except subprocess.TimeoutExpired:
                    for q in procs:
                        q.kill()
                    self.fail(f"{mode}: a rank ran past {timeout} s")
            outs = []
            for r in ranks:
                path = os.path.join(folder, f"out{r}.json")
                self.assertTrue(os.path.exists(path), f"{mode}: rank {r} wrote nothing:\n{logs[r]}")
                with open(path) as f:
                    out = json.load(f)
                self.assertNotIn("exception", out, f"{mode}: rank {r}:\n{out.get('exception')}")
                outs.append(out)
            return outs

    def test_a_tp2_node_steps_and_checks_over_a_gloo_group(self):
        outs = self.run_pair("node")
        top = (1 << 64) - 1
        for rank, out in enumerate(outs):
            self.assertEqual(out["comm"], ["callbacks", rank, 2])
            self.assertEqual(out["min"], [top - 1, 0, 1 << 63], "unsigned order, not int64's")
            self.assertEqual(out["max"], [top, 1, 1 << 63])
            self.assertEqual(out["sum"], [(2 * top - 1) % (1 << 64), 1, 0], "wraps mod 2**64")
            self.assertEqual(out["broadcast"], "hello")
            self.assertEqual(out["subgroup"], "sub")
            for key in ("check", "direct"):
                self.assertTrue(out[key]["ok"], out[key])
                self.assertEqual(out[key]["kind"], "agree")
            self.assertEqual(out["check"]["step"], 3)
            self.assertEqual(out["zero_timeout"][0], "KVS_ERR_INVALID_ARGUMENT")
            self.assertIn("timeout_ms is 0", out["zero_timeout"][1])
        self.assertEqual(outs[0]["check"]["digest"], outs[1]["check"]["digest"])
        self.assertEqual(outs[0]["direct"]["digest"], outs[1]["direct"]["digest"])

    def test_a_raising_callback_is_a_kvshard_error_with_its_text(self):
        for rank, out in enumerate(self.run_pair("raise")):
            status, message = out["first"]
            self.assertEqual(status, "KVS_ERR_COMM")
            self.assertIn("torch.distributed broadcast (gloo) raised RuntimeError: injected "
                          f"failure on rank {rank}", message)
            status, message = out["later"]
            self.assertEqual(status, "KVS_ERR_COMM")
            self.assertIn("stopped earlier", message)
            self.assertIn(f"injected failure on rank {rank}", message)
            status, message = out["base"]
            self.assertEqual(status, "KVS_ERR_COMM")
            self.assertIn("raised KeyboardInterrupt: interrupted in a collective", message)

    def test_a_peer_that_dies_makes_the_survivor_raise(self):
        (out,) = self.run_pair("dies", ranks=(0,))
        self.assertIsNotNone(out["error"], "the survivor stepped on alone")
        status, message = out["error"]
        self.assertIn(status, ("KVS_ERR_COMM", "KVS_ERR_TIMEOUT"))
        self.assertIn("torch.distributed", message)
        self.assertLess(out["elapsed"], 60, "bounded by the group's 10 s timeout")
        self.assertIn("stopped earlier", out["after"][1])


    def test_an_exchange_moves_every_pairs_bytes_through_batch_isend_irecv(self):
        for rank, out in enumerate(self.run_pair("exchange")):
            self.assertEqual(out["pairs_wrong"], [], "receives that differ (index, first byte)")
            self.assertTrue(out["large_equal"], "64 MiB each way")
            self.assertLess(out["large_seconds"], 60)
            bad_peer, read_only, bad_kind, short = out["refusals"]
            self.assertEqual(bad_peer[:2], ["Error", "KVS_ERR_INVALID_ARGUMENT"])
            self.assertIn("peer 2 is outside a group of 2 ranks", bad_peer[2])
            self.assertEqual(read_only[0], "ValueError")
            self.assertIn("is read-only, and a receive writes it", read_only[2])
            self.assertEqual(bad_kind[0], "ValueError")
            self.assertIn("kind must be 'send' or 'recv', got 'both'", bad_kind[2])
            self.assertEqual(short[0], "TypeError")
            self.assertTrue(out["after_refusals"], "a refusal moved something")
            self.assertTrue(out["check"]["ok"], out["check"])
            status, text = out["first"]
            self.assertEqual(status, "KVS_ERR_COMM")
            self.assertIn("callbacks exchange (send of 64 bytes to rank", text)
            self.assertIn("torch.distributed batch_isend_irecv (gloo) raised RuntimeError: "
                          f"injected exchange failure on rank {rank}", text)
            status, text = out["later"]
            self.assertEqual(status, "KVS_ERR_COMM")
            self.assertIn("failed earlier", text)

    def test_a_peer_that_dies_fails_the_survivors_exchange(self):
        (out,) = self.run_pair("exchange_dies", ranks=(0,))
        self.assertIsNotNone(out["error"], "the exchange with a dead peer succeeded")
        status, text = out["error"]
        self.assertIn(status, ("KVS_ERR_COMM", "KVS_ERR_TIMEOUT"))
        self.assertIn("receive of 1048576 bytes from rank 1", text)
        self.assertIn("torch.distributed batch_isend_irecv", text)
        self.assertLess(out["elapsed"], 60, "bounded by the group's 10 s timeout")
        self.assertIn("failed earlier", out["after"][1])


class LoopbackExchange(unittest.TestCase):
    """Comm.exchange over ranks as threads: no torch needed."""

    def test_every_pair_both_ways_and_to_itself(self):
        for n in (2, 3):
            comms = kvshard.loopback_comms(n, timeout_ms=20000)
            results = [None] * n

            def rank_body(comm):
                batch, expect = pairs_batch(comm, lambda s, d, k: 1 + (s * 131 + d * 17 + k) % 700)
                comm.exchange(batch)
                results[comm.rank] = wrong(expect)

            threads = [threading.Thread(target=rank_body, args=(c,)) for c in comms]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            self.assertEqual(results, [[]] * n)
            for c in comms:
                c.close()

    def test_refusals_name_what_is_wrong(self):
        comm = kvshard.self_comm()
        with self.assertRaisesRegex(TypeError, r"transfer 0 must be \(peer, 'send' or 'recv', "
                                    r"buffer\)"):
            comm.exchange([(0, "send")])
        with self.assertRaisesRegex(TypeError, "transfer 0's buffer must support the buffer "
                                    "protocol"):
            comm.exchange([(0, "send", 5)])
        with self.assertRaisesRegex(ValueError, "not C-contiguous"):
            comm.exchange([(0, "send", np.zeros((4, 4))[:, 1])])
        with self.assertRaisesRegex(ValueError, "transfer 0's peer = 2147483648 is outside"):
            comm.exchange([(2 ** 31, "send", b"x")])
        with self.assertRaises(kvshard.Error) as e:
            comm.exchange([(0, "send", b"abc")])
        self.assertEqual(e.exception.status, "KVS_ERR_INVALID_ARGUMENT")
        self.assertIn("every send is to itself and needs its receive", str(e.exception))
        got = bytearray(3)
        comm.exchange([(0, "recv", got), (0, "send", b"abc"), (0, "send", b"")])
        self.assertEqual(bytes(got), b"abc")
        comm.close()


class Refusals(unittest.TestCase):
    """What torch_comm refuses before any group is asked."""

    @unittest.skipIf(torch_missing(), torch_missing())
    def test_refusals_name_what_is_wrong(self):
        import torch.distributed as dist
        with self.assertRaisesRegex(TypeError, "group must be None or a "
                                    "torch.distributed.ProcessGroup, got str"):
            kvshard.torch_comm("world")
        with self.assertRaisesRegex(ValueError, "timeout_ms = 2147483648 is outside"):
            kvshard.torch_comm(timeout_ms=2 ** 31)
        if not dist.is_initialized():
            with self.assertRaises(kvshard.Error) as e:
                kvshard.torch_comm()
            self.assertEqual(e.exception.status, "KVS_ERR_INVALID_ARGUMENT")
            self.assertIn("init_process_group first", str(e.exception))


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "worker":
        worker(*sys.argv[2:5])
    unittest.main()
