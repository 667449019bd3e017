"""kvshard.torch_comm: a node over a torch.distributed gloo group of two
processes (a FileStore in a temporary folder, gloo on the loopback
interface: nothing leaves the machine). A TP 2 node on the host twin steps
and its check agrees on both ranks; the adapter's unsigned reductions are
exact at the words' extremes; a callback that raises (Exception or
BaseException) becomes kvshard.Error with its text and poisons the
communicator, never a crash; a peer that dies makes the survivor raise.
Skipped, with the reason, where torch or torch.distributed's gloo is
missing."""

import ctypes
import datetime
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


def worker(mode, rank, folder):
    rank = int(rank)
    try:
        out = {"node": mode_node, "raise": mode_raise, "dies": mode_dies}[mode](rank, folder)
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
