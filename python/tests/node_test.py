"""kvshard's Python node on one process: one rank, and ranks as threads
(whose collectives only complete because each call releases the GIL)."""

import gc
import os
import subprocess
import sys
import threading
import unittest

import numpy as np

import kvshard
from kvshard import _dlpack
from kvshard._options import NODE_OPTIONS, NODE_PYTHON_OPTIONS, library_names

try:
    import torch
except ImportError:  # python3-torch is optional
    torch = None

SMALL = dict(topology="bundled", device="cpu", budget="2GiB", tp=1, pp=1, max_running=4,
             max_seq_len=65536, bind_numa=False)


def page_locs(page, first, count):
    return np.arange(first * page, (first + count) * page, dtype=np.int64)


class OneRank(unittest.TestCase):
    def test_the_engine_calls_in_order(self):
        with kvshard.Node(**SMALL) as node:
            self.assertEqual((node.rank, node.size, node.device), (0, 1, "cpu"))
            self.assertTrue(node.is_leader)
            self.assertGreater(node.num_pages, 0)
            slot = node.admit(7)
            self.assertGreaterEqual(slot, 0)
            locs = page_locs(node.page, 3, 2)
            node.bind(7, locs)
            r = node.step()
            self.assertEqual(r["binds"], 3)  # two pages and the request's slot
            window = node.translate(locs)
            self.assertTrue((window >= 0).all())
            self.assertEqual(len(set(window.tolist())), len(window))
            report = node.check()
            self.assertTrue(report["ok"])
            self.assertIsInstance(report["digest"], int)
            node.free(locs)
            node.finish(7)
            self.assertEqual(node.step()["frees"], 3)
            self.assertTrue((node.translate(locs) == -1).all())

    def test_a_batch_reads_its_ring_contexts(self):
        with kvshard.Node(**SMALL) as node:
            P = node.page
            node.admit(1)
            node.bind(1, page_locs(P, 0, 2))
            node.step()
            batch = {"requests": [1, 1], "positions": [P + 5, -1],
                     "block_table": np.array([[0, 1], [0, 1]])}
            r = node.step(batch)
            self.assertEqual(r["n"], 2)
            self.assertEqual(r["ring"].shape, (2, P))
            self.assertEqual(r["own"][0], node.translate([P + 5])[0])
            self.assertEqual(r["own"][1], -1, "an idle row reads nothing")

    def test_locations_come_as_lists_arrays_or_tensors(self):
        with kvshard.Node(**SMALL) as node:
            P = node.page
            node.admit(1)
            node.bind(1, list(range(0, P)))
            node.bind(1, np.arange(P, 2 * P, dtype=np.int32))
            if torch is not None:
                node.bind(1, torch.arange(2 * P, 3 * P, dtype=torch.int64))
            node.step()
            self.assertTrue((node.translate(range(0, P)) >= 0).all())
            with self.assertRaisesRegex(TypeError, "locs must hold integers"):
                node.bind(1, [0.5])
            with self.assertRaisesRegex(TypeError, "request must be a non-negative int"):
                node.admit(-1)

    def test_refusals_raise_with_the_libraries_words(self):
        with self.assertRaises(kvshard.Error) as e:
            kvshard.Node(**dict(SMALL, page=0))
        self.assertEqual(e.exception.status, "KVS_ERR_PARSE")
        self.assertEqual(str(e.exception), "--page needs a page of 1 to 1048576 tokens, got '0'")
        with self.assertRaises(kvshard.Error) as e:
            kvshard.Node(**dict(SMALL, budget="12XB"))
        self.assertIn("--budget", str(e.exception))
        # A number's text is read by the library's parser, as on the
        # command line: what it refuses is refused in its words.
        with self.assertRaises(kvshard.Error) as e:
            kvshard.Node(**dict(SMALL, page="0x80"))
        self.assertEqual(e.exception.status, "KVS_ERR_PARSE")
        self.assertIn("--page", str(e.exception))
        self.assertIn("0x80", str(e.exception))
        with self.assertRaises(kvshard.Error) as e:
            kvshard.Node(**dict(SMALL, budget="1KiB"))
        self.assertEqual(e.exception.status, "KVS_ERR_BUDGET_TOO_SMALL")
        with kvshard.Node(**SMALL) as node:
            node.admit(1)
            with self.assertRaises(kvshard.Error) as e:
                node.bind(1, [0, 1, 2])  # part of a page
            self.assertEqual(e.exception.status, "KVS_ERR_PARTIAL_PAGE")
            with self.assertRaises(kvshard.Error) as e:
                node.finish(99)
            self.assertIn("99", str(e.exception))
        with self.assertRaises(kvshard.Error) as e:
            node.step()
        self.assertEqual(str(e.exception), "the node is closed")

    def test_options_of_the_wrong_kind_or_name_are_type_errors(self):
        cases = [
            (dict(pgae=128), "unknown option 'pgae'; did you mean 'page'"),
            (dict(page=1.5), "option 'page' takes an int"),
            (dict(page=True), "option 'page' takes an int"),
            (dict(budget=[1]), "option 'budget' takes bytes"),
            (dict(budget_per_gpu="9GiB"), "option 'budget_per_gpu' takes a list"),
            (dict(radix="yes"), "option 'radix' takes True or False"),
            (dict(kv_dtype=8), "option 'kv_dtype' takes a string"),
            (dict(swa_ratio=[0.1]), "option 'swa_ratio' takes a number"),
            (dict(page=None), "option 'page' is None"),
            (dict(timeout_ms="1s"), "option 'timeout_ms' takes an int"),
        ]
        for options, message in cases:
            with self.subTest(options=options):
                with self.assertRaisesRegex(TypeError, message):
                    kvshard.Node(**options)
        with self.assertRaisesRegex(TypeError, "comm must be"):
            kvshard.Node(comm=42)

    def test_the_option_table_is_the_librarys(self):
        names = library_names(kvshard.node_options())
        ours = set(NODE_OPTIONS)
        self.assertEqual(ours - names, set(), "options the library does not take")
        refused = {"window_cache", "engine", "weights_total", "json", "svg"}
        self.assertEqual(names - ours - refused, set(), "library flags the package lacks")
        self.assertEqual(set(NODE_PYTHON_OPTIONS) & names, set())


class Views(unittest.TestCase):
    def test_the_mapping_in_place_equals_translate(self):
        with kvshard.Node(**SMALL) as node:
            P = node.page
            node.admit(1)
            locs = page_locs(P, 9, 2)
            node.bind(1, locs)
            node.step()
            tables = node.tables()
            mapping = np.from_dlpack(tables["mapping"])
            self.assertEqual(mapping.dtype, np.int64)
            np.testing.assert_array_equal(mapping[locs], node.translate(locs))
            node.free(locs)
            node.step()
            self.assertTrue((mapping[locs] == -1).all(), "the view is live, not a copy")

    def test_tiers_are_shaped_and_typed_as_the_kernels_see_them(self):
        for dtype, kv, index in (("bf16", "bfloat16", "bfloat16"), ("fp8", "uint8", "uint8")):
            with kvshard.Node(**dict(SMALL, kv_dtype=dtype)) as node:
                t = node.tables()
                self.assertEqual(list(t), ["mapping", "window", "compressed_4", "compressed_128",
                                           "indexer", "state_4", "state_128", "index_state"])
                self.assertEqual(t["window"].dtype, kv)
                self.assertEqual(t["indexer"].dtype, index)
                self.assertEqual(t["state_4"].dtype, "float32")
                if dtype == "fp8":
                    # pages of payloads then scales, each a multiple of 576 B
                    self.assertEqual(t["window"].shape[2] % 576, 0)
                    self.assertGreaterEqual(t["window"].shape[2], node.page * 584)
                    self.assertEqual(t["indexer"].shape[2] % 16, 0)
                    w = np.from_dlpack(t["window"])  # numpy 1.x makes it read-only
                    self.assertEqual(w.shape, t["window"].shape)
                    self.assertEqual(w.dtype, np.uint8)
                    if torch is not None:
                        torch.from_dlpack(t["window"])[1, 2, 3] = 77
                        self.assertEqual(w[1, 2, 3], 77, "one memory, two views")
                state = np.from_dlpack(t["state_128"])
                self.assertEqual(state.dtype, np.float32)
                self.assertEqual(state.strides[0], t["state_128"].strides[0] * 4)

    @unittest.skipIf(torch is None, "python3-torch is not installed")
    def test_torch_views_bf16_tiers_in_place(self):
        with kvshard.Node(**SMALL) as node:
            t = node.tables()
            w = torch.from_dlpack(t["window"])
            self.assertEqual(w.dtype, torch.bfloat16)
            self.assertEqual(tuple(w.shape), t["window"].shape)
            w[0, 0, 0] = 1.5
            self.assertEqual(torch.from_dlpack(node.tables()["window"])[0, 0, 0].item(), 1.5)
            m = torch.from_dlpack(t["mapping"])
            self.assertEqual(m.dtype, torch.int64)

    def test_views_outlive_close_and_release_their_capsules(self):
        gc.collect()
        before = _dlpack.live_views()
        node = kvshard.Node(**SMALL)
        mapping = np.from_dlpack(node.tables()["mapping"])
        unused = node.tables()["window"].__dlpack__()  # never consumed
        self.assertEqual(_dlpack.live_views(), before + 2)
        node.close()
        self.assertEqual(int(mapping[0]), -1, "the memory is still the node's")
        del mapping, unused
        gc.collect()
        self.assertEqual(_dlpack.live_views(), before)


class ThreadRanks(unittest.TestCase):
    def run_ranks(self, n, body):
        comms = kvshard.loopback_comms(n, timeout_ms=20000)
        errors = [None] * n

        def rank(r):
            try:
                body(r, comms[r])
            except BaseException as e:  # reported below
                errors[r] = e

        threads = [threading.Thread(target=rank, args=(r,)) for r in range(n)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        for c in comms:
            c.close()
        for r, e in enumerate(errors):
            if e is not None:
                raise AssertionError(f"rank {r}: {e!r}") from e

    def test_ranks_agree_and_a_followers_bind_is_refused(self):
        digests, windows = {}, {}

        def body(rank, comm):
            with kvshard.Node(comm, **dict(SMALL, tp=2)) as node:
                P = node.page
                if node.is_leader:
                    node.admit(5)
                    node.bind(5, page_locs(P, 4, 3))
                else:
                    with self.assertRaises(kvshard.Error) as e:
                        node.bind(5, page_locs(P, 4, 3))
                    self.assertIn("rank 1", str(e.exception))
                for _ in range(20):
                    node.step()
                windows[rank] = node.translate(page_locs(P, 4, 3))
                digests[rank] = node.check()["digest"]

        self.run_ranks(2, body)
        self.assertEqual(digests[0], digests[1])
        np.testing.assert_array_equal(windows[0], windows[1])
        self.assertTrue((windows[0] >= 0).all())

    def test_a_rank_that_stops_makes_the_others_raise_within_the_deadline(self):
        import time
        seen = {}

        def body(rank, comm):
            comm.set_timeout_ms(1500)
            with kvshard.Node(comm, **dict(SMALL, tp=2)) as node:
                node.step()
                if rank == 1:
                    return  # stops stepping: the leader's next broadcast waits for it
                start = time.monotonic()
                with self.assertRaises(kvshard.Error) as e:
                    node.step()
                seen["elapsed"] = time.monotonic() - start
                seen["status"] = e.exception.status

        self.run_ranks(2, body)
        self.assertEqual(seen["status"], "KVS_ERR_TIMEOUT")
        self.assertLess(seen["elapsed"], 10)


class Loading(unittest.TestCase):
    def test_a_missing_library_names_every_place_tried(self):
        env = dict(os.environ, KVSHARD_LIBRARY="/nonexistent/lib", LD_LIBRARY_PATH="")
        code = ("import kvshard\n"
                "try:\n    kvshard.plan()\n"
                "except kvshard.Error as e:\n    print(e.status); print(e)\n")
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                             text=True, timeout=60)
        here = os.path.dirname(kvshard.__file__)
        if os.path.exists(os.path.join(here, "libkvshard.so.1")):
            self.skipTest("a library sits beside the package")
        self.assertIn("KVS_ERR_LIBRARY", out.stdout, out.stderr)
        self.assertIn("beside the package", out.stdout)
        self.assertIn("/nonexistent/lib (KVSHARD_LIBRARY)", out.stdout)
        self.assertIn("the loader's path", out.stdout)


class PipCuda(unittest.TestCase):
    def test_pip_wheels_cuda_folders_are_named_for_the_backends(self):
        import tempfile
        from kvshard import _lib
        with tempfile.TemporaryDirectory() as root:
            for sub, soname in (("cuda_runtime", "libcudart.so.13"), ("nccl", "libnccl.so.2")):
                os.makedirs(os.path.join(root, "nvidia", sub, "lib"))
                open(os.path.join(root, "nvidia", sub, "lib", soname), "w").close()
            code = ("import sys, os; sys.path.insert(0, %r)\n"
                    "from kvshard import _lib\n"
                    "_lib._point_at_pip_cuda(); print(os.environ.get('KVSHARD_CUDA_PATH'))\n"
                    % (root + "/x-packages"))
            link = root + "/x-packages"
            os.symlink(root, link)
            env = {k: v for k, v in os.environ.items() if k != "KVSHARD_CUDA_PATH"}
            env["CUDA_HOME"] = "/opt/cuda"
            out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                                 text=True, timeout=60)
            folders = out.stdout.strip().split(":")
            self.assertEqual(folders[:4], [link + "/nvidia/cuda_runtime/lib",
                                           link + "/nvidia/nccl/lib", "/opt/cuda/lib64",
                                           "/usr/local/cuda/lib64"], out.stderr)
            env["KVSHARD_CUDA_PATH"] = "/mine"
            out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                                 text=True, timeout=60)
            self.assertEqual(out.stdout.strip(), "/mine", "the user's choice stands")


class StepCostExample(unittest.TestCase):
    def test_the_benchmark_runs_and_says_its_figures(self):
        # A smoke run of python/examples/step_cost.py (a benchmark is a
        # program, not a timed test: only its shape is checked here).
        example = os.path.join("python", "examples", "step_cost.py")
        out = subprocess.run([sys.executable, example, "--batch", "4", "--steps", "20",
                              "--rounds", "1"], capture_output=True, text=True, timeout=120)
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertRegex(out.stdout, r"kvs_node_step via ctypes \(baseline\) +[0-9.]+ us/step")
        self.assertRegex(out.stdout, r"package / baseline +[0-9.]+x")
        bad = subprocess.run([sys.executable, example, "--batch", "0"], capture_output=True,
                             text=True, timeout=60)
        self.assertEqual(bad.returncode, 2)
        self.assertIn("must be at least 1", bad.stderr)
        for words, says in ((["--batch", "4", "--batch=8"], "--batch is given twice"),
                            (["--batch", "257"], "--batch is at most 256"),
                            (["--steps", "10000001"], "--steps 10,000,000"),
                            (["--bat", "4"], "unrecognized arguments: --bat")):
            bad = subprocess.run([sys.executable, example] + words, capture_output=True,
                                 text=True, timeout=60)
            self.assertEqual(bad.returncode, 2, words)
            self.assertIn(says, bad.stderr)


if __name__ == "__main__":
    unittest.main()
