"""The tables' contract (docs/engines.md, "The tables' contract") holds.

The section's formulas block and its worked example are read from the doc
as it stands and run against real nodes (the host twin): every ring context
a step returns, every ring location, every view's dtype, shape and layer
stride, the rows a host-tier round trip moves for a page, the ring a tail
state restores at an exact hit, are recomputed with the doc's functions
alone and compared with what the node holds. A formula stated wrong in the
doc fails here; so does a node that stops keeping it.
"""

import ctypes
import doctest
import json
import os
import re
import shutil
import tempfile
import threading
import unittest

import numpy as np

import kvshard

DOC = os.environ.get("KVSHARD_ENGINES_DOC", os.path.join("docs", "engines.md"))

# A toy model at P = 8 (the worked example's), and a small DSV4-shaped model
# at P = 128 with every ratio (its config.json is written for the test: fp8
# rows need qk_rope_head_dim, which only a config gives).
TOY = dict(topology="bundled", device="cpu", budget="64MiB", tp=1, pp=1, bind_numa=False,
           layers=4, ratios=[0, 4, 4, 0], head_dim=64, index_head_dim=32, page=8,
           max_running=3, max_batch=8, max_seq_len=1024)
TOY_MODEL = dict(head_dim=64, index_head_dim=32, qk_rope_head_dim=64, ratios=[0, 4, 4, 0])
CONFIG = {"model_type": "deepseek_v4", "num_hidden_layers": 5, "num_nextn_predict_layers": 0,
          "hidden_size": 16, "vocab_size": 64, "head_dim": 128, "qk_rope_head_dim": 64,
          "index_head_dim": 128, "sliding_window": 128, "max_position_embeddings": 65536,
          "compress_ratios": [0, 4, 128, 4, 128], "torch_dtype": "bfloat16"}
SMALL_MODEL = dict(head_dim=128, index_head_dim=128, qk_rope_head_dim=64,
                   ratios=CONFIG["compress_ratios"])
RINGS = ("per-request", "hca-per-request", "per-page")
_NP = {"int64": np.int64, "int32": np.int32, "uint8": np.uint8, "bfloat16": np.uint16,
       "float32": np.float32}


def section_blocks(marker):
    """The fenced blocks of the doc from `marker` to the next heading: the
    first for the formulas, every python block for the worked example."""
    with open(DOC, encoding="utf-8") as f:
        lines = f.read().split("\n")
    start = next(i for i, line in enumerate(lines) if line.strip() == marker)
    blocks, body, fence, at = [], None, None, start
    for i in range(start + 1, len(lines)):
        line = lines[i]
        if body is None and line.startswith("#"):
            break
        if body is None and line.startswith("```"):
            fence, body, at = line[:3], [], i + 1
            if not line.startswith("```python"):
                raise AssertionError(f"{DOC}:{i + 1}: a contract block must be python")
        elif body is not None and line.strip() == fence:
            blocks.append((at, "\n".join(body) + "\n"))
            body = None
        elif body is not None:
            body.append(line)
    return blocks


def formulas():
    """The doc's formulas block, executed: its functions by name."""
    (line, code), = section_blocks("<!-- contract: formulas -->")[:1]
    namespace = {}
    exec(compile(code, f"{DOC} (formulas block, line {line})", "exec"), namespace)
    return namespace


F = formulas()


def writable(view):
    """A view of the host twin's memory as a writable numpy array (numpy
    1.x's from_dlpack is read-only); bf16 elements as uint16."""
    dtype = np.dtype(_NP[view.dtype])
    buf = (ctypes.c_char * view.nbytes).from_address(view.data)
    return np.ndarray(view.shape, dtype=dtype, buffer=buf,
                      strides=tuple(s * dtype.itemsize for s in view.strides))


def numbers(node, view, layers):
    return {"page": node.page, "num_pages": node.num_pages, "window_pages": node.window_pages,
            "max_running": node.max_running, "layers": layers}


class Model:
    """A config.json of the small DSV4-shaped model (or another), in a
    folder of its own."""

    def __init__(self, config=None):
        self.config = CONFIG if config is None else config

    def __enter__(self):
        self.folder = tempfile.mkdtemp(prefix="kvshard-contract.")
        with open(os.path.join(self.folder, "config.json"), "w") as f:
            json.dump(self.config, f)
        return self.folder

    def __exit__(self, *exc):
        shutil.rmtree(self.folder, ignore_errors=True)


def small(folder, **extra):
    return dict(dict(topology="bundled", device="cpu", budget="64MiB", tp=1, pp=1,
                     bind_numa=False, model=folder, page=128, max_running=3, max_batch=8,
                     max_seq_len=4096), **extra)


class WorkedExample(unittest.TestCase):
    def test_the_worked_example_runs_as_the_doc_shows_it(self):
        blocks = section_blocks("<!-- contract: worked example -->")
        self.assertGreaterEqual(len(blocks), 3, "the example's blocks")
        globs = dict(F)
        globs.update(kvshard=kvshard, numpy=np)
        parser = doctest.DocTestParser()
        runner = doctest.DocTestRunner(verbose=False, optionflags=doctest.ELLIPSIS)
        for line, text in blocks:
            test = parser.get_doctest(text, globs, "the worked example", DOC, line - 1)
            runner.run(test, out=lambda s: self.fail(f"{DOC}, the worked example:\n{s}"),
                       clear_globs=False)
            globs = test.globs  # the next block goes on with this one's names
        self.assertEqual(runner.summarize(verbose=False).failed, 0)
        if globs.get("node") is not None:
            globs["node"].close()


class RingContexts(unittest.TestCase):
    """own, prev, ring, csa_loc and hca_loc of random batches, full rows and
    window rows, equal the formulas over the node's mapping."""

    def scenario(self, node, rings, seed, steps=6):
        rng = np.random.default_rng(seed)
        P = node.page
        views = set(node.tables())
        per_request = rings != "per-page"
        requests = {}
        next_page = 0
        for request in range(1, node.max_running + 1):
            slot = node.admit(request)
            self.assertEqual(slot, request - 1 if per_request else -1, "the lowest free slot")
            blocks = int(rng.integers(2, 6))
            row = []
            for b in range(blocks):
                if rng.random() < 0.8:
                    node.bind(request, range(next_page * P, (next_page + 1) * P))
                    row.append(next_page)
                else:
                    row.append(-1)  # a block the request has no page for
                next_page += 1
            requests[request] = (slot, row)
        node.step()
        checked = 0
        for step in range(steps):
            if step == steps // 2:
                # Frees are seen too: a freed page's slots read -1.
                request, (slot, row) = next(iter(requests.items()))
                page = next(p for p in row if p >= 0)
                node.free(range(page * P, (page + 1) * P))
                node.step()
            mapping = np.from_dlpack(node.tables()["mapping"])
            n = int(rng.integers(1, node.max_running + 2))
            ids = [int(rng.choice(list(requests))) for _ in range(n)]
            stride = max(len(requests[r][1]) for r in ids)
            table = np.full((n, stride), -1, dtype=np.int32)
            positions = []
            for i, r in enumerate(ids):
                row = requests[r][1]
                table[i, :len(row)] = row
                u = rng.random()  # idle rows, position 0 (its own predecessor), any
                positions.append(-1 if u < 0.15 else 0 if u < 0.3 else
                                 int(rng.integers(0, len(row) * P)))
            full = node.step({"requests": ids, "positions": positions, "block_table": table})
            window = np.full((n, 2), -1, dtype=np.int32)
            for i, pos in enumerate(positions):
                b = max(pos, 0) // P
                window[i] = [table[i, b - 1] if b >= 1 else -1, table[i, b]]
            rows = node.step({"requests": ids, "positions": positions, "block_table": window,
                              "window_rows": True})
            for i, (r, pos) in enumerate(zip(ids, positions)):
                slot = requests[r][0]
                own, prev, ring = F["ring_context"](mapping, list(table[i]), pos, P)
                own_w, prev_w, ring_w = F["ring_context"](mapping, list(window[i]), pos, P,
                                                          window_rows=True)
                want = {"own": own, "prev": prev, "ring": ring}
                # A ring location names a row only where the model has
                # layers of its ratio (the doc says so).
                if "state_4" in views:
                    want["csa_loc"] = F["state_loc"](rings, 4, slot, own, pos, P)
                if "state_128" in views:
                    want["hca_loc"] = F["state_loc"](rings, 128, slot, own, pos, P)
                for name, result in (("full rows", full), ("window rows", rows)):
                    got = {k: (result[k][i].tolist()) for k in want}
                    self.assertEqual(got, want, f"{rings}, step {step}, {name}, row {i}: "
                                     f"request {r} at {pos}, blocks {list(table[i])}")
                self.assertEqual((own_w, prev_w, ring_w), (own, prev, ring))
                checked += 1
        self.assertTrue(node.check()["ok"], "no row reached past its table")
        return checked

    def test_the_toy_model_at_page_8(self):
        with kvshard.Node(**TOY) as node:
            self.assertGreater(self.scenario(node, "per-request", seed=1), 10)

    def test_every_ring_placement_at_page_128(self):
        with Model() as folder:
            for rings in RINGS:
                with self.subTest(state_rings=rings):
                    with kvshard.Node(**small(folder, state_rings=rings)) as node:
                        self.assertGreater(self.scenario(node, rings, seed=2), 10)

    def test_the_mapping_keeps_offsets_and_the_dummy_its_page(self):
        with kvshard.Node(**TOY) as node:
            P = node.page
            node.admit(1)
            node.bind(1, range(5 * P, 8 * P))
            node.step()
            mapping = np.from_dlpack(node.tables()["mapping"])
            locs = np.arange(5 * P, 8 * P)
            slots = node.translate(locs)
            np.testing.assert_array_equal(slots, [F["window_slot"](mapping, l) for l in locs])
            np.testing.assert_array_equal(slots % P, locs % P, "offsets are kept")
            for page in range(3):
                self.assertEqual(len(set((slots[page * P:(page + 1) * P] // P).tolist())), 1)
            self.assertEqual(F["window_slot"](mapping, -1), -1)
            self.assertEqual(node.translate([-1, node.num_pages * P]).tolist(), [-1, -1],
                             "-1, and the sentinel")
            self.assertEqual(int(mapping[-1]), -1, "the sentinel row")
            dummy = np.arange(node.usable_pages * P, node.num_pages * P)
            self.assertEqual(node.usable_pages, node.num_pages - 1)
            np.testing.assert_array_equal(node.translate(dummy),
                                          (node.window_pages - 1) * P + np.arange(P))


class Views(unittest.TestCase):
    """Every view's dtype, shape and layer stride are the formulas'."""

    def check_views(self, node, model, kv_dtype, rings, prefix_cache, first=0, end=None):
        end = len(model["ratios"]) if end is None else end
        views = node.tables()
        want_names = {"mapping"} | {v for v in F["VIEW_RATIO"]
                                    if F["tier_layers"](model["ratios"], first, end, v)}
        self.assertEqual(set(views), want_names)
        for name, view in views.items():
            layers = len(F["tier_layers"](model["ratios"], first, end, name)) \
                if name != "mapping" else 0
            want = F["view_layout"](name, numbers(node, view, layers), model, kv_dtype, rings,
                                    prefix_cache)
            self.assertEqual((view.dtype, view.shape), want,
                             f"{kv_dtype}, {rings}, prefix cache {prefix_cache}: {name}")
            if view.shape and len(view.shape) == 3:
                item = np.dtype(_NP[view.dtype]).itemsize
                self.assertEqual(view.strides[0] * item,
                                 F["layer_stride_bytes"](view.shape, item), name)
                self.assertEqual(view.strides[1:], (view.shape[2], 1), name)

    def test_the_toy_models_views(self):
        for prefix in (False, True):
            with kvshard.Node(**dict(TOY, prefix_cache=prefix)) as node:
                self.check_views(node, TOY_MODEL, "bf16", "per-request", prefix)

    def test_every_dtype_and_ring_placement(self):
        # At P = 8 too: pages of two indexer rows and eight KV rows, whose
        # padding differs from P = 128's.
        with Model(dict(CONFIG, num_hidden_layers=4, compress_ratios=[0, 4, 4, 0])) as folder:
            for kv_dtype in ("bf16", "fp8"):
                with self.subTest(kv_dtype=kv_dtype, page=8):
                    with kvshard.Node(**small(folder, kv_dtype=kv_dtype, page=8)) as node:
                        self.check_views(node, dict(SMALL_MODEL, ratios=[0, 4, 4, 0]), kv_dtype,
                                         "per-request", False)
        with Model() as folder:
            for kv_dtype in ("bf16", "fp8"):
                for rings in RINGS:
                    for prefix in (False, True):
                        with self.subTest(kv_dtype=kv_dtype, rings=rings, prefix=prefix):
                            options = small(folder, kv_dtype=kv_dtype, state_rings=rings,
                                            prefix_cache=prefix)
                            with kvshard.Node(**options) as node:
                                self.check_views(node, SMALL_MODEL, kv_dtype, rings, prefix)

    def test_a_pipeline_stages_views_hold_its_layers_of_each_kind(self):
        with Model() as folder:
            options = small(folder, pp=2)
            plan = kvshard.plan(**{k: v for k, v in options.items()
                                   if k not in ("device", "bind_numa", "max_batch")})
            stages = [tuple(r.layers) for r in plan.ranks[:2]]
            self.assertEqual(len(set(stages)), 2, "two stages")
            comms = kvshard.loopback_comms(2, timeout_ms=20000)
            errors = [None, None]

            def rank(r):
                try:
                    with kvshard.Node(comms[r], **options) as node:
                        first, last = stages[node.rank]
                        self.check_views(node, SMALL_MODEL, "bf16", "per-request", False,
                                         first, last + 1)
                except BaseException as e:  # reported below
                    errors[r] = e

            threads = [threading.Thread(target=rank, args=(r,)) for r in range(2)]
            for t in threads:
                t.start()
            for t in threads:
                t.join(60)
            for c in comms:
                c.close()
            for e in errors:
                if e is not None:
                    raise e

    def test_every_padding_row_lands_on_a_row_no_request_reads(self):
        with kvshard.Node(**dict(TOY, prefix_cache=True)) as node:
            P = node.page
            views = node.tables()
            # -1 as a row index is the last row: the mapping's sentinel, the
            # dummy window page's last slot, the scratch rows.
            self.assertEqual(int(np.from_dlpack(views["mapping"])[-1]), -1)
            self.assertEqual((views["window"].shape[1] - 1) // P, node.window_pages - 1)
            for name in ("compressed_4", "indexer"):
                self.assertEqual(views[name].shape[1] - 1, node.num_pages * P // 4,
                                 f"{name}'s last row is its scratch row")
                self.assertEqual(views[name].shape[1] + F["compressed_row"](-1, 4),
                                 views[name].shape[1] - 1)
            for name in ("state_4", "index_state"):
                rows = F["ring_rows"](name, "per-request", node.max_running, node.window_pages,
                                      True)
                self.assertEqual(views[name].shape[1], rows)
                self.assertEqual(F["tail_state"](node.max_running, node.window_pages - 1, 3)[0],
                                 rows - 2, f"{name}: the last tail row, then the scratch row")
            self.assertEqual(F["state_loc"]("per-request", 4, 0, 5, -1, P), -1)
            self.assertEqual(F["ring_context"](None, [0], -1, P), (-1, -1, [-1] * P))


class Rows(unittest.TestCase):
    """The rows the formulas name are the rows the node moves and restores."""

    def test_a_pages_compressed_and_indexer_rows_travel_with_it(self):
        # Rows written where compressed_row puts pages 2 and 3 go to the host
        # tier when the cache evicts them, and come back where it puts the
        # pages a fetch gives them (20 and 21).
        with Model() as folder:
            for kv_dtype in ("bf16", "fp8"):
                with self.subTest(kv_dtype=kv_dtype):
                    options = small(folder, kv_dtype=kv_dtype, prefix_cache=True,
                                    host_cache="64MiB")
                    with kvshard.Node(**options) as node:
                        self.round_trip(node, kv_dtype)

    dims = dict(head_dim=SMALL_MODEL["head_dim"], index_head_dim=SMALL_MODEL["index_head_dim"],
                qk_rope_head_dim=SMALL_MODEL["qk_rope_head_dim"])

    def rows_of(self, node, name, kv_dtype, ratio, page):
        """A full page's rows in a view by the formulas (compressed_row of
        its locations), or for paged rows its page (c // page_rows); and how
        many bytes (elements) of each the rows take: a page's rest is
        padding."""
        P = node.page
        rows = sorted({F["compressed_row"](l, ratio) for l in range(page * P, (page + 1) * P)})
        row = F["row_bytes"](name, kv_dtype, **self.dims)
        page_rows = P // ratio
        if F["page_bytes"](name, page_rows, row):
            return sorted({c // page_rows for c in rows}), page_rows * row
        return rows, None

    def round_trip(self, node, kv_dtype):
        P = node.page
        views = {n: writable(v) for n, v in node.tables().items()}
        tiers = [(n, 4 if n in ("compressed_4", "indexer") else 128)
                 for n in ("compressed_4", "compressed_128", "indexer")]
        node.admit(1)
        node.bind(1, range(2 * P, 4 * P))
        node.step()
        rng = np.random.default_rng(3)
        written = {}
        for name, ratio in tiers:
            v = views[name]
            for page in (2, 3):
                at, width = self.rows_of(node, name, kv_dtype, ratio, page)
                data = rng.integers(1, 2 ** 8, size=(v.shape[0], len(at), v.shape[2]))
                v[:, at] = data.astype(v.dtype)
                written[name, page] = v[:, at, :width].copy()
        node.prefix_insert(1, [70, 80], [2, 3], tails=[False, True])
        node.free(range(2 * P, 4 * P))
        node.prefix_release(1)
        node.finish(1)
        node.step()
        self.assertEqual(sorted(node.prefix_evict(2).tolist()), [2, 3])
        node.step()  # the spills: pages 2 and 3 into the host tier
        for name, _ in tiers:
            views[name][:] = 0  # the pages' rows reused since
        hit = node.prefix_match([70, 80, 90], 3 * P + 1, reprefill_tokens=P)
        self.assertEqual((hit.host_pages, hit.hit_tokens), (2, 2 * P))
        self.assertEqual(hit.pages.tolist(), [-1, -1], "host-tier blocks")
        node.prefix_fetch(5, hit, [70, 80, 90], [20, 21])
        node.admit(5)
        node.step()  # the fetches: into pages 20 and 21
        for name, ratio in tiers:
            for old, new in ((2, 20), (3, 21)):
                at, width = self.rows_of(node, name, kv_dtype, ratio, new)
                np.testing.assert_array_equal(views[name][:, at, :width], written[name, old],
                                              f"{name}: page {old}'s rows in page {new}")
        self.assertTrue(node.check()["ok"])

    def restore(self, node, mr):
        P = node.page
        views = [writable(node.tables()[n]) for n in ("state_4", "index_state")]
        slot = node.admit(1)
        node.bind(1, range(2 * P, 4 * P))
        node.step()
        tail_page = int(node.translate([3 * P])[0]) // P  # page 3's window page
        rng = np.random.default_rng(4)
        for v in views:
            v[:, slot * 8:slot * 8 + 8] = rng.random((v.shape[0], 8, v.shape[2]))
            for i in range(F["TAIL_STATE_POSITIONS"]):
                row, _ = F["tail_state"](mr, tail_page, i)
                v[:, row] = rng.random((v.shape[0], v.shape[2]))
        tails = [v.copy() for v in views]
        node.prefix_insert(1, [70, 80], [2, 3], tails=[False, True])
        node.free(range(2 * P, 4 * P))
        node.prefix_release(1)
        node.finish(1)
        self.assertEqual(node.admit(2), slot, "request 1's slot, its rings still written")
        hit = node.prefix_match([70, 80, 90], 3 * P + 1)
        self.assertEqual((hit.hit_tokens, hit.reprefill, hit.pages.tolist()),
                         (2 * P, False, [2, 3]))
        node.prefix_acquire(2, hit)
        node.step()
        for v, before in zip(views, tails):
            rows = [F["tail_state"](mr, tail_page, i)[0] for i in (0, 2)]
            for layer in range(v.shape[0]):
                want = F["restored_ring"]([before[layer, r].tolist() for r in rows],
                                          hit.hit_tokens)
                np.testing.assert_array_equal(v[layer, slot * 8:slot * 8 + 8],
                                              np.array(want, dtype=np.float32))
        self.assertTrue(node.check()["ok"])

    def test_an_exact_hit_restores_its_tail_state_into_the_requests_ring(self):
        with kvshard.Node(**dict(TOY, prefix_cache=True)) as node:
            self.restore(node, node.max_running)
        with Model() as folder:
            with kvshard.Node(**small(folder, prefix_cache=True)) as node:
                self.restore(node, node.max_running)

    def test_the_dummy_slot_is_never_a_requests(self):
        with kvshard.Node(**TOY) as node:
            slots = [node.admit(r) for r in range(node.max_running)]
            self.assertEqual(slots, list(range(node.max_running)))
            with self.assertRaises(kvshard.Error) as e:
                node.admit(99)
            self.assertEqual(e.exception.status, "KVS_ERR_EXHAUSTED")
            node.finish(1)
            self.assertEqual(node.admit(99), 1, "the lowest free slot")


class TheDoc(unittest.TestCase):
    def test_the_section_names_every_view_and_formula_it_runs(self):
        with open(DOC, encoding="utf-8") as f:
            text = f.read()
        section = text[text.index("## The tables' contract"):]
        section = section[:section.index("\n## ", 1)]
        for name in F["VIEW_RATIO"]:
            self.assertIn(f"`{name}`", section)
        for word in ("usable_pages", "KVS_TAIL_STATE_ROWS", "KVS_TAIL_STATE_POSITIONS",
                     "qk_rope_head_dim", "hca-per-request", "per-page", "dummy"):
            self.assertIn(word, section)
        self.assertTrue(re.search(r"<!-- contract: formulas -->\n```python", section))


if __name__ == "__main__":
    unittest.main()
