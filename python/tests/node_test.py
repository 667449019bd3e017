"""kvshard's Python node on one process: one rank, and ranks as threads
(whose collectives only complete because each call releases the GIL)."""

import ctypes
import dataclasses
import gc
import os
import re
import subprocess
import sys
import threading
import unittest

import numpy as np

import kvshard
from kvshard import _dlpack
from kvshard._options import NODE_OPTIONS, NODE_PYTHON_OPTIONS, library_names


def torch_or_none():
    """torch, imported by the cases that use it (its import costs seconds,
    which the planted bugs' runs of other cases need not pay), or None:
    python3-torch is optional."""
    try:
        import torch
    except ImportError:
        return None
    return torch


SMALL = dict(topology="bundled", device="cpu", budget="2GiB", tp=1, pp=1, max_running=4,
             max_seq_len=65536, bind_numa=False)


def page_locs(page, first, count):
    return np.arange(first * page, (first + count) * page, dtype=np.int64)


def run_ranks(n, body):
    """body(rank, comm) on n thread ranks over loopback communicators; a
    rank's exception is raised here, naming the rank."""
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


class StepContract(unittest.TestCase):
    """The step's contract from Python: the leader's batch and payload on
    every rank in one collective, range rows, capacity, releases."""

    def test_a_follower_gets_the_leaders_rows_and_payload(self):
        results = [None, None]
        options = dict(SMALL, tp=2, carry_batch=True, max_payload_bytes=32)

        def rank(r, comm):
            with kvshard.Node(comm, **options) as node:
                P = node.page
                if node.is_leader:
                    node.admit(1)
                    node.bind(1, page_locs(P, 0, 4))
                node.step()
                batch = {"requests": [1], "positions": [P + 2], "lengths": [200],
                         "block_table": np.array([[0, 1, 2, 3]])}
                out = (node.step(batch, payload=b"tokens 5 9") if node.is_leader
                       else node.step())
                results[r] = out
                results[r]["capacity"] = node.capacity()

        run_ranks(2, rank)
        leader, follower = results
        self.assertEqual(follower["payload"], b"tokens 5 9")
        self.assertEqual(follower["requests"].tolist(), [1])
        self.assertEqual(follower["lengths"].tolist(), [200])
        self.assertEqual(follower["positions"].tolist(), leader["positions"].tolist())
        self.assertTrue((follower["own"] == leader["own"]).all())
        self.assertTrue((follower["ring"] == leader["ring"]).all())
        self.assertEqual(follower["capacity"], leader["capacity"])

    def test_releases_and_capacity_on_one_rank(self):
        with kvshard.Node(**dict(SMALL, explicit_release=True)) as node:
            P = node.page
            node.admit(1)
            node.bind(1, page_locs(P, 0, 2))
            batch = {"requests": [1], "positions": [P + 1], "block_table": np.array([[0, 1]])}
            node.step(batch)
            node.step(batch)
            with self.assertRaisesRegex(kvshard.Error, "step 2 would overwrite step 0's results"):
                node.step(batch)
            node.release(0)
            self.assertEqual(node.step(batch)["step"], 2)
            with self.assertRaisesRegex(kvshard.Error, "step 7 has not run"):
                node.release(7)
            with self.assertRaises(TypeError):
                node.release(1, stream="0")
            capacity = node.capacity()
            self.assertEqual(capacity["step"], 3)
            self.assertEqual(capacity["running"], 1)
            self.assertEqual(capacity["result_depth"], 2)
            self.assertEqual(capacity["free_window_pages"], node.free_window_pages())
            with self.assertRaisesRegex(TypeError, "payload takes bytes"):
                node.step(batch, payload="text")


class Stepping(unittest.TestCase):
    """Node.stepper: the batch arrays filled in place, one foreign call a
    step, the results read in place with the C results' lifetime."""

    def loop(self, node):
        P = node.page
        for r in (1, 2):
            node.admit(r)
            node.bind(r, page_locs(P, 4 * (r - 1), 4))
        node.step()
        return {"requests": np.array([1, 2], dtype=np.uint64),
                "positions": np.array([P + 5, 3 * P + 1]),
                "block_table": np.array([[0, 1, 2, 3], [4, 5, 6, 7]], dtype=np.int32)}

    def test_its_results_are_the_dict_steps(self):
        with kvshard.Node(**SMALL) as node:
            batch = self.loop(node)
            want = node.step(batch)
            s = node.stepper(4)
            self.assertEqual(s.rows, node.capacity()["max_batch"])
            s.requests[:2] = batch["requests"]
            s.positions[:2] = batch["positions"]
            s.block_table[:2] = batch["block_table"]
            got = s.step(2)
            self.assertEqual((got.n, got.step, got.page), (2, want["step"] + 1, node.page))
            for name in ("own", "prev", "ring", "csa_loc", "hca_loc"):
                self.assertTrue(np.array_equal(getattr(got, name), want[name]), name)
            self.assertFalse(got.diverged)
            self.assertEqual(got.requests.tolist(), [1, 2])
            # A position moves one row's ring context: read in place, the
            # step after next's results are the first's buffers again.
            first_ring = got.ring.copy()
            s.positions[0] += 1
            second = s.step(2)
            self.assertTrue(np.array_equal(got.ring, first_ring),
                            "a step's results held until the step after next")
            self.assertFalse(np.array_equal(second.ring, first_ring))
            third = s.step(1)
            self.assertEqual(third.n, 1)
            self.assertEqual(third.ring.shape, (1, node.page))
            self.assertTrue(np.array_equal(third.ring[0], second.ring[0]))

    def test_a_kept_array_outlives_the_node(self):
        node = kvshard.Node(**SMALL)
        s = node.stepper(4, lengths=True)
        s.requests[:2] = self.loop(node)["requests"]
        s.positions[:2] = [node.page + 5, 3 * node.page + 1]
        s.block_table[:2] = [[0, 1, 2, 3], [4, 5, 6, 7]]
        s.lengths[:2] = [3, 1]
        ring = s.step(2).ring
        want = ring.copy()
        node.close()
        with self.assertRaisesRegex(kvshard.Error, "the node is closed"):
            s.step(2)
        del s
        gc.collect()
        self.assertTrue(np.array_equal(ring, want))  # its memory kept by the array

    def test_bad_rows_and_arguments_are_refused(self):
        with kvshard.Node(**SMALL) as node:
            self.loop(node)
            s = node.stepper(4)
            for bad in (-1, s.rows + 1):
                with self.assertRaisesRegex(kvshard.Error, f"n is {bad}; the stepper's arrays"):
                    s.step(bad)
            for bad in (True, 1.0, "1"):
                with self.assertRaises(TypeError):
                    s.step(bad)
            self.assertEqual(s.step(np.int64(0)).n, 0)
            ranged = node.stepper(4, lengths=True)
            ranged.requests[0] = 1
            ranged.positions[0] = node.page + 5
            ranged.block_table[0] = [0, 1, 2, 3]
            ranged.lengths[0] = 0  # the library refuses the row, naming it
            with self.assertRaisesRegex(kvshard.Error, "row 0"):
                ranged.step(1)
            for stride in (0, -1, node.num_pages + 1):
                with self.assertRaises((kvshard.Error, ValueError)):
                    node.stepper(stride)
            with self.assertRaises(TypeError):
                node.stepper(4, lengths=1)
            with self.assertRaises(TypeError):
                s.step(1, payload="text")

    def test_results_land_in_the_engines_arrays(self):
        with kvshard.Node(**SMALL) as node:
            rows, P = node.capacity()["max_batch"], node.page
            arrays = {k: np.full(rows, -7, dtype=np.int64) for k in ("own", "prev", "csa_loc",
                                                                      "hca_loc")}
            arrays["ring"] = np.full((rows, P), -7, dtype=np.int64)
            bad = [(dict(arrays, own=arrays["own"].astype(np.int32)), TypeError, "int64"),
                   (dict(arrays, own=arrays["own"][:rows - 1]), ValueError,
                    f"own holds {rows - 1} entries; the node writes up to {rows}"),
                   (dict(arrays, ring=arrays["ring"][:, ::2]), ValueError, "contiguous"),
                   (dict(arrays, prev=None), TypeError, "prev is missing"),
                   (dict(arrays, hca_loc=[0] * rows), TypeError, "numpy array")]
            frozen = np.zeros(rows, dtype=np.int64)
            frozen.flags.writeable = False
            bad.append((dict(arrays, own=frozen), ValueError, "read-only"))
            for given, kind, says in bad:
                with self.assertRaisesRegex(kind, says):
                    node.set_result_buffers(**given)
            self.assertEqual(node.capacity()["result_depth"], 2, "a refused set changes nothing")
            node.set_result_buffers(**arrays)
            self.assertEqual(node.capacity()["result_depth"], 1)
            batch = self.loop(node)
            s = node.stepper(4)
            s.requests[:2] = batch["requests"]
            s.positions[:2] = batch["positions"]
            s.block_table[:2] = batch["block_table"]
            got = s.step(2)
            self.assertTrue(np.shares_memory(got.ring, arrays["ring"]))
            self.assertTrue(np.array_equal(arrays["ring"][:2], got.ring))
            self.assertTrue(np.array_equal(arrays["own"][:2], node.step(batch)["own"]))
            self.assertEqual(arrays["own"][2], -7, "rows past the step's untouched")
            with self.assertRaisesRegex(kvshard.Error, "before the node's first step"):
                node.set_result_buffers()

    def test_a_follower_steps_with_no_rows(self):
        results = [None, None]

        def rank(r, comm):
            with kvshard.Node(comm, **dict(SMALL, tp=2, carry_batch=True,
                                           max_payload_bytes=16)) as node:
                s = node.stepper(4)
                if node.is_leader:
                    self.loop(node)
                    s.requests[:1] = [2]
                    s.positions[:1] = [3 * node.page + 1]
                    s.block_table[0] = [4, 5, 6, 7]
                    out = s.step(1, payload=b"go")
                else:
                    node.step()
                    out = s.step()
                results[r] = (out.requests.tolist(), out.payload, out.ring.copy())

        run_ranks(2, rank)
        (lr, lp, lring), (fr, fp, fring) = results
        self.assertEqual((fr, fp), ([2], b"go"))
        self.assertEqual(lr, fr)
        self.assertTrue(np.array_equal(lring, fring))


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

    def test_usable_pages_leave_the_dummy_out(self):
        # num_pages counts the reserved dummy page (the last); an engine
        # that allocates from range(num_pages) would meet it when its pool
        # fills. usable_pages is the engine's range, and the dummy is named
        # by its page and its locations when bound.
        with kvshard.Node(**SMALL) as node:
            P = node.page
            self.assertEqual(node.usable_pages, node.num_pages - 1)
            node.admit(1)
            node.bind(1, page_locs(P, node.usable_pages - 1, 1))  # the last usable page
            with self.assertRaises(kvshard.Error) as e:
                node.bind(1, page_locs(P, node.usable_pages, 1))
            self.assertEqual(e.exception.status, "KVS_ERR_CONFLICT")
            d = node.usable_pages
            self.assertIn(f"full page {d} (locations {d * P}..{d * P + P - 1}) is the reserved "
                          f"dummy page, bound for good; the engine's full pages are 0..{d - 1}",
                          str(e.exception))
            node.step()
            np.testing.assert_array_equal(node.translate(page_locs(P, d, 1)),
                                          (node.window_pages - 1) * P + np.arange(P))

    def test_the_serve_loop_example_allocates_from_usable_pages(self):
        sys.path.insert(0, os.path.join("python", "examples"))
        try:
            import serve_loop
        finally:
            sys.path.pop(0)
        with kvshard.Node(**SMALL) as node:
            sched = serve_loop.Scheduler(node, seed=1, max_running=node.max_running - 1)
            self.assertEqual(sorted(sched.free_full), list(range(node.usable_pages)),
                             "every page but the dummy")
            for _ in range(40):
                node.step(sched.schedule())
            self.assertTrue(node.check()["ok"])

    def test_free_window_pages_count_what_a_bind_can_take(self):
        with kvshard.Node(**SMALL) as node:
            P = node.page
            free = node.free_window_pages()
            self.assertEqual(free, node.window_pages - 1, "every window page but the dummy")
            self.assertEqual(node.free_window_pages(droppable=True), (free, 0))
            node.admit(1)
            node.bind(1, page_locs(P, 0, 3))
            self.assertEqual(node.free_window_pages(), free - 3, "the leader's at once")
            with self.assertRaises(kvshard.Error) as e:
                node.bind(1, page_locs(P, 3, free - 2))
            self.assertEqual(e.exception.status, "KVS_ERR_EXHAUSTED")
            self.assertIn(f"kvs_node_bind for request 1: window free list out of slots: it needs "
                          f"{free - 2} window pages, {free - 3} are free (of {free} the engine "
                          f"can bind); no prefix cache holds any", str(e.exception))
            self.assertEqual(node.free_window_pages(), free - 3, "nothing taken")
            for v in ("yes", 1, None):
                with self.assertRaisesRegex(TypeError, "droppable takes True or False"):
                    node.free_window_pages(droppable=v)

    def test_pages_bind_and_free_as_their_locations_do(self):
        with kvshard.Node(**SMALL) as node:
            P = node.page
            node.admit(1)
            node.bind_pages(1, np.array([3, 5], dtype=np.int32))  # a block-table row
            node.step()
            slots = node.translate([3 * P, 5 * P + 7, 4 * P])
            self.assertTrue(slots[0] >= 0 and slots[1] >= 0)
            self.assertEqual(slots[2], -1)
            with self.assertRaisesRegex(kvshard.Error, "full page 3 already holds window page"):
                node.bind_pages(1, [3])
            with self.assertRaisesRegex(kvshard.Error, r"pages\[0\] = -1 is not a full page"):
                node.bind_pages(1, [-1])
            dummy = node.usable_pages
            with self.assertRaisesRegex(kvshard.Error, f"full page {dummy} .* reserved dummy"):
                node.bind_pages(1, [dummy])
            with self.assertRaisesRegex(kvshard.Error, "kvs_node_bind_pages for request 9, "
                                                       "which was not admitted"):
                node.bind_pages(9, [6])
            node.free_pages([-1, 5, 3, -1])
            node.step()
            self.assertEqual(node.translate([3 * P, 5 * P]).tolist(), [-1, -1])
            self.assertTrue(node.check()["ok"])

    def test_a_check_between_the_leaders_changes_and_the_step_is_refused(self):
        with kvshard.Node(**SMALL) as node:
            P = node.page
            node.admit(1)
            node.bind(1, page_locs(P, 4, 2))
            with self.assertRaises(kvshard.Error) as e:
                node.check()
            self.assertEqual(e.exception.status, "KVS_ERR_PENDING")
            self.assertIn("3 entries pending on the leader (rank 0)", str(e.exception))
            self.assertIn("step first, then check", str(e.exception))
            node.step()
            self.assertTrue(node.check()["ok"], "stepped: the same check agrees")

    def test_a_batch_with_an_unknown_key_lists_the_keys_a_batch_takes(self):
        with kvshard.Node(**SMALL) as node:
            good = {"requests": [1], "positions": [0], "block_table": [[0]]}
            with self.assertRaises(TypeError) as e:
                node.step(dict(good, window_row=True))
            self.assertEqual(str(e.exception), "batch has unknown keys ['window_row']; a batch "
                             "takes requests, positions, block_table, window_rows, lengths "
                             "(window_rows and lengths optional); the engine's own data goes "
                             "in payload=")
            with self.assertRaisesRegex(TypeError, r"batch lacks \['positions'\]; a batch takes "
                                        "requests, positions, block_table, window_rows"):
                node.step({"requests": [1], "block_table": [[0]]})
            self.assertEqual(node.step()["step"], 0, "no refused batch stepped the node")

    def test_a_steps_host_arrays_are_not_rewritten_by_the_next_step(self):
        # kvshard.h: a host node's results are valid until the step after
        # next, which rewrites them in place (two buffers by step parity);
        # the package's arrays are the caller's to keep.
        names = ("own", "prev", "ring", "csa_loc", "hca_loc")
        with kvshard.Node(**SMALL) as node:
            P = node.page
            node.admit(1)
            node.bind(1, page_locs(P, 0, 3))
            node.admit(2)
            node.bind(2, page_locs(P, 5, 2))
            node.step()
            table = np.array([[0, 1, 2], [5, 6, -1]])
            first = node.step({"requests": [1, 2], "positions": [2 * P + 7, P + 3],
                               "block_table": table})
            kept = {name: first[name].copy() for name in names}
            later = {"requests": [2, 1], "positions": [2 * P - 1, 3 * P - 2],
                     "block_table": table[::-1].copy()}
            second = node.step(later)
            node.step(later)  # the same parity as the first: its buffers rewritten
            self.assertTrue(any(not np.array_equal(kept[name], second[name]) for name in names),
                            "the two steps read the same contexts: the check below proves nothing")
            for name in names:
                np.testing.assert_array_equal(
                    first[name], kept[name],
                    err_msg=f"step {first['step']}'s {name} was rewritten by later steps")

    def test_locations_come_as_lists_arrays_or_tensors(self):
        with kvshard.Node(**SMALL) as node:
            P = node.page
            node.admit(1)
            node.bind(1, list(range(0, P)))
            node.bind(1, np.arange(P, 2 * P, dtype=np.int32))
            torch = torch_or_none()
            if torch is not None:
                node.bind(1, torch.arange(2 * P, 3 * P, dtype=torch.int64))
            node.step()
            self.assertTrue((node.translate(range(0, P)) >= 0).all())
            with self.assertRaisesRegex(TypeError, r"locs\[0\] must be an int, got float"):
                node.bind(1, [0.5])
            with self.assertRaisesRegex(TypeError, "locs must hold integers, got float64"):
                node.bind(1, np.array([0.0]))
            with self.assertRaisesRegex(ValueError,
                                        "request = -1 is outside the range of uint64_t"):
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
            # A location the C type cannot hold is refused, never wrapped
            # (2^63 would have become -2^63).
            with self.assertRaises(ValueError) as v:
                node.bind(1, np.array([2**63], dtype=np.uint64))
            self.assertEqual(str(v.exception), "locs[0] = 9223372036854775808 is outside the range "
                             "of int64_t (-9223372036854775808 to 9223372036854775807)")
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
            (dict(timeout_ms="1s"), "option 'timeout_ms' must be an int, got str"),
        ]
        for options, message in cases:
            with self.subTest(options=options):
                with self.assertRaisesRegex(TypeError, message):
                    kvshard.Node(**options)
        with self.assertRaisesRegex(TypeError, "comm must be"):
            kvshard.Node(comm=42)

    def test_the_divergence_kinds_are_the_librarys(self):
        from kvshard._lib import lib
        names = [lib().kvs_divergence_name(k).decode() for k in range(len(kvshard.Divergence) + 1)]
        self.assertEqual([m.value for m in kvshard.Divergence], list(range(len(kvshard.Divergence))))
        self.assertNotIn("unknown", names[:-1], "every Python kind is one the library names")
        self.assertEqual(names[-1], "unknown", "and the library has no kind Python lacks")
        self.assertEqual(names[kvshard.Divergence.PREFIX_BLOCK], "prefix block")

    def test_the_option_table_is_the_librarys(self):
        from kvshard.plan import ALIASES  # named in the help's prose, as kvplan's help does
        names = library_names(kvshard.node_options())
        ours = set(NODE_OPTIONS)
        self.assertEqual(ours - names - ALIASES, set(), "options the library does not take")
        refused = {"window_cache", "engine", "weights_total", "json", "svg"}
        self.assertEqual(names - ours - refused, set(), "library flags the package lacks")
        self.assertEqual(set(NODE_PYTHON_OPTIONS) & names, set())


PREFIX = dict(SMALL, prefix_cache=True)


class PrefixCache(unittest.TestCase):
    # Mirrors tests/headers_c_test.c's prefix-cache run: request 4 writes
    # full pages 2 and 3 (keys 7, 8), keeping page 3's window as the tail,
    # then request 5 hits both pages.
    def write_and_finish(self, node, request=4, keys=(7, 8), pages=(2, 3)):
        P = node.page
        locs = page_locs(P, pages[0], len(pages))
        node.admit(request)
        node.bind(request, locs)
        taken = node.prefix_insert(request, list(keys), list(pages),
                                   tails=[False] * (len(pages) - 1) + [True])
        node.free(locs)
        node.prefix_release(request)
        node.finish(request)
        node.step()
        return taken

    def test_a_finished_requests_pages_serve_the_next_request(self):
        with kvshard.Node(**PREFIX) as node:
            P = node.page
            empty = node.prefix_stats()
            self.assertIsInstance(empty, kvshard.PrefixCounts)
            self.assertEqual((empty.blocks, empty.tails, empty.holds, empty.refs), (0, 0, 0, 0))
            self.assertEqual(empty.host_slots, 0)
            self.assertEqual(node.prefix_match([7, 8, 9], 3 * P + 1).block, -1, "nothing cached")

            taken = self.write_and_finish(node)
            np.testing.assert_array_equal(taken, [True, True])
            self.assertEqual(taken.dtype, np.bool_)
            c = node.prefix_stats()
            self.assertEqual((c.blocks, c.tails, c.holds, c.refs, c.evictable), (2, 1, 0, 0, 1))

            hit = node.prefix_match([7, 8, 9], 3 * P + 1)
            self.assertIsInstance(hit, kvshard.PrefixHit)
            self.assertEqual((hit.matched_pages, hit.hit_tokens, hit.block, hit.reprefill,
                              hit.host_pages, hit.truncated_tokens), (2, 2 * P, 3, False, 0, 0))
            np.testing.assert_array_equal(hit.pages, [2, 3])
            # The prompt's last token is computed: a prompt ending on the
            # second page's last token hits the first page only, which
            # has no tail, so nothing is reused.
            short = node.prefix_match([7, 8], 2 * P)
            self.assertEqual((short.matched_pages, short.hit_tokens, short.truncated_tokens),
                             (2, 0, P))
            # pages are what the hit reuses: none, though two keys matched.
            self.assertEqual(short.pages.tolist(), [])
            node.prefix_acquire(5, hit)
            node.admit(5)
            with self.assertRaises(kvshard.Error) as e:
                node.bind(5, page_locs(P, 3, 1))  # a cached page is never written
            self.assertEqual(e.exception.status, "KVS_ERR_CONFLICT")
            node.step()
            c = node.prefix_stats()
            self.assertEqual((c.blocks, c.tails, c.refs, c.holds, c.evictable), (2, 1, 2, 1, 0))
            self.assertTrue(node.check()["ok"])

            # Held: nothing is evictable. Released: both pages come back.
            self.assertEqual(node.prefix_evict(10).tolist(), [])
            with self.assertRaises(kvshard.Error) as e:
                node.prefix_acquire(5, hit)
            self.assertEqual(e.exception.status, "KVS_ERR_CONFLICT")
            self.assertIn("request 5 holds a prefix already", str(e.exception))
            node.prefix_release(5)
            node.finish(5)
            node.step()
            self.assertEqual(node.prefix_stats().holds, 0)
            freed = node.prefix_evict(10)
            self.assertEqual(freed.dtype, np.int64)
            self.assertEqual(sorted(freed.tolist()), [2, 3])
            node.step()
            c = node.prefix_stats()
            self.assertEqual((c.blocks, c.tails, c.evictions, c.tail_drops), (0, 0, 2, 1))
            self.assertEqual(node.prefix_match([7, 8, 9], 3 * P + 1).block, -1)
            self.assertTrue(node.check()["ok"])

    def test_a_full_window_names_the_tails_that_hold_it_and_the_remedy(self):
        with kvshard.Node(**PREFIX) as node:
            P = node.page
            free = node.free_window_pages()
            self.write_and_finish(node)  # page 3's window page stays, a tail
            self.assertEqual(node.free_window_pages(droppable=True), (free - 1, 1))
            node.admit(6)
            with self.assertRaises(kvshard.Error) as e:
                node.bind(6, page_locs(P, 10, free))
            self.assertEqual(e.exception.status, "KVS_ERR_EXHAUSTED")
            self.assertIn(f"it needs {free} window pages, {free - 1} are free (of {free} the "
                          f"engine can bind); retained prefix tails hold 1 window pages, 1 of "
                          f"them droppable now: kvs_node_prefix_evict(node, 0, 1, ...) (Python: "
                          f"node.prefix_evict(0, need_window_pages=1)) gives them back",
                          str(e.exception))
            self.assertEqual(node.prefix_evict(0, need_window_pages=1).tolist(), [])
            self.assertEqual(node.free_window_pages(droppable=True), (free, 0))
            node.bind(6, page_locs(P, 10, free))  # the remedy was enough
            node.step()
            self.assertTrue(node.check()["ok"])

    def test_an_abandoned_reprefill_leaves_no_readable_tail(self):
        with kvshard.Node(**PREFIX) as node:
            P = node.page
            locs = page_locs(P, 2, 2)
            node.admit(4)
            node.bind(4, locs)
            node.prefix_insert(4, [7, 8], [2, 3])  # no tail kept
            node.free(locs)
            node.prefix_release(4)
            node.finish(4)
            node.step()
            hit = node.prefix_match([7, 8, 9], 3 * P + 1, reprefill_tokens=P)
            self.assertEqual((hit.reprefill, hit.block, hit.hit_tokens), (True, 3, 2 * P))
            node.prefix_acquire(5, hit)
            node.step()
            self.assertEqual(node.prefix_stats().tails, 1, "the tail request 5 writes")
            # Request 5 is refused before its prefill reaches the boundary.
            node.prefix_abandon(5)
            node.step()
            c = node.prefix_stats()
            self.assertEqual((c.tails, c.holds, c.refs), (0, 0, 0))
            again = node.prefix_match([7, 8, 9], 3 * P + 1)
            self.assertEqual(again.hit_tokens, 0, "no exact hit reads the unwritten tail")
            self.assertTrue(node.check()["ok"])

    def test_a_cached_key_leaves_its_page_with_the_engine(self):
        with kvshard.Node(**PREFIX) as node:
            P = node.page
            self.write_and_finish(node)
            node.admit(6)
            node.bind(6, page_locs(P, 10, 3))
            taken = node.prefix_insert(6, [7, 8, 2 ** 64 - 1], [10, 11, 12],
                                       tails=(i == 2 for i in range(3)))  # read once
            np.testing.assert_array_equal(taken, [False, False, True])
            node.step()
            c = node.prefix_stats()
            self.assertEqual((c.blocks, c.holds, c.tails), (3, 1, 2))
            hit = node.prefix_match(np.array([7, 8, 2 ** 64 - 1], dtype=np.uint64), 4 * P)
            np.testing.assert_array_equal(hit.pages, [2, 3, 12])
            self.assertEqual(node.prefix_evict(0).size, 0)

    def test_a_host_hit_takes_its_pages_in_one_eviction(self):
        with kvshard.Node(**dict(PREFIX, host_cache="64MiB")) as node:
            P = node.page
            self.write_and_finish(node)  # keys 7, 8 on pages 2, 3
            self.assertEqual(sorted(node.prefix_evict(2).tolist()), [2, 3])
            node.step()
            # Another prompt's blocks hold the GPU pages a fetch could use.
            self.write_and_finish(node, request=6, keys=(4, 5), pages=(10, 11))
            hit = node.prefix_match([7, 8, 9], 3 * P + 1, reprefill_tokens=P)
            self.assertEqual(hit.host_pages, 2)
            freed = node.prefix_evict_for_fetch(hit, [7, 8, 9], 2)
            self.assertEqual(sorted(freed.tolist()), [10, 11])
            node.prefix_fetch(5, hit, [7, 8, 9], freed)  # the same hit, no new match
            node.admit(5)
            node.step()
            c = node.prefix_stats()
            self.assertEqual((c.blocks, c.fetches), (2, 2))
            self.assertTrue(node.check()["ok"])
            with self.assertRaises(kvshard.Error):
                node.prefix_evict_for_fetch(hit, [7, 8, 9], 1)  # stale once taken

    def test_a_host_tier_hit_is_fetched_into_the_engines_pages(self):
        with kvshard.Node(**dict(PREFIX, host_cache="64MiB")) as node:
            P = node.page
            self.write_and_finish(node)
            self.assertEqual(sorted(node.prefix_evict(2).tolist()), [2, 3])
            node.step()
            c = node.prefix_stats()
            self.assertGreater(c.host_slots, 0)
            self.assertGreater(c.host_page_bytes, 0)
            self.assertEqual((c.blocks, c.host_blocks, c.spills), (0, 2, 2))
            self.assertEqual(node.prefix_match([7, 8, 9], 3 * P + 1).block, -1,
                             "without a re-prefill length the host tier is not reached")
            hit = node.prefix_match([7, 8, 9], 3 * P + 1, reprefill_tokens=P)
            self.assertEqual((hit.host_pages, hit.hit_tokens, hit.reprefill, hit.block),
                             (2, 2 * P, True, -1))
            np.testing.assert_array_equal(hit.pages, [-1, -1])
            with self.assertRaises(kvshard.Error) as e:
                node.prefix_acquire(5, hit)
            self.assertIn("take it with kvs_node_prefix_fetch", str(e.exception))
            with self.assertRaisesRegex(ValueError, "pages has 1 entries; the hit fetches 2"):
                node.prefix_fetch(5, hit, [7, 8, 9], [20])
            node.prefix_fetch(5, hit, [7, 8, 9], [20, 21])
            node.admit(5)
            node.step()
            c = node.prefix_stats()
            self.assertEqual((c.blocks, c.holds, c.fetches), (2, 1, 2))
            # Request 5 re-prefills page 21's window: no exact hit reads it
            # until it releases, and pages names nothing a hit does not reuse.
            before = node.prefix_match([7, 8], 3 * P)
            self.assertEqual((before.matched_pages, before.hit_tokens, before.pages.tolist()),
                             (2, 0, []))
            node.prefix_release(5)
            node.finish(5)
            node.step()
            np.testing.assert_array_equal(node.prefix_match([7, 8], 3 * P).pages, [20, 21])
            self.assertTrue(node.check()["ok"])

    def test_a_node_without_the_cache_refuses_in_the_librarys_words(self):
        with kvshard.Node(**SMALL) as node:
            with self.assertRaises(kvshard.Error) as e:
                node.prefix_stats()
            self.assertEqual(e.exception.status, "KVS_ERR_UNSUPPORTED")
            self.assertEqual(str(e.exception), "kvs_node_prefix_stats: this node keeps no prefix "
                             "cache (create it with options.prefix_cache or --prefix-cache)")
            for call in (lambda: node.prefix_match([1], 1000),
                         lambda: node.prefix_insert(1, [1], [2]),
                         lambda: node.prefix_release(1),
                         lambda: node.prefix_evict(1)):
                with self.assertRaises(kvshard.Error) as e:
                    call()
                self.assertEqual(e.exception.status, "KVS_ERR_UNSUPPORTED")
                self.assertIn("no prefix cache", str(e.exception))

    def test_keys_are_unsigned_64_bit_ints_and_nothing_else(self):
        with kvshard.Node(**PREFIX) as node:
            P = node.page
            for keys in ([0, 2 ** 64 - 1], np.array([3, 2 ** 64 - 1], dtype=np.uint64),
                         np.array([1, 2], dtype=np.int32), (np.int64(5),), [], range(3)):
                with self.subTest(keys=keys):
                    self.assertEqual(node.prefix_match(keys, 4 * P).block, -1)
            torch = torch_or_none()
            if torch is not None:
                node.prefix_match(torch.tensor([1, 2]), 4 * P)
            refused = [
                ([-1], ValueError,
                 r"keys\[0\] = -1 is outside the range of uint64_t \(0 to 18446744073709551615\)"),
                ([1, 2 ** 64], ValueError, r"keys\[1\] = 18446744073709551616"),
                (np.array([4, -2]), ValueError, r"keys\[1\] = -2 is outside the range of uint64_t"),
                (np.array([1.0]), TypeError, "keys must be 1-D unsigned 64-bit ints, got dtype "
                 "float64"),
                (np.array([True]), TypeError, "got dtype bool"),
                (np.zeros((2, 2), dtype=np.uint64), ValueError, r"shape \(2, 2\)"),
                (np.uint64(3), TypeError, "keys must be 1-D"),
                ([1.5], TypeError, r"keys\[0\] must be an int, got float"),
                ([True], TypeError, r"keys\[0\] must be an int, got bool"),
                ([[1, 2]], TypeError, r"keys\[0\] must be an int, got list"),
                ("12", TypeError, "keys must be 1-D unsigned 64-bit ints, got str"),
                (7, TypeError, "got int"),
            ]
            for keys, kind, message in refused:
                with self.subTest(keys=keys):
                    with self.assertRaisesRegex(kind, message):
                        node.prefix_match(keys, 4 * P)
                    with self.assertRaisesRegex(kind, message):
                        node.prefix_insert(1, keys, [2] * (np.size(keys) or 1))
            with self.assertRaisesRegex(ValueError, "pages has 1 entries for 2 keys"):
                node.prefix_insert(1, [1, 2], [3])
            with self.assertRaisesRegex(ValueError, r"pages\[0\] = 9223372036854775808"):
                node.prefix_insert(1, [1], [2 ** 63])
            with self.assertRaisesRegex(ValueError, "tails holds 2: give bools, or 0 and 1"):
                node.prefix_insert(1, [1], [2], tails=[2])
            with self.assertRaisesRegex(ValueError, "tails has 2 entries for 1 keys"):
                node.prefix_insert(1, [1], [2], tails=[True, False])
            with self.assertRaisesRegex(ValueError,
                                        "prompt_tokens = -1 is outside the range of uint64_t"):
                node.prefix_match([1], -1)
            with self.assertRaisesRegex(TypeError, "reprefill_tokens must be an int, got float"):
                node.prefix_match([1], 10, reprefill_tokens=1.0)
            with self.assertRaisesRegex(ValueError,
                                        "need_pages = -1 is outside the range of uint64_t"):
                node.prefix_evict(-1)
            with self.assertRaisesRegex(ValueError, "request = 18446744073709551616 is outside"):
                node.prefix_release(2 ** 64)
            with self.assertRaisesRegex(TypeError, "hit must be a kvshard.PrefixHit"):
                node.prefix_acquire(1, {"block": 3})
            hit = node.prefix_match([1], 4 * P)
            with self.assertRaisesRegex(ValueError,
                                        "hit.hit_tokens = -1 is outside the range of uint64_t"):
                node.prefix_acquire(1, dataclasses.replace(hit, hit_tokens=-1))
            with self.assertRaisesRegex(TypeError, "hit.reprefill takes True or False, got int 1"):
                node.prefix_acquire(1, dataclasses.replace(hit, reprefill=1))
            # The library's own refusals come through with its words.
            node.admit(1)
            node.bind(1, page_locs(P, 2, 1))
            with self.assertRaises(kvshard.Error) as e:
                node.prefix_insert(1, [1], [5], tails=[True])
            self.assertEqual(e.exception.status, "KVS_ERR_INVALID_ARGUMENT")
            self.assertIn("keeps its window page as the block's tail, but it has none bound",
                          str(e.exception))
            with self.assertRaises(kvshard.Error) as e:
                node.prefix_insert(1, [1], [-1])
            self.assertEqual(e.exception.status, "KVS_ERR_OUT_OF_RANGE")
            self.assertEqual(node.prefix_stats().blocks, 0, "a refusal changes nothing")

    def test_a_hit_block_outside_int64_is_refused(self):
        # ctypes cuts an int to the field's 64 bits: node 2**64 + 3 would
        # reach C as node 3, a block the hit never named.
        with kvshard.Node(**PREFIX) as node:
            P = node.page
            self.write_and_finish(node)
            hit = node.prefix_match([7, 8, 9], 3 * P + 1)
            self.assertEqual(hit.block, 3)
            for bad in (hit.block + 2 ** 64, 2 ** 63, -(2 ** 63) - 1, hit.block - 2 ** 64):
                forged = dataclasses.replace(hit, block=bad)
                wrapped = (bad + 2 ** 63) % 2 ** 64 - 2 ** 63
                for take in (lambda: node.prefix_acquire(5, forged),
                             lambda: node.prefix_fetch(5, forged, [7, 8, 9], [])):
                    with self.assertRaisesRegex(
                            ValueError, rf"^hit\.block = {bad} is outside the range of int64_t "
                            rf"\(-9223372036854775808 to 9223372036854775807\)$",
                            msg=f"hit.block {bad} was taken as hit.block {wrapped}"):
                        take()
            node.prefix_acquire(5, hit)  # nothing was taken before: request 5 holds nothing
            node.step()
            self.assertEqual(node.prefix_stats().holds, 1)


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
                    torch = torch_or_none()
                    if torch is not None:
                        torch.from_dlpack(t["window"])[1, 2, 3] = 77
                        self.assertEqual(w[1, 2, 3], 77, "one memory, two views")
                state = np.from_dlpack(t["state_128"])
                self.assertEqual(state.dtype, np.float32)
                self.assertEqual(state.strides[0], t["state_128"].strides[0] * 4)

    def test_torch_views_bf16_tiers_in_place(self):
        torch = torch_or_none()
        if torch is None:
            self.skipTest("python3-torch is not installed")
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
        # The capsules' accounting, in this process. That a view keeps the
        # node's memory is Lifetimes' to prove, in fresh processes: here,
        # memory freed earlier in the run may stay mapped and read right.
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


DROP_ORDER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "drop_order.py")
# Whatever the process frees is scribbled (MALLOC_PERTURB_), and a block of
# 64 KiB or more is unmapped at free (MALLOC_MMAP_THRESHOLD_, which also
# stops glibc from raising the threshold as a long run does): memory read
# after its free faults or reads wrong, never right by luck. Under
# --config=asan the sanitizer's own allocator ignores these and reports a
# use after free itself.
FRESH_ENV = {"MALLOC_PERTURB_": "165", "MALLOC_MMAP_THRESHOLD_": "65536"}


def run_drop_orders(runs):
    """[(comm kind, order)] -> {(kind, order): CompletedProcess}, each a
    fresh process running drop_order.py, a few at once."""
    import concurrent.futures
    env = dict(os.environ, **FRESH_ENV)
    package = os.path.dirname(os.path.dirname(os.path.abspath(kvshard.__file__)))
    env["PYTHONPATH"] = package + os.pathsep + env.get("PYTHONPATH", "")

    def one(run):
        return run, subprocess.run([sys.executable, DROP_ORDER, *run], env=env,
                                   capture_output=True, text=True, timeout=120)

    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        return dict(pool.map(one, runs))


def child_failure(kind, order, out):
    """None when the child ran to "done", else what it died of."""
    if out.returncode == 0 and out.stdout.rstrip().endswith("done"):
        return None
    if out.returncode < 0:
        import signal
        how = (f"the child died of {signal.Signals(-out.returncode).name} (memory a view "
               "reads, or that its node borrows, was freed under it)")
    else:
        how = f"the child exited {out.returncode}"
    tail = "\n".join((out.stdout + out.stderr).strip().splitlines()[-6:])
    return f"drop order {order} over the {kind} communicator: {how}:\n{tail}"


class Lifetimes(unittest.TestCase):
    """A view keeps its node's memory and what the node borrows (its
    communicator) alive past Node.close(); a communicator is never ended
    under a node. Each drop order runs in a fresh process (drop_order.py)
    where freed memory cannot stay readable by luck, and a crash there is
    a failure here."""

    def test_a_view_keeps_its_node_alive_in_a_fresh_process(self):
        # numpy arrays alone (no View object): the node is closed and
        # dropped, then the arrays read its mapping and a tier of its carve.
        out = run_drop_orders([("owned", "arrays")])[("owned", "arrays")]
        failure = child_failure("owned", "arrays", out)
        self.assertIsNone(failure, failure)
        self.assertIn("node closed and dropped\nviews read the node's memory", out.stdout)

    def test_views_outlive_a_closed_node_and_its_closed_comm(self):
        # The order the documentation asks for (the node closed, then its
        # communicator), with views of the node still held: they read its
        # memory, and dropping them ends the node, then the communicator.
        runs = [("self", "node,comm,view"), ("loopback", "node,comm,view")]
        for (kind, order), out in sorted(run_drop_orders(runs).items()):
            with self.subTest(kind=kind):
                failure = child_failure(kind, order, out)
                self.assertIsNone(failure, failure)
                self.assertIn("comm closed\ncomm dropped\nviews read the node's memory\n"
                              "views dropped", out.stdout)

    def test_every_drop_order_of_node_comm_and_views(self):
        import itertools
        runs = [(kind, ",".join(order)) for kind in ("self", "loopback")
                for order in itertools.permutations(("node", "comm", "view"))]
        runs += [("owned", "node,view"), ("owned", "view,node")]
        results = run_drop_orders(runs)
        for (kind, order), out in sorted(results.items()):
            with self.subTest(kind=kind, order=order):
                failure = child_failure(kind, order, out)
                self.assertIsNone(failure, failure)
                if kind == "owned":
                    continue
                steps = order.split(",")
                if steps.index("comm") < steps.index("node"):
                    self.assertRegex(out.stdout, r"comm close refused: KVS_ERR_CONFLICT: "
                                     r"Comm.close\(\): <kvshard.Node rank 0 of 1, cpu, \d+ "
                                     r"pages, open> runs over this communicator: close the node "
                                     r"first")
                else:
                    self.assertIn("comm closed", out.stdout)
        self.assertEqual(len(results), 14)

    def test_a_node_never_closed_ends_at_exit_without_a_word(self):
        # A node alive at exit (an engine's attribute, a module global),
        # never closed, over the communicator it owns: the exit hook
        # destroys both, and prints nothing (it raised Comm.close()'s
        # refusal "close the node first" once).
        code = ("import kvshard\n"
                f"node = kvshard.Node(**{SMALL!r})\n"
                "node.step()\n"
                "print('end')\n")
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                             timeout=60)
        self.assertEqual((out.returncode, out.stdout, out.stderr), (0, "end\n", ""))

    def test_a_comm_under_an_open_node_stays_until_every_node_over_it_goes(self):
        comm = kvshard.self_comm()
        node = kvshard.Node(comm, **SMALL)
        with self.assertRaises(kvshard.Error) as e:
            comm.close()
        self.assertEqual(e.exception.status, "KVS_ERR_CONFLICT")
        self.assertIn(repr(node), str(e.exception))
        self.assertEqual(node.step()["step"], 0, "the refused close changed nothing")
        self.assertEqual(comm.backend, "self")
        mapping = np.from_dlpack(node.tables()["mapping"])
        node.close()
        comm.close()  # the node is closed: allowed, though a view still holds it
        comm.close()  # idempotent
        with self.assertRaisesRegex(kvshard.Error, "the communicator is closed"):
            comm.set_timeout_ms(1000)
        with self.assertRaisesRegex(kvshard.Error, "the communicator is closed"):
            kvshard.Node(comm, **SMALL)
        self.assertEqual(int(mapping[0]), -1)
        del mapping
        # Leaving a with block on an exception ends the communicator with
        # its nodes instead of raising over the exception.
        with self.assertRaisesRegex(RuntimeError, "the engine's own failure"):
            with kvshard.self_comm() as comm:
                node = kvshard.Node(comm, **SMALL)
                raise RuntimeError("the engine's own failure")
        self.assertEqual(node.step()["step"], 0, "the node runs on over its ended communicator")
        node.close()
        # A node over a communicator in use elsewhere: ranks as threads.
        comms = kvshard.loopback_comms(1)
        with kvshard.Node(comms[0], **SMALL) as node:
            with self.assertRaisesRegex(kvshard.Error, r"<kvshard.Node rank 0 of 1, cpu"):
                comms[0].close()
        comms[0].close()


# Every public call and each of its parameters, by what reaches C: a C
# integer type (one value), "T[]" (an array of them), "bool", "text"
# (reaches C as a string), "options" (kvplan's flags: bools, NUL-free
# strings and text that kvplan's parsers range-check), or what is checked
# otherwise ("hit", "batch", "comm", "id", "buffer": an array the node
# writes in place, "-": nothing of the caller's).
# ExactTypes holds this table against the package's signatures, so a
# parameter added later must be classed (and is then tested) here.
PARAMETERS = {
    "Node.__init__": {"comm": "comm", "options": "options"},
    "Node.admit": {"request": "uint64_t"},
    "Node.bind": {"request": "uint64_t", "locs": "int64_t[]"},
    "Node.free": {"locs": "int64_t[]"},
    "Node.bind_pages": {"request": "uint64_t", "pages": "int64_t[]"},
    "Node.free_pages": {"pages": "int64_t[]"},
    "Node.stepper": {"stride": "uint64_t", "lengths": "bool", "window_rows": "bool"},
    "Node.finish": {"request": "uint64_t"},
    "Node.translate": {"locs": "int64_t[]"},
    "Node.step": {"batch": "batch", "payload": "bytes"},
    "Node.release": {"step": "uint64_t", "stream": "uintptr_t"},
    "Node.capacity": {},
    "Node.set_result_buffers": {"own": "buffer", "prev": "buffer", "ring": "buffer",
                                "csa_loc": "buffer", "hca_loc": "buffer"},
    "Node.check": {},
    "Node.tables": {},
    "Node.close": {},
    "Node.prefix_match": {"keys": "uint64_t[]", "prompt_tokens": "uint64_t",
                          "reprefill_tokens": "uint64_t"},
    "Node.prefix_acquire": {"request": "uint64_t", "hit": "hit"},
    "Node.prefix_fetch": {"request": "uint64_t", "hit": "hit", "keys": "uint64_t[]",
                          "pages": "int64_t[]"},
    "Node.prefix_insert": {"request": "uint64_t", "keys": "uint64_t[]", "pages": "int64_t[]",
                           "tails": "bool[]"},
    "Node.prefix_release": {"request": "uint64_t"},
    "Node.prefix_abandon": {"request": "uint64_t"},
    "Node.prefix_evict": {"need_pages": "uint64_t", "need_window_pages": "uint64_t"},
    "Node.prefix_evict_for_fetch": {"hit": "hit", "keys": "uint64_t[]", "need_pages": "uint64_t"},
    "Node.prefix_stats": {},
    "Node.request_rows": {"request": "uint64_t", "pages": "int64_t[]", "tokens": "uint64_t",
                          "reuse_tokens": "uint64_t", "window_tokens": "uint64_t"},
    "Node.import_admit": {"request": "uint64_t", "pages": "int64_t[]", "tokens": "uint64_t",
                          "reuse_tokens": "uint64_t", "window_tokens": "uint64_t"},
    "Node.send_request": {"link": "comm", "request": "uint64_t", "pages": "int64_t[]",
                          "tokens": "uint64_t", "peers": "int32_t[]"},
    "Node.receive_request": {"link": "comm", "request": "uint64_t", "pages": "int64_t[]",
                             "tokens": "uint64_t", "peers": "int32_t[]",
                             "reuse_tokens": "uint64_t", "window_tokens": "uint64_t"},
    "Node.free_window_pages": {"droppable": "bool"},
    "View.__dlpack__": {"stream": "uintptr_t"},
    "View.__dlpack_device__": {},
    "Comm.set_timeout_ms": {"timeout_ms": "int"},
    # (peer, kind, buffer) each; a peer past int is torch_comm_test's case.
    "Comm.exchange": {"transfers": "transfers"},
    "Comm.close": {},
    "loopback_comms": {"size": "int", "timeout_ms": "int"},
    "mpi_comm": {"comm": "comm", "timeout_ms": "int"},
    "nccl_comm": {"unique_id": "id", "rank": "int", "size": "int", "device": "int",
                  "timeout_ms": "int", "init_timeout_ms": "int"},
    "nccl_unique_id": {},
    "self_comm": {},
    "torch_comm": {"group": "comm", "timeout_ms": "int"},
    "plan": {"options": "options"},
    "fit": {"options": "options"},
    "node_options": {},
    "library_version": {},
}
HIT_FIELDS = {"matched_pages": "uint64_t", "hit_tokens": "uint64_t",
              "reprefill_tokens": "uint64_t", "truncated_tokens": "uint64_t",
              "block": "int64_t", "reprefill": "bool", "host_pages": "uint64_t",
              "stamp": "uint64_t", "pages": "-", "disk_pages": "uint64_t"}
BATCH_KEYS = {"requests": "uint64_t[]", "positions": "int64_t[]", "block_table": "int32_t[]",
              "window_rows": "bool", "lengths": "int64_t[]"}
RANGES = {"int": (-(2 ** 31), 2 ** 31 - 1), "int32_t": (-(2 ** 31), 2 ** 31 - 1),
          "int64_t": (-(2 ** 63), 2 ** 63 - 1), "uint64_t": (0, 2 ** 64 - 1),
          "uintptr_t": (0, 2 ** 64 - 1)}


def past(ctype, param=None):
    """Values C's ctype cannot hold: one below, one above, and one that
    wraps to 300 (2**32 + 300 for an int). (A DLPack stream of -1 is
    DLPack's "no ordering": -2 is the one below.)"""
    low, high = RANGES[ctype]
    return [low - 2 if param == "stream" else low - 1, high + 1, high - low + 1 + 300]


class ExactTypes(unittest.TestCase):
    """Nothing the caller gives is reinterpreted on its way to C: an
    integer past its C type is refused (never cut), a switch takes only a
    bool (never a string's or an int's truth), a string holding a NUL is
    refused (C would end it there). Each refusal names what it refuses."""

    def public(self):
        import inspect
        from kvshard.node import View
        found = {}
        for owner, prefix in ((kvshard.Node, "Node."), (View, "View."), (kvshard.Comm, "Comm.")):
            for name, fn in vars(owner).items():
                # (View's and Comm's constructors are the package's own.)
                if callable(fn) and (not name.startswith("_") or name in (
                        "__dlpack__", "__dlpack_device__") or prefix + name == "Node.__init__"):
                    found[prefix + name] = fn
        for name in kvshard.__all__:
            fn = getattr(kvshard, name)
            if inspect.isfunction(fn):
                found[name] = fn
        params = {}
        for name, fn in found.items():
            sig = inspect.signature(fn)
            params[name] = [p for p in sig.parameters if p != "self"]
        return params

    def test_every_parameter_is_classed(self):
        import dataclasses as dc
        params = self.public()
        self.assertEqual(set(params), set(PARAMETERS), "public calls the table lacks or names "
                         "wrongly: class every parameter in PARAMETERS")
        for name, names in params.items():
            self.assertEqual(set(names), set(PARAMETERS[name]), name)
        self.assertEqual({f.name for f in dc.fields(kvshard.PrefixHit)}, set(HIT_FIELDS))

    def node_calls(self, node, hit):
        """(call name, parameter) -> fn(value): the call with that argument,
        every other one valid."""
        view = node.tables()["mapping"]
        args = {
            "Node.admit": lambda **k: node.admit(**dict(dict(request=1), **k)),
            "Node.bind": lambda **k: node.bind(**dict(dict(request=1, locs=[]), **k)),
            "Node.free": lambda **k: node.free(**dict(dict(locs=[]), **k)),
            "Node.bind_pages": lambda **k: node.bind_pages(**dict(dict(request=1, pages=[]),
                                                                  **k)),
            "Node.free_pages": lambda **k: node.free_pages(**dict(dict(pages=[]), **k)),
            "Node.stepper": lambda **k: node.stepper(**dict(dict(stride=1), **k)),
            "Node.finish": lambda **k: node.finish(**dict(dict(request=1), **k)),
            "Node.translate": lambda **k: node.translate(**dict(dict(locs=[]), **k)),
            "Node.prefix_match": lambda **k: node.prefix_match(
                **dict(dict(keys=[1], prompt_tokens=10, reprefill_tokens=0), **k)),
            "Node.prefix_acquire": lambda **k: node.prefix_acquire(**dict(dict(request=1, hit=hit),
                                                                          **k)),
            "Node.prefix_fetch": lambda **k: node.prefix_fetch(
                **dict(dict(request=1, hit=hit, keys=[1], pages=[]), **k)),
            "Node.prefix_insert": lambda **k: node.prefix_insert(
                **dict(dict(request=1, keys=[1], pages=[2], tails=None), **k)),
            "Node.prefix_release": lambda **k: node.prefix_release(**dict(dict(request=1), **k)),
            "Node.prefix_abandon": lambda **k: node.prefix_abandon(**dict(dict(request=1), **k)),
            "Node.prefix_evict_for_fetch": lambda **k: node.prefix_evict_for_fetch(
                **dict(dict(hit=hit, keys=[1], need_pages=0), **k)),
            "Node.prefix_evict": lambda **k: node.prefix_evict(
                **dict(dict(need_pages=0, need_window_pages=0), **k)),
            "Node.release": lambda **k: node.release(**dict(dict(step=0, stream=None), **k)),
            "Node.request_rows": lambda **k: node.request_rows(
                **dict(dict(request=1, pages=[3], tokens=1, reuse_tokens=0, window_tokens=0), **k)),
            "Node.import_admit": lambda **k: node.import_admit(
                **dict(dict(request=1, pages=[3], tokens=1, reuse_tokens=0, window_tokens=0),
                       **k)),
            "Node.send_request": lambda **k: node.send_request(
                **dict(dict(link=node._comm, request=1, pages=[3], tokens=1, peers=[1]), **k)),
            "Node.receive_request": lambda **k: node.receive_request(
                **dict(dict(link=node._comm, request=1, pages=[3], tokens=1, peers=[1],
                            reuse_tokens=0, window_tokens=0), **k)),
            "View.__dlpack__": lambda **k: view.__dlpack__(**k),
            "Comm.set_timeout_ms": lambda **k: node._comm.set_timeout_ms(**k),
            # Refused before any communicator is made (mpi4py and NCCL are
            # never started here).
            "loopback_comms": lambda **k: kvshard.loopback_comms(
                **dict(dict(size=1, timeout_ms=1000), **k)),
            "mpi_comm": lambda **k: kvshard.mpi_comm(**dict(dict(comm=None, timeout_ms=1000),
                                                           **k)),
            "nccl_comm": lambda **k: kvshard.nccl_comm(
                **dict(dict(unique_id=bytes(128), rank=0, size=1, device=0), **k)),
            "torch_comm": lambda **k: kvshard.torch_comm(**dict(dict(group=None), **k)),
        }
        return args

    def test_an_integer_past_its_c_type_is_refused_never_cut(self):
        with kvshard.Node(**PREFIX) as node:
            hit = node.prefix_match([1], 10)
            calls = self.node_calls(node, hit)
            tried = 0
            for call, params in PARAMETERS.items():
                for param, kind in params.items():
                    if kind not in RANGES and not (kind.endswith("[]") and kind[:-2] in RANGES):
                        continue
                    for bad in past(kind.rstrip("[]"), param):
                        value, named = bad, param
                        if kind.endswith("[]"):
                            value, named = [0, bad], f"{param}[1]"
                        with self.subTest(call=call, param=param, value=bad):
                            with self.assertRaisesRegex(
                                    ValueError, re.escape(f"{named} = {bad} is outside the range "
                                                          f"of {kind.rstrip('[]')} "),
                                    msg=f"{call}({param}={value!r}) was taken"):
                                try:
                                    calls[call](**{param: value})
                                except kvshard.Error as e:  # C read a value cut to its type
                                    raise AssertionError(f"{call}({param}={value!r}) was taken "
                                                         f"cut to its C type: {e}") from e
                        tried += 1
            # Node(timeout_ms=...), the package's own option, is the same int.
            for bad in past("int"):
                with self.assertRaisesRegex(ValueError, re.escape(
                        f"Node(): option 'timeout_ms' = {bad} is outside the range of int")):
                    kvshard.Node(timeout_ms=bad, **SMALL)
            # A PrefixHit's fields, each as its C field.
            for field, kind in HIT_FIELDS.items():
                if kind not in RANGES:
                    continue
                for bad in past(kind):
                    forged = dataclasses.replace(hit, **{field: bad})
                    with self.subTest(field=field, value=bad):
                        with self.assertRaisesRegex(ValueError, re.escape(
                                f"hit.{field} = {bad} is outside the range of {kind} ")):
                            node.prefix_acquire(1, forged)
                        tried += 1
            # A step's batch, each array as its C array.
            good = {"requests": [1], "positions": [0], "block_table": [[0]]}
            for key, kind in BATCH_KEYS.items():
                if not kind.endswith("[]"):
                    continue
                for bad in past(kind[:-2]):
                    batch = dict(good, **{key: [[bad]] if key == "block_table" else [bad]})
                    where = f"batch['{key}'][0" + (", 0]" if key == "block_table" else "]")
                    with self.subTest(key=key, value=bad):
                        with self.assertRaisesRegex(ValueError, re.escape(
                                f"{where} = {bad} is outside the range of {kind[:-2]} ")):
                            node.step(batch)
                        tried += 1
            self.assertEqual(node.step()["step"], 0, "no refused call stepped the node")
            self.assertGreater(tried, 60)

    def test_a_switch_is_a_bool(self):
        not_bools = ["no", "False", "", 0, 1, 2.0, None, [True]]
        with kvshard.Node(**PREFIX) as node:
            hit = node.prefix_match([1], 10)
            good = {"requests": [1], "positions": [0], "block_table": [[0]]}
            for v in not_bools:
                with self.subTest(window_rows=v):
                    with self.assertRaisesRegex(TypeError, re.escape(
                            "batch['window_rows'] takes True or False, got "
                            f"{type(v).__name__} {v!r}"),
                            msg=f"window_rows={v!r} was read as {bool(v)}"):
                        try:
                            node.step(dict(good, window_rows=v))
                        except kvshard.Error as e:  # C read the rows as v's truth says
                            raise AssertionError(f"window_rows={v!r} was read as {bool(v)}: "
                                                 f"{e}") from e
                for switch in ("lengths", "window_rows"):
                    with self.subTest(**{switch: v}):
                        with self.assertRaisesRegex(TypeError, re.escape(
                                f"{switch} takes True or False, got {type(v).__name__}")):
                            node.stepper(1, **{switch: v})
                with self.subTest(reprefill=v):
                    with self.assertRaisesRegex(TypeError, re.escape(
                            f"hit.reprefill takes True or False, got {type(v).__name__}")):
                        node.prefix_acquire(1, dataclasses.replace(hit, reprefill=v))
            self.assertEqual(node.step()["step"], 0, "no refused call stepped the node")
            node.step(dict(good, window_rows=np.False_))  # numpy's bools are bools
        from kvshard.plan import FIT_OPTIONS, PLAN_OPTIONS
        tables = (("Node()", NODE_OPTIONS, lambda **o: kvshard.Node(**dict(SMALL, **o))),
                  ("kvshard.plan()", PLAN_OPTIONS, kvshard.plan),
                  ("kvshard.fit()", FIT_OPTIONS, kvshard.fit))
        switches = 0
        for where, table, make in tables:
            for name, kind in table.items():
                if kind not in ("switch", "flag"):
                    continue
                switches += 1
                for v in ("no", "False", 0, 1):
                    with self.subTest(call=where, option=name, value=v):
                        with self.assertRaisesRegex(TypeError, re.escape(
                                f"{where}: option '{name}' takes True or False, got "
                                f"{type(v).__name__} {v!r}")):
                            make(**{name: v})
        self.assertGreater(switches, 12)

    def test_a_string_holding_a_nul_is_refused(self):
        from kvshard.plan import FIT_OPTIONS, PLAN_OPTIONS
        tables = (("Node()", NODE_OPTIONS, lambda **o: kvshard.Node(**dict(SMALL, **o))),
                  ("kvshard.plan()", PLAN_OPTIONS, kvshard.plan),
                  ("kvshard.fit()", FIT_OPTIONS, kvshard.fit))
        texts = 0
        for where, table, make in tables:
            for name, kind in table.items():
                if kind in ("switch", "flag", "stream"):
                    continue  # bools, and an address that is an int or a stream
                value, text = "8\x00GiB", "8\x00GiB"
                if kind == "str":
                    value = text = "fp8\x00bf16"
                elif kind.endswith("_list"):
                    value = ["8\x00GiB"]
                texts += 1
                with self.subTest(call=where, option=name):
                    with self.assertRaisesRegex(ValueError, re.escape(
                            f"{where}: option '{name}' holds a NUL character at index "
                            f"{text.index(chr(0))} ({text!r}): C would read only "
                            f"{text[:text.index(chr(0))]!r}"),
                            msg=f"{where} took {name}={value!r}"):
                        try:
                            make(**{name: value})
                        except kvshard.Error as e:  # C read the text cut short
                            raise AssertionError(f"{where} took {name}={value!r} as "
                                                 f"{text[:text.index(chr(0))]!r}: {e}") from e
        self.assertGreater(texts, 60)
        # The issue's own example, and kvplan's words themselves.
        with self.assertRaisesRegex(ValueError, "option 'kv_dtype' holds a NUL"):
            kvshard.Node(**dict(SMALL, kv_dtype="fp8\x00bf16"))
        from kvshard.plan import _run
        with self.assertRaisesRegex(ValueError, re.escape(
                "kvplan's words[1] holds a NUL character at index 6")):
            _run(["plan", "--page\x00=0"])


class ThreadRanks(unittest.TestCase):
    def run_ranks(self, n, body):
        run_ranks(n, body)

    def test_a_check_before_the_step_is_refused_on_every_rank(self):
        # Not a divergence: the leader's changes reach the followers with
        # the step. Every rank raises the same refusal, then agrees.
        seen = {}

        def body(rank, comm):
            with kvshard.Node(comm, **dict(SMALL, tp=2)) as node:
                if node.is_leader:
                    node.admit(5)
                    node.bind(5, page_locs(node.page, 4, 1))
                with self.assertRaises(kvshard.Error) as e:
                    node.check()
                seen[rank] = (e.exception.status, str(e.exception))
                node.step()
                self.assertTrue(node.check()["ok"])

        self.run_ranks(2, body)
        self.assertEqual(seen[0], seen[1])
        self.assertEqual(seen[0][0], "KVS_ERR_PENDING")
        self.assertIn("2 entries pending on the leader", seen[0][1])

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

    def test_a_followers_prefix_calls_are_refused_and_its_index_is_the_leaders(self):
        seen = {}

        def body(rank, comm):
            with kvshard.Node(comm, **dict(PREFIX, tp=2)) as node:
                P = node.page
                if node.is_leader:
                    node.admit(4)
                    node.bind(4, page_locs(P, 2, 2))
                    node.prefix_insert(4, [7, 8], [2, 3], tails=[False, True])
                    node.free(page_locs(P, 2, 2))
                    node.prefix_release(4)
                    node.finish(4)
                else:
                    hit = node.prefix_match([7, 8, 9], 3 * P + 1)
                    for call in (lambda: node.prefix_insert(4, [7, 8], [2, 3]),
                                 lambda: node.prefix_acquire(5, hit),
                                 lambda: node.prefix_release(4),
                                 lambda: node.prefix_evict(1)):
                        with self.assertRaises(kvshard.Error) as e:
                            call()
                        self.assertRegex(str(e.exception),
                                         r"kvs_node_prefix_\w+ on rank 1: only the leader")
                node.step()
                seen[rank] = (node.prefix_stats(), node.prefix_match([7, 8, 9], 3 * P + 1))
                if node.is_leader:
                    node.prefix_acquire(5, seen[rank][1])
                node.step()
                seen[rank] += (node.prefix_stats(), node.check()["ok"])

        self.run_ranks(2, body)
        self.assertEqual(seen[0], seen[1])
        counts, hit, held, ok = seen[0]
        self.assertEqual((counts.blocks, counts.tails, counts.holds), (2, 1, 0))
        self.assertEqual((hit.block, hit.matched_pages), (3, 2))
        self.assertEqual((held.holds, held.refs), (1, 2))
        self.assertTrue(ok)

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
        if os.path.exists(os.path.join(here, "libkvshard.so.2")):
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

    def test_cuda_13_wheels_cu13_folder_is_found(self):
        # CUDA 13's wheels (nvidia-cuda-runtime 13, as torch's cu13 builds
        # bring them) put libcudart in nvidia/cu13/lib, not
        # nvidia/cuda_runtime/lib; NCCL's may sit there too, or in
        # nvidia/nccl/lib.
        import tempfile
        for layout in ((("cu13", "libcudart.so.13"), ("cu13", "libnccl.so.2")),
                       (("cu13", "libcudart.so.13"), ("nccl", "libnccl.so.2"))):
            with tempfile.TemporaryDirectory() as root:
                for sub, soname in layout:
                    os.makedirs(os.path.join(root, "nvidia", sub, "lib"), exist_ok=True)
                    open(os.path.join(root, "nvidia", sub, "lib", soname), "w").close()
                link = root + "/x-packages"
                os.symlink(root, link)
                code = ("import sys, os; sys.path.insert(0, %r)\n"
                        "from kvshard import _lib\n"
                        "_lib._point_at_pip_cuda(); print(os.environ.get('KVSHARD_CUDA_PATH'))\n"
                        % link)
                env = {k: v for k, v in os.environ.items()
                       if k not in ("KVSHARD_CUDA_PATH", "CUDA_HOME")}
                out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                                     text=True, timeout=60)
                folders = out.stdout.strip().split(":")
                want = [link + "/nvidia/" + sub + "/lib" for sub in
                        dict.fromkeys(sub for sub, _ in layout)]
                self.assertEqual(folders[:len(want) + 1], want + ["/usr/local/cuda/lib64"],
                                 (layout, out.stdout, out.stderr))


class StepCostExample(unittest.TestCase):
    def test_the_benchmark_runs_and_says_its_figures(self):
        # A smoke run of python/examples/step_cost.py (a benchmark is a
        # program, not a timed test: only its shape is checked here).
        example = os.path.join("python", "examples", "step_cost.py")
        out = subprocess.run([sys.executable, example, "--batch", "4", "--steps", "20",
                              "--rounds", "1"], capture_output=True, text=True, timeout=120)
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertRegex(out.stdout, r"kvs_node_step via ctypes \(baseline\) +[0-9.]+ us/step")
        self.assertRegex(out.stdout, r"Node.step / baseline +[0-9.]+x")
        self.assertRegex(out.stdout, r"Stepper.step / baseline +[0-9.]+x")
        with open("/dev/full", "w") as full:
            out = subprocess.run([sys.executable, example, "--batch", "4", "--steps", "5",
                                  "--rounds", "1"], stdout=full, stderr=subprocess.PIPE,
                                 text=True, timeout=120)
        self.assertEqual(out.returncode, 1, out.stderr)
        self.assertIn("step_cost: writing the report: No space left on device", out.stderr)
        self.assertNotIn("Traceback", out.stderr)
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


class PrefillDecode(unittest.TestCase):
    """A request's rows from a prefill node to a decode node (each one
    rank, over a loopback link of two): the decode side reads back what
    the prefill side wrote, unit by unit, and a request the two sides
    describe differently is refused on both, its slot given back."""

    def move(self, tokens, decode_tokens=None):
        link = kvshard.loopback_comms(2, timeout_ms=20000)
        out = {}

        def rank(r):
            with kvshard.Node(**SMALL) as node:
                P = node.page
                pages = list(range(3, 3 + (tokens + P - 1) // P))
                tail = [p for b, p in enumerate(pages) if (b + 1) * P > max(tokens - P + 1, 0)]
                if r == 0:
                    node.admit(1)
                    node.bind_pages(1, tail)
                    node.step()
                    written = {}
                    for u in node.request_rows(1, pages, tokens):
                        rows = np.ctypeslib.as_array((ctypes.c_ubyte * u.bytes).from_address(u.address))
                        rows[:] = np.random.default_rng(u.offset).integers(0, 256, u.bytes, dtype=np.uint8)
                        written[(u.view, u.layer, u.tail_state, u.first_token)] = rows.copy()
                    out["written"] = written
                    try:
                        out["sent"] = node.send_request(link[0], 1, pages, tokens, [1])
                    except kvshard.Error as e:
                        out["send_error"] = e
                else:
                    n = decode_tokens or tokens
                    node.import_admit(1, pages, n)
                    node.step()
                    try:
                        out["received"] = node.receive_request(link[1], 1, pages, n, [0])
                        out["read"] = {(u.view, u.layer, u.tail_state, u.first_token): np.ctypeslib.as_array(
                            (ctypes.c_ubyte * u.bytes).from_address(u.address)).copy()
                            for u in node.request_rows(1, pages, n)}
                    except kvshard.Error as e:
                        out["receive_error"] = e
                    node.step()
                    out["running"] = node.capacity()["running"]

        run_ranks_with = [threading.Thread(target=rank, args=(r,)) for r in range(2)]
        for t in run_ranks_with:
            t.start()
        for t in run_ranks_with:
            t.join(60)
        for c in link:
            c.close()
        return out

    def test_every_unit_arrives_where_the_decode_side_reads_it(self):
        out = self.move(1000)
        self.assertEqual(set(out["read"]), set(out["written"]))
        for key, rows in out["written"].items():
            np.testing.assert_array_equal(out["read"][key], rows, err_msg=str(key))
        sent, got = out["sent"], out["received"]
        self.assertEqual(sent.bytes, got.bytes)
        self.assertEqual(got.bytes, sum(r.size for r in out["written"].values()))
        self.assertIsNone(got.view)
        self.assertEqual(got.reused_bytes, 0)

    def test_a_request_described_differently_is_refused_on_both_sides(self):
        out = self.move(1000, decode_tokens=1001)
        self.assertIn("tokens", str(out["receive_error"]))
        self.assertIn("refused", str(out["receive_error"]))
        self.assertIn("tokens", str(out["send_error"]))
        self.assertEqual(out["running"], 0, "the refused request's slot came back")

    def test_bad_arguments_are_refused(self):
        with kvshard.Node(**SMALL) as node:
            with self.assertRaises(kvshard.Error) as e:
                node.request_rows(1, [3], 100)
            self.assertIn("not bound", str(e.exception))
            with self.assertRaises(kvshard.Error) as e:
                node.request_rows(1, [3], 1000)
            self.assertIn("block table has 1", str(e.exception))
            with self.assertRaises(TypeError):
                node.send_request("self", 1, [3], 100, [1])


if __name__ == "__main__":
    unittest.main()
