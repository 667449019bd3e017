"""kvshard's Python node on one process: one rank, and ranks as threads
(whose collectives only complete because each call releases the GIL)."""

import dataclasses
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
            with self.assertRaisesRegex(ValueError, "request = -1 is outside the range of uint64_t"):
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

    def test_the_option_table_is_the_librarys(self):
        names = library_names(kvshard.node_options())
        ours = set(NODE_OPTIONS)
        self.assertEqual(ours - names, set(), "options the library does not take")
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
            self.assertEqual(node.prefix_match([7, 8, 9], 3 * P + 1).node, -1, "nothing cached")

            taken = self.write_and_finish(node)
            np.testing.assert_array_equal(taken, [True, True])
            self.assertEqual(taken.dtype, np.bool_)
            c = node.prefix_stats()
            self.assertEqual((c.blocks, c.tails, c.holds, c.refs, c.evictable), (2, 1, 0, 0, 1))

            hit = node.prefix_match([7, 8, 9], 3 * P + 1)
            self.assertIsInstance(hit, kvshard.PrefixHit)
            self.assertEqual((hit.matched_pages, hit.hit_tokens, hit.node, hit.reprefill,
                              hit.host_pages, hit.truncated_tokens), (2, 2 * P, 3, False, 0, 0))
            np.testing.assert_array_equal(hit.pages, [2, 3])
            # The prompt's last token is computed: a prompt ending on the
            # second page's last token hits the first page only, which
            # has no tail, so nothing is reused.
            short = node.prefix_match([7, 8], 2 * P)
            self.assertEqual((short.matched_pages, short.hit_tokens, short.truncated_tokens),
                             (2, 0, P))
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
            self.assertEqual(node.prefix_match([7, 8, 9], 3 * P + 1).node, -1)
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
            self.assertEqual((hit.reprefill, hit.node, hit.hit_tokens), (True, 3, 2 * P))
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
            self.assertEqual(node.prefix_match([7, 8, 9], 3 * P + 1).node, -1,
                             "without a re-prefill length the host tier is not reached")
            hit = node.prefix_match([7, 8, 9], 3 * P + 1, reprefill_tokens=P)
            self.assertEqual((hit.host_pages, hit.hit_tokens, hit.reprefill, hit.node),
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
                    self.assertEqual(node.prefix_match(keys, 4 * P).node, -1)
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
            with self.assertRaisesRegex(ValueError, "prompt_tokens = -1 is outside the range of uint64_t"):
                node.prefix_match([1], -1)
            with self.assertRaisesRegex(TypeError, "reprefill_tokens must be an int, got float"):
                node.prefix_match([1], 10, reprefill_tokens=1.0)
            with self.assertRaisesRegex(ValueError, "need_pages = -1 is outside the range of uint64_t"):
                node.prefix_evict(-1)
            with self.assertRaisesRegex(ValueError, "request = 18446744073709551616 is outside"):
                node.prefix_release(2 ** 64)
            with self.assertRaisesRegex(TypeError, "hit must be a kvshard.PrefixHit"):
                node.prefix_acquire(1, {"node": 3})
            hit = node.prefix_match([1], 4 * P)
            with self.assertRaisesRegex(ValueError, "hit.hit_tokens = -1 is outside the range of uint64_t"):
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
        self.assertEqual((hit.node, hit.matched_pages), (3, 2))
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
