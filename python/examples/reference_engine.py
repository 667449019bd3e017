"""A reference engine over kvshard: a toy DeepSeek-V4-style model served
from kvshard's tables, checked against dense attention (issue 31).

    python3 reference_engine.py [--rings per-request|hca-per-request|per-page|all]
                                [--tp 2] [--seed 1] [--device cpu|cuda]

The model: 5 layers (window-only, CSA, HCA, CSA, HCA), a 32-wide MLA
latent (V aliases K), 4 query heads, a sliding window of P = 128 tokens,
CSA layers compressing 4 tokens into a row (with the ratio-4 overlap: a
row reads the first halves of the block before) and choosing the top-k
rows with a Lightning indexer (its own ratio-4 compressor, 16-wide keys),
HCA layers compressing 128 tokens into a row, attention over the window
and the compressed rows in one softmax.

The engine keeps no state of its own: every window KV row, compressed
row, indexer key and fp32 compress-state ring row lives in the node's
tables, written and read in place through the node's views
(torch.from_dlpack of Node.tables()), at the places the mapping and the
step's ring contexts give. Ranks are threads over kvshard.loopback_comms
(tp ranks; attention heads split, the output projection summed across
ranks); rank 0 schedules: admits, binds, frees, finishes and runs the
prefix cache, and its step carries the batch and the step's work (the
plan's items, pickled, as the step's payload) to every rank in the step's
one collective (carry_batch): a follower steps with no batch and computes
what the leader's payload says. Requests are prefilled
in chunks, then decoded (greedy); prompts that share a prefix hit the
cache (exact hits through retained tails, re-prefill hits, hits fetched
from the host tier after eviction).

Every attention output and every logit of every position the engine
computes is compared (torch.allclose) with a dense float64 reference that
computes the same model over the request's whole history (window
attention over the last P tokens, compressed rows from the compressor
over the full history, indexer top-k). Where the cache hands a request
rows another request computed, the reference takes them from that
request's reference (its provenance), so a hit whose window was
re-prefilled (not exact for DSV4) is compared with what a re-prefill
computes, and its deviation from the dense answer is reported.

With --device cuda the node's tables are on CUDA device 0 (every rank's,
with torch's current stream as the engine's stream: on the default
stream its cuda_stream is 0, the legacy default stream) and the engine
reads and writes them there in place; the arithmetic stays on the CPU
in float64 (each read is copied out, each write copied in, on that
stream), so the comparisons are the CPU mode's, and what the device mode
adds is the node's device tables, results and host-tier copies under an
engine that reads and writes them on its stream.

Exit status: 0 every comparison held; 1 one did not, the library
refused, or the report could not be written; 2 bad usage (an unknown
value, a flag given twice, --seed outside 0 to 2**63 - 1); 3 --device cuda
without a CUDA device torch can use.
"""

import argparse
import dataclasses
import hashlib
import math
import pickle
import sys
import threading
import time

import numpy as np
import torch

import kvshard
from _cli import parse_once, unwritable

F64 = torch.float64
RING4 = 8  # rows of a ratio-4 ring (attention and indexer)
RING128 = 128  # rows of a ratio-128 ring
TAIL_POSITIONS = 4  # positions before a block boundary a tail state keeps
TAIL_ROWS = 2  # their rows per window page
RTOL, ATOL = 1e-7, 1e-9  # engine against reference: float64 order only
FAULTS = ("zero_csa_rows", "zero_hca_rows", "zero_indexer_rows", "skip_restore",
          "no_tail_states", "drop_tail_window")


def bf16(t):
    """What a bf16 tier holds of a float64 value, as float64."""
    return t.to(torch.bfloat16).to(F64)


def f32(t):
    """What an fp32 ring row holds, as float64."""
    return t.to(torch.float32).to(F64)


def rms(x):
    return x / torch.sqrt((x * x).mean(-1, keepdim=True) + 1e-6)


def softmax(x, dim):
    """exp(x - max) / sum: torch 1.13's float64 softmax on the CPU is some
    15 times slower than these four operations."""
    e = (x - x.amax(dim, keepdim=True)).exp()
    return e / e.sum(dim, keepdim=True)


# ---- the model ----

class Model:
    """Weights of the toy DSV4 geometry, float64."""

    def __init__(self, seed=1, vocab=64, hidden=32, head_dim=32, index_head_dim=16, heads=4,
                 index_heads=4, ratios=(0, 4, 128, 4, 128), window=128, top_k=16):
        g = torch.Generator().manual_seed(seed)

        def w(*shape, fan_in=1.0, scale=1.0):
            return torch.randn(*shape, generator=g, dtype=F64) * (scale / math.sqrt(fan_in))

        self.vocab, self.hidden, self.d, self.di = vocab, hidden, head_dim, index_head_dim
        self.heads, self.index_heads, self.window, self.top_k = heads, index_heads, window, top_k
        self.ratios = tuple(ratios)
        self.embed = w(vocab, hidden)
        self.layers = []
        D, d, di = hidden, head_dim, index_head_dim
        csa = hca = 0
        for r in ratios:
            lw = {"ratio": r, "wq": w(heads * d, D, fan_in=D), "wkv": w(d, D, fan_in=D),
                  "wo": w(D, heads * d, fan_in=heads * d)}
            if r:
                c = 2 if r == 4 else 1  # the ratio-4 compressor overlaps: two halves
                lw.update(wca=w(c * d, D, fan_in=D), wcb=w(c * d, D, fan_in=D),
                          ape=w(r, c * d, scale=0.5))
            if r == 4:
                lw.update(wiq=w(index_heads * di, D, fan_in=D), wiw=w(index_heads, D, fan_in=D),
                          wia=w(2 * di, D, fan_in=D), wib=w(2 * di, D, fan_in=D),
                          iape=w(4, 2 * di, scale=0.5))
                lw["tier"] = csa  # its index in the ratio-4 views
                csa += 1
            elif r == 128:
                lw["tier"] = hca
                hca += 1
            self.layers.append(lw)
        self.wout = w(vocab, D, fan_in=D)

    def node_options(self):
        return dict(head_dim=self.d, index_head_dim=self.di, layers=len(self.ratios),
                    ratios=list(self.ratios))

    def compressor_inputs(self, lw, x, ps):
        """(kv, score) per position as the ring keeps them (fp32)."""
        a = x @ lw["wca"].T
        b = x @ lw["wcb"].T + lw["ape"][ps % lw["ratio"]]
        return f32(a), f32(b)

    def indexer_inputs(self, lw, x, ps):
        return f32(x @ lw["wia"].T), f32(x @ lw["wib"].T + lw["iape"][ps % 4])

    def index_scores(self, lw, x, keys):
        """The Lightning indexer's score of every key row for every query:
        sum over heads of weight x relu(q . k)."""
        q = (x @ lw["wiq"].T).view(x.shape[0], self.index_heads, self.di)
        weights = x @ lw["wiw"].T
        return (weights[:, None, :] @ torch.relu(q @ keys.T)).squeeze(1)


def compress_block(kv, score):
    """One compressed row from its entries: a softmax over the entries per
    dimension, the weighted sum, RMS-normalised, as a bf16 tier holds it."""
    return bf16(rms((softmax(score, dim=0) * kv).sum(0)))


# ---- ranks as threads: the engine's own collectives ----

class Group:
    """The engine's activations' collectives between rank threads (its
    schedule reaches every rank in kvshard's step)."""

    def __init__(self, n):
        self.n = n
        self.barrier = threading.Barrier(n, timeout=120)
        self.slots = [None] * n

    def allreduce(self, rank, t):
        if self.n == 1:
            return t
        self.slots[rank] = t
        self.barrier.wait()
        total = self.slots[0].clone()
        for r in range(1, self.n):  # the same order on every rank
            total += self.slots[r]
        self.barrier.wait()
        return total


# ---- one rank's engine: computes with kvshard's tables ----

class DeviceTable:
    """A table on the GPU as the engine's float64 CPU arithmetic reaches
    it: a read copies the indexed rows out, a write copies them in, both
    on torch's current stream (the node's engine stream), indices moved to
    the device."""

    def __init__(self, t):
        self.t = t
        self.shape = t.shape
        self.dtype = t.dtype

    def _index(self, i):
        if isinstance(i, tuple):
            return tuple(self._index(x) for x in i)
        return i.to(self.t.device) if isinstance(i, torch.Tensor) else i

    def __getitem__(self, i):
        return self.t[self._index(i)].cpu()

    def __setitem__(self, i, v):
        self.t[self._index(i)] = v.to(self.t.device) if isinstance(v, torch.Tensor) else v

    def clone(self):
        return self.t.cpu().clone()


def host_results(res):
    """A cuda node's step results are Views of device memory: the
    contexts the engine checks, copied to the host."""
    return {k: torch.from_dlpack(v).cpu().numpy() if isinstance(v, kvshard.View) else v
            for k, v in res.items()}


class RankEngine:
    def __init__(self, node, model, rank, tp, group, rings, faults=()):
        self.node, self.m, self.rank, self.tp, self.group = node, model, rank, tp, group
        self.P = node.page
        self.faults = set(faults)
        self.t = {name: torch.from_dlpack(v) for name, v in node.tables().items()}
        if node.device == "cuda":
            self.t = {name: DeviceTable(t) for name, t in self.t.items()}
        self.map = self.t["mapping"]
        self.csa_per_request = rings in ("per-request",)
        self.hca_per_request = rings in ("per-request", "hca-per-request")
        # Tail states: with ratio-4 rings per request and a prefix cache, two
        # rows per window page after the request slots' rings.
        self.tail_first = (node.max_running + 1) * RING4 if self.csa_per_request else None
        if self.tail_first is not None:
            want = self.tail_first + node.window_pages * TAIL_ROWS + 1
            if self.t["state_4"].shape[1] != want:
                raise AssertionError(f"state_4 has {self.t['state_4'].shape[1]} rows; the "
                                     f"rings and tail states are {want}")
        hl = model.heads // tp
        self.heads = slice(rank * hl * model.d, (rank + 1) * hl * model.d)
        self.local_heads = hl
        self.checked_rows = 0

    # -- where things are --

    def locs(self, pages, ps):
        return pages[ps // self.P] * self.P + ps % self.P

    def wslots(self, pages, ps, what):
        w = self.map[self.locs(pages, ps)]
        if (w < 0).any():
            bad = ps[w < 0][0].item()
            raise AssertionError(f"rank {self.rank}: {what}: position {bad} has no window slot")
        return w

    def ring4(self, slot, w, ps):
        if self.csa_per_request:
            return slot * RING4 + ps % RING4
        return (w // self.P) * RING4 + w % RING4

    def ring128(self, slot, w, ps):
        if self.hca_per_request:
            return slot * RING128 + ps % RING128
        return (w // self.P) * RING128 + w % RING128

    # -- the step's ring contexts, held to the mapping --

    def check_contexts(self, items, res):
        """Every row's own/prev/ring window slots and ring locations as the
        mapping and the ring placement give them."""
        P = self.P
        for r, it in enumerate(items):
            p = it["e"] - 1
            # Positions p, p - 1 and, for each ring slot j, the latest q <= p
            # with q % P == j (negative: not reached).
            qs = torch.cat([torch.tensor([p, max(p - 1, 0)]), p - ((p - torch.arange(P)) % P)])
            want = torch.full_like(qs, -1)
            reached = qs >= 0
            want[reached] = self.map[self.locs(it["pages_t"], qs[reached])]
            own, prev = int(want[0]), int(want[1])
            # Before the window's floor the slots are not this request's to read.
            keep = (qs[2:] >= it["win_floor"]) | ~reached[2:]
            ring = torch.from_numpy(res["ring"][r])
            pt, w = torch.tensor([p]), torch.tensor([own])
            for what, got, expected in (
                    ("own", res["own"][r], own), ("prev", res["prev"][r], prev),
                    ("ring", ring[keep].tolist(), want[2:][keep].tolist()),
                    ("csa_loc", res["csa_loc"][r], int(self.ring4(it["slot"], w, pt)[0])),
                    ("hca_loc", res["hca_loc"][r], int(self.ring128(it["slot"], w, pt)[0]))):
                if got != expected:
                    raise AssertionError(
                        f"rank {self.rank}: the step's {what} of request {it['rid']} at position "
                        f"{p} is {got}; the mapping and the ring placement give {expected}")
            self.checked_rows += 1

    # -- one batch --

    def compute(self, items, res):
        """Runs every item's chunk through every layer; returns per item the
        attention outputs [n, layers, hidden] and logits [n, vocab]."""
        m = self.m
        self.check_contexts(items, res)
        if "skip_restore" in self.faults:
            self.undo_restores(items)
        hs = [m.embed[it["tokens_t"]] for it in items]
        outs = [[] for _ in items]
        for li, lw in enumerate(m.layers):
            parts = []
            for i, it in enumerate(items):
                x = rms(hs[i])
                self.write_layer(li, lw, it, x)
                parts.append(self.attend(li, lw, it, x))
            sizes = [p.shape[0] for p in parts]
            o = self.group.allreduce(self.rank, torch.cat(parts)).split(sizes)
            for i in range(len(items)):
                hs[i] = hs[i] + o[i]
                outs[i].append(o[i])
        return [(torch.stack(outs[i], 1), rms(hs[i]) @ m.wout.T) for i in range(len(items))]

    def undo_restores(self, items):
        """Negative control: an exact hit's ring as if kvshard had not
        restored its tail's state (the slot's rows as cleared)."""
        for it in items:
            if it["exact_hit"] and it["s"] == it["write_floor"] and self.csa_per_request:
                for name in ("state_4", "index_state"):
                    self.t[name][:, it["slot"] * RING4:(it["slot"] + 1) * RING4] = 0

    def write_layer(self, li, lw, it, x):
        """The chunk's window KV rows, ring rows and the compressed and
        indexer rows of every block it completes, in position order through
        the rings (a block reads its positions back from the ring)."""
        m = self.m
        ps, pages = it["ps"], it["pages_t"]
        w = self.wslots(pages, ps, f"layer {li} window write")
        self.t["window"][li, w] = (x @ lw["wkv"].T).to(torch.bfloat16)
        r = lw["ratio"]
        if r == 0:
            return
        a, b = m.compressor_inputs(lw, x, ps)
        if r == 4:
            ia, ib = m.indexer_inputs(lw, x, ps)
            jobs = [("state_4", "compressed_4", a, b, m.d),
                    ("index_state", "indexer", ia, ib, m.di)]
        else:
            jobs = [("state_128", "compressed_128", a, b, m.d)]
        s, e = it["s"], it["e"]
        for k in range(s // r, (e - 1) // r + 1):
            lo, hi = max(s, r * k), min(e, r * k + r)
            sel = slice(lo - s, hi - s)
            bp, bw = ps[sel], w[sel]
            ring = self.ring4(it["slot"], bw, bp) if r == 4 else self.ring128(it["slot"], bw, bp)
            for state, _, av, bv, width in jobs:
                self.t[state][lw["tier"], ring] = torch.cat([av[sel], bv[sel]], 1).to(torch.float32)
                if r == 4 and self.tail_first is not None and "no_tail_states" not in self.faults:
                    self.write_tail_state(state, lw["tier"], bp, bw, av[sel], bv[sel], width)
            if hi == r * k + r and r * k >= it["write_floor"]:  # complete, and not cached
                for state, tier, _, _, width in jobs:
                    self.compress(li, lw, it, k, state, tier, width)

    def compress(self, li, lw, it, k, state, tier, width):
        """Block k's row from its positions' ring rows (and, on a ratio-4
        layer, the first halves of the block before's)."""
        r, c, pages, slot = lw["ratio"], lw["tier"], it["pages_t"], it["slot"]
        own_p = torch.arange(r * k, r * k + r)
        own_w = self.wslots(pages, own_p, f"layer {li} block {k}")
        if r == 4:
            own = self.t[state][c, self.ring4(slot, own_w, own_p)].to(F64)
            kv, score = own[:, width:2 * width], own[:, 3 * width:]
            if k > 0:
                prev_p = own_p - 4
                prev_w = self.wslots(pages, prev_p, f"layer {li} block {k - 1}")
                prev = self.t[state][c, self.ring4(slot, prev_w, prev_p)].to(F64)
                kv = torch.cat([prev[:, :width], kv])
                score = torch.cat([prev[:, 2 * width:3 * width], score])
        else:
            own = self.t[state][c, self.ring128(slot, own_w, own_p)].to(F64)
            kv, score = own[:, :width], own[:, width:]
        row = self.locs(pages, torch.tensor(r * k)) // r
        self.t[tier][c, row] = compress_block(kv, score).to(torch.bfloat16)

    def write_tail_state(self, state, c, bp, bw, av, bv, width):
        """The first halves of a page's last four positions, into its
        window page's tail state (kvshard restores them for exact hits)."""
        P = self.P
        for j in range(bp.shape[0]):
            i = int(bp[j]) % P - (P - TAIL_POSITIONS)
            if i < 0:
                continue
            row = self.tail_first + int(bw[j]) // P * TAIL_ROWS + i // 2
            half = (i % 2) * 2 * width
            self.t[state][c, row, half:half + width] = av[j, :width].to(torch.float32)
            self.t[state][c, row, half + width:half + 2 * width] = bv[j, :width].to(torch.float32)

    def attend(self, li, lw, it, x):
        """This rank's heads of the layer's attention for the chunk's
        positions, through the output projection (summed across ranks)."""
        m, P = self.m, self.P
        ps, pages, n = it["ps"], it["pages_t"], it["ps"].shape[0]
        floor = it["win_floor"]
        if "drop_tail_window" in self.faults and it["exact_hit"]:
            floor = it["write_floor"]
        kp = torch.arange(max(floor, it["s"] - P + 1), it["e"])
        keys = [self.t["window"][li, self.wslots(pages, kp, f"layer {li} window read")].to(F64)]
        masks = [(kp[None, :] <= ps[:, None]) & (kp[None, :] > ps[:, None] - P)]
        r = lw["ratio"]
        if r:
            c = lw["tier"]
            nb = it["e"] // r  # blocks complete by the chunk's last position
            if nb:
                kb = torch.arange(nb)
                rows = self.locs(pages, kb * r) // r
                tier = "compressed_4" if r == 4 else "compressed_128"
                kc = self.t[tier][c, rows].to(F64)
                if ("zero_csa_rows" in self.faults and r == 4) or (
                        "zero_hca_rows" in self.faults and r == 128):
                    kc = torch.zeros_like(kc)
                vis = (kb[None, :] * r + r - 1) <= ps[:, None]
                if r == 4:
                    ik = self.t["indexer"][c, rows].to(F64)
                    if "zero_indexer_rows" in self.faults:
                        ik = torch.zeros_like(ik)
                    score = m.index_scores(lw, x, ik).masked_fill(~vis, -math.inf)
                    order = torch.sort(score, dim=1, descending=True, stable=True).indices
                    top = torch.zeros_like(vis)
                    top.scatter_(1, order[:, :m.top_k], True)
                    vis = vis & top
                keys.append(kc)
                masks.append(vis)
        kv = torch.cat(keys)
        mask = torch.cat(masks, 1)
        hl, d = self.local_heads, m.d
        q = (x @ lw["wq"][self.heads].T).view(n, hl, d)
        s = (q @ kv.T) / math.sqrt(d)
        p = softmax(s.masked_fill(~mask[:, None, :], -math.inf), -1)
        o = (p @ kv).reshape(n, hl * d)
        return o @ lw["wo"][:, self.heads].T


# ---- the dense reference ----

@dataclasses.dataclass
class Reference:
    """A request's arrays over positions [0, N) (NaN where it neither
    computed nor was given a value) and where its own computation began."""
    start: int
    kv: list
    a: dict
    b: dict
    ia: dict
    ib: dict
    rows: dict
    idx: dict
    out: torch.Tensor  # [layers, N, hidden]
    logits: torch.Tensor  # [N, vocab]


@dataclasses.dataclass
class Recipe:
    """What the cache handed a request: its hit at H, exact (the tail's
    window and overlap state from `tail`) or re-prefilled, and for each
    page before H the request whose rows the cache holds there."""
    H: int = 0
    reprefill: bool = False
    fetched: bool = False
    page_providers: list = dataclasses.field(default_factory=list)
    tail: int = -1


def reference(model, tokens, P, recipe=None, refs=None):
    """The model over the whole history in float64, dense: window
    attention over the last P tokens, the compressors over every block,
    the indexer's top-k over every complete row. With a recipe, the rows
    before the hit are the providers' (refs) and the computation starts at
    the hit (exact) or at the window page before it (re-prefill, whose
    window sees nothing before that page)."""
    m = model
    N, L, D = len(tokens), len(m.layers), m.hidden
    nan = lambda *shape: torch.full(shape, math.nan, dtype=F64)
    H = recipe.H if recipe else 0
    start = H - P if recipe and recipe.reprefill else H
    floor = H - P if H else 0
    kv = [nan(N, m.d) for _ in range(L)]
    a, b, ia, ib, rows, idx = {}, {}, {}, {}, {}, {}
    for li, lw in enumerate(m.layers):
        r = lw["ratio"]
        if r:
            c = 2 if r == 4 else 1
            a[li], b[li], rows[li] = nan(N, c * m.d), nan(N, c * m.d), nan(N // r, m.d)
        if r == 4:
            ia[li], ib[li], idx[li] = nan(N, 2 * m.di), nan(N, 2 * m.di), nan(N // 4, m.di)
    out, logits = nan(L, N, D), nan(N, m.vocab)
    if H:
        for j, provider in enumerate(recipe.page_providers):
            y = refs[provider]
            for li, lw in enumerate(m.layers):
                r = lw["ratio"]
                if r:
                    blocks = slice(j * P // r, (j + 1) * P // r)
                    rows[li][blocks] = y.rows[li][blocks]
                    if r == 4:
                        idx[li][blocks] = y.idx[li][blocks]
        if not recipe.reprefill:
            t = refs[recipe.tail]
            for li, lw in enumerate(m.layers):
                kv[li][H - P:H] = t.kv[li][H - P:H]
                if lw["ratio"] == 4:
                    tail = slice(H - TAIL_POSITIONS, H)
                    a[li][tail, :m.d], b[li][tail, :m.d] = t.a[li][tail, :m.d], t.b[li][tail, :m.d]
                    ia[li][tail, :m.di] = t.ia[li][tail, :m.di]
                    ib[li][tail, :m.di] = t.ib[li][tail, :m.di]
    ps = torch.arange(start, N)
    h = m.embed[torch.tensor(tokens[start:])]
    for li, lw in enumerate(m.layers):
        x = rms(h)
        kv[li][start:] = bf16(x @ lw["wkv"].T)
        r = lw["ratio"]
        if r:
            a[li][start:], b[li][start:] = m.compressor_inputs(lw, x, ps)
            dense_blocks(rows[li], a[li], b[li], r, H, m.d)
        if r == 4:
            ia[li][start:], ib[li][start:] = m.indexer_inputs(lw, x, ps)
            dense_blocks(idx[li], ia[li], ib[li], 4, H, m.di)
        o = dense_attention(m, lw, x, ps, kv[li][floor:], floor, rows.get(li), idx.get(li), P)
        out[li, start:] = o
        h = h + o
    logits[start:] = rms(h) @ m.wout.T
    return Reference(start, kv, a, b, ia, ib, rows, idx, out, logits)


def dense_blocks(rows, a, b, r, first, width):
    """Every complete block from position `first` on, all at once."""
    k0, k1 = first // r, a.shape[0] // r
    if k1 <= k0:
        return
    own_a = a[k0 * r:k1 * r].reshape(k1 - k0, r, -1)
    own_b = b[k0 * r:k1 * r].reshape(k1 - k0, r, -1)
    if r == 4:
        prev_a = torch.zeros(k1 - k0, 4, width, dtype=F64)
        prev_b = torch.full((k1 - k0, 4, width), -math.inf, dtype=F64)  # block 0: none
        lo = max(k0, 1)
        prev_a[lo - k0:] = a[(lo - 1) * 4:(k1 - 1) * 4, :width].reshape(k1 - lo, 4, width)
        prev_b[lo - k0:] = b[(lo - 1) * 4:(k1 - 1) * 4, :width].reshape(k1 - lo, 4, width)
        kv = torch.cat([prev_a, own_a[:, :, width:]], 1)
        score = torch.cat([prev_b, own_b[:, :, width:]], 1)
    else:
        kv, score = own_a, own_b
    rows[k0:k1] = bf16(rms((softmax(score, 1) * kv).sum(1)))


def dense_attention(m, lw, x, ps, wkv, first, rows, idx, P):
    """Attention of queries at positions ps over their windows (the P
    positions up to each, of the keys wkv from position `first` on) and
    the layer's compressed rows, every head."""
    n = ps.shape[0]
    q = (x @ lw["wq"].T).view(n, m.heads, m.d)
    # Each query's window, gathered: offsets into wkv of positions q-P+1..q.
    off = ps[:, None] - first - torch.arange(P - 1, -1, -1)[None, :]
    wmask = off >= 0
    kw = wkv[off.clamp(min=0)]  # [n, P, d]
    if torch.isnan(kw[wmask]).any():
        raise AssertionError("the reference reads a window key it was neither given nor computed")
    scores, masks = [q @ torch.nan_to_num(kw).transpose(1, 2)], [wmask]
    r = lw["ratio"]
    kc = None
    if r and rows.shape[0]:
        nb = rows.shape[0]
        kb = torch.arange(nb)
        vis = (kb[None, :] * r + r - 1) <= ps[:, None]
        if r == 4:
            # Top-k by threshold: the rows scoring above the k-th highest
            # visible score, then rows equal to it, lowest index first.
            score = m.index_scores(lw, x, torch.nan_to_num(idx)).masked_fill(~vis, -math.inf)
            k = min(m.top_k, nb)
            thr = torch.topk(score, k, dim=1).values[:, -1:]
            above = (score > thr) & vis
            tie = (score == thr) & vis
            room = m.top_k - above.sum(1, keepdim=True)
            vis = above | (tie & (torch.cumsum(tie.long(), 1) <= room))
        if torch.isnan(rows[vis.any(0)]).any():
            raise AssertionError("the reference reads a row it was neither given nor computed")
        kc = torch.nan_to_num(rows)
        scores.append(q @ kc.T)
        masks.append(vis)
    s = torch.cat(scores, -1) / math.sqrt(m.d)
    p = softmax(s.masked_fill(~torch.cat(masks, 1)[:, None, :], -math.inf), -1)
    o = p[:, :, :P] @ torch.nan_to_num(kw)
    if kc is not None:
        o = o + p[:, :, P:] @ kc
    return o.reshape(n, -1) @ lw["wo"].T


# ---- the scheduler (rank 0) ----

@dataclasses.dataclass
class Request:
    rid: int
    prompt: list
    max_new: int
    tokens: list = None
    pages: list = dataclasses.field(default_factory=list)
    own: set = dataclasses.field(default_factory=set)  # pages the engine allocated
    next: int = 0
    freed_below: int = 0  # pages whose window bindings were freed
    recipe: Recipe = dataclasses.field(default_factory=Recipe)
    slot: int = -1
    outs: dict = dataclasses.field(default_factory=dict)  # position -> (attn, logits)


def chain_keys(tokens, P):
    """One key per full page: a hash chained over the pages before it."""
    keys, parent = [], b""
    for j in range(len(tokens) // P):
        h = hashlib.blake2b(parent + np.asarray(tokens[j * P:(j + 1) * P], np.int64).tobytes(),
                            digest_size=8).digest()
        keys.append(int.from_bytes(h, "little"))
        parent = h
    return keys


class Scheduler:
    """Rank 0's decisions: admission with prefix matching, pages, binds,
    chunked prefill and decode, inserts, frees, finishes, eviction. It
    tracks, for the reference only, which request's rows each cached block
    (and host copy, and tail) holds."""

    def __init__(self, node, phases, chunk, page_cap, max_running, reprefill=True):
        self.node, self.P = node, node.page
        self.phases = list(phases)
        self.chunk, self.max_running, self.reprefill = chunk, max_running, reprefill
        # The last full page is the node's dummy.
        self.free = list(range(min(page_cap, node.num_pages - 1)))
        self.waiting, self.running, self.done = [], [], []
        self.held = []  # requests waiting for another's prefill to end
        self.page_key = {}  # cached page -> its key
        self.gpu_provider, self.host_provider, self.tail_provider = {}, {}, {}
        self.events = []
        self.steps = 0

    # -- pages --

    def take_pages(self, n):
        if len(self.free) < n:
            freed = self.node.prefix_evict(n - len(self.free))
            self.evicted(freed)
        if len(self.free) < n:
            return None
        got, self.free = self.free[:n], self.free[n:]
        return got

    def evicted(self, freed):
        for page in freed.tolist():
            key = self.page_key.pop(page)
            if self.host_slots and key not in self.host_provider:
                self.host_provider[key] = self.gpu_provider[key]  # spilled: its rows move
            self.gpu_provider.pop(key)
            self.tail_provider.pop(key, None)
            self.free.append(page)
        if len(freed):
            self.events.append(f"evicted {len(freed)} pages")

    @property
    def host_slots(self):
        return self.node.prefix_stats().host_slots

    # -- requests --

    def admit(self, q):
        P, node = self.P, self.node
        keys = chain_keys(q.prompt, P)
        match = lambda: node.prefix_match(keys, len(q.prompt),
                                          reprefill_tokens=P if self.reprefill else 0)
        hit, pages = match(), []
        while len(pages) < hit.host_pages:
            # The pages a fetch fills; evicting for them may change the
            # index, so match again once they are here.
            more = self.take_pages(hit.host_pages - len(pages))
            if more is None:
                self.free = pages + self.free
                return False
            pages += more
            hit = match()
        self.free = pages[hit.host_pages:] + self.free
        pages = pages[:hit.host_pages]
        rc = Recipe()
        if q.rid % 2 == 0:  # kvshard takes the slot and the hit in either order
            q.slot = node.admit(q.rid)
        if hit.host_pages:
            node.prefix_fetch(q.rid, hit, keys, pages)
            fetched = iter(pages)
            table = [int(p) if p >= 0 else next(fetched) for p in hit.pages[:hit.hit_tokens // P]]
            for j, page in enumerate(table):
                if page in pages:
                    self.page_key[page] = keys[j]
                    self.gpu_provider[keys[j]] = self.host_provider[keys[j]]
            rc = Recipe(hit.hit_tokens, True, True)
            self.events.append(f"request {q.rid}: hit {hit.hit_tokens} tokens, "
                               f"{hit.host_pages} pages fetched from the host tier, re-prefill")
        elif hit.block >= 0:
            node.prefix_acquire(q.rid, hit)
            table = [int(p) for p in hit.pages[:hit.hit_tokens // P]]
            rc = Recipe(hit.hit_tokens, bool(hit.reprefill))
            self.events.append(f"request {q.rid}: {'re-prefill' if hit.reprefill else 'exact'} "
                               f"hit of {hit.hit_tokens} tokens")
        else:
            table = []
        if rc.H:
            rc.page_providers = [self.gpu_provider[keys[j]] for j in range(rc.H // P)]
            last = keys[rc.H // P - 1]
            if rc.reprefill:
                self.tail_provider[last] = q.rid  # it writes the tail
            else:
                rc.tail = self.tail_provider[last]
        if q.rid % 2 == 1:
            q.slot = node.admit(q.rid)
        q.tokens = list(q.prompt)
        q.pages = table
        q.recipe = rc
        q.next = rc.H - P if rc.reprefill else rc.H
        q.freed_below = 0
        self.running.append(q)
        return True

    def plan(self):
        """The next step's work, or None when every phase is done."""
        while not self.waiting and not self.running and not self.held and self.phases:
            phase = self.phases.pop(0)
            if "evict" in phase:
                n = self.node.num_pages if phase["evict"] == "all" else phase["evict"]
                self.evicted(self.node.prefix_evict(n))
            for spec in phase["requests"]:
                spec = dict(spec)
                after = spec.pop("after_prefill", None)
                if after:
                    self.held.append((after, Request(**spec)))
                else:
                    self.waiting.append(Request(**spec))
        if not self.waiting and not self.running:
            if self.held:
                raise RuntimeError("a request waits for a prefill that never ends")
            return None
        while self.waiting and len(self.running) < self.max_running:
            if not self.admit(self.waiting[0]):
                break
            self.waiting.pop(0)
        items = []
        for q in self.running:
            s = q.next
            e = min(s + self.chunk, len(q.prompt)) if s < len(q.prompt) else s + 1
            need = (e - 1) // self.P + 1 - len(q.pages)
            if need > 0:
                pages = self.take_pages(need)
                if pages is None:
                    continue  # waits for pages
                for page in pages:
                    self.node.bind(q.rid, np.arange(page * self.P, (page + 1) * self.P))
                q.pages += pages
                q.own.update(pages)
            items.append(dict(rid=q.rid, s=s, e=e, tokens=q.tokens[s:e], pages=list(q.pages),
                              slot=q.slot, win_floor=q.recipe.H - self.P if q.recipe.H else 0,
                              write_floor=q.recipe.H,
                              exact_hit=bool(q.recipe.H) and not q.recipe.reprefill))
        if not items:
            raise RuntimeError("no request can run: pages exhausted")
        positions = np.array([it["e"] - 1 for it in items], dtype=np.int64)
        self.steps += 1
        window_rows = self.steps % 2 == 0  # every other step, the two pages a window reads
        if window_rows:
            table = np.full((len(items), 2), -1, dtype=np.int32)
            for r, (it, p) in enumerate(zip(items, positions)):
                b = p // self.P
                table[r] = [it["pages"][b - 1] if b else -1, it["pages"][b]]
        else:
            stride = max(len(it["pages"]) for it in items)
            table = np.full((len(items), stride), -1, dtype=np.int32)
            for r, it in enumerate(items):
                table[r, :len(it["pages"])] = it["pages"]
        batch = {"requests": np.array([it["rid"] for it in items], dtype=np.uint64),
                 "positions": positions, "block_table": table, "window_rows": window_rows}
        return {"batch": batch, "items": items}

    def finish_step(self, plan, results):
        """After the step's compute: tokens, inserts, window frees,
        finishes."""
        node, P = self.node, self.P
        by_rid = {q.rid: q for q in self.running}
        for it, (attn, logits) in zip(plan["items"], results):
            q = by_rid[it["rid"]]
            for j, p in enumerate(range(it["s"], it["e"])):
                q.outs[p] = (attn[j], logits[j])
            q.next = it["e"]
            if q.next >= len(q.prompt):
                q.tokens.append(int(torch.argmax(logits[-1])))
            if q.next == len(q.prompt):
                self.insert(q)
                self.waiting += [h for after, h in self.held if after == q.rid]
                self.held = [(after, h) for after, h in self.held if after != q.rid]
            lo = max(0, (q.next - P + 1) // P)
            if lo > q.freed_below:
                node.free(np.concatenate([np.arange(pg * P, (pg + 1) * P)
                                          for pg in q.pages[q.freed_below:lo]]))
                q.freed_below = lo
            if len(q.tokens) - len(q.prompt) == q.max_new:
                self.finish(q)

    def insert(self, q):
        P = self.P
        keys = chain_keys(q.prompt, P)
        first = q.recipe.H // P
        if len(keys) <= first:
            return
        pages = q.pages[first:len(keys)]
        tails = [False] * (len(pages) - 1) + [True]
        taken = self.node.prefix_insert(q.rid, keys[first:], pages, tails=tails)
        for j, (key, page, took) in enumerate(zip(keys[first:], pages, taken)):
            if took:
                self.page_key[page] = key
                self.gpu_provider[key] = q.rid
                q.own.discard(page)  # the cache's now
                if tails[j]:
                    self.tail_provider[key] = q.rid

    def finish(self, q):
        node, P = self.node, self.P
        node.free(np.concatenate([np.arange(pg * P, (pg + 1) * P) for pg in q.pages]))
        node.prefix_release(q.rid)
        node.finish(q.rid)
        self.free += sorted(q.own)
        q.own = set()
        self.running.remove(q)
        self.done.append(q)
        self.events.append(f"request {q.rid} finished")


# ---- a run ----

@dataclasses.dataclass
class Outcome:
    rings: str
    faults: tuple
    requests: list  # the finished Requests, with the engine's outputs
    refs: dict  # rid -> Reference (provenance)
    dense: dict  # rid -> Reference (the dense answer over the whole history)
    stats: object
    events: list
    steps: int
    batch_rows: int  # the steps' batch rows (one rank's)
    checked_rows: int  # the rows whose ring contexts were checked (every rank's)
    seconds: float
    failures: list  # what did not match
    # rid -> the largest |attention output - dense| and |logit - dense| over
    # the positions computed, then each over the largest |dense| value there
    deviations: dict


def scenario(vocab, seed=7):
    """Phases of requests, each phase submitted once the ones before it
    finished (or once a request's prefill ended: after_prefill). A shared
    three-page prefix S: request 1 caches it keeping its last page's
    window as the tail, and request 11 hits it exactly while request 1
    decodes on; requests 3 and 8 hit it exactly
    (together: one step restores both rings from one tail state); request
    4 hits two pages whose boundary has no tail and re-prefills it;
    request 6 hits exactly through the tail request 4 wrote; everything
    is evicted to the host tier and request 7's hit is fetched back;
    request 9 caches two more pages below S, which alone are evicted, so
    request 10's hit is S on the GPU and those two pages from the host
    tier. The engine's page cap forces evictions on the way (request 2's
    pages, spilled)."""
    g = np.random.default_rng(seed)
    tok = lambda n: g.integers(0, vocab, n).tolist()
    S, W = tok(384), tok(300)
    return [
        {"requests": [dict(rid=1, prompt=S + tok(90), max_new=8),
                      dict(rid=2, prompt=tok(300), max_new=8),
                      dict(rid=11, prompt=S + tok(30), max_new=3, after_prefill=1)]},
        {"requests": [dict(rid=3, prompt=S + tok(40), max_new=6),
                      dict(rid=8, prompt=S + tok(60), max_new=3),
                      dict(rid=4, prompt=S[:256] + tok(100), max_new=6),
                      dict(rid=5, prompt=tok(200), max_new=12)]},
        {"requests": [dict(rid=6, prompt=S[:256] + tok(60), max_new=4)]},
        {"evict": "all", "requests": [dict(rid=7, prompt=S + tok(70), max_new=4)]},
        {"requests": [dict(rid=9, prompt=S + W, max_new=3)]},
        {"evict": 2, "requests": [dict(rid=10, prompt=S + W + tok(50), max_new=3)]},
    ]


def short_scenario(vocab, seed=7):
    """A request and an exact hit through its tail (the negative controls)."""
    g = np.random.default_rng(seed)
    tok = lambda n: g.integers(0, vocab, n).tolist()
    S = tok(384)
    return [{"requests": [dict(rid=1, prompt=S + tok(20), max_new=2)]},
            {"requests": [dict(rid=2, prompt=S + tok(40), max_new=6)]}]


# The step's payload: the leader's items, pickled (a chunk of 100 tokens
# for each of a few requests is a few KiB).
PAYLOAD_BYTES = 1 << 20


def node_options(model, rings, tp, max_running, device="cpu"):
    on_gpu = {} if device == "cpu" else dict(cuda_device=0, stream=torch.cuda.current_stream())
    return dict(topology="bundled", device=device, budget="4MiB", tp=tp, pp=1, page=128,
                max_seq_len=2048, max_running=max_running, bind_numa=False, prefix_cache=True,
                host_cache="2MiB", state_rings=rings, check_every=16, carry_batch=True,
                max_payload_bytes=PAYLOAD_BYTES, **on_gpu, **model.node_options())


def run(rings="per-request", tp=2, faults=(), phases=None, model=None, chunk=100, page_cap=8,
        max_running=4, references=None, device="cpu"):
    """Serves the phases on tp thread ranks; returns an Outcome with every
    comparison made. references: a dict kept across runs of one model
    (the references of a history and provenance computed once)."""
    model = model or Model()
    phases = phases if phases is not None else scenario(model.vocab)
    torch.set_num_threads(1)
    comms = kvshard.loopback_comms(tp, timeout_ms=20000)
    group = Group(tp)
    box = {}
    errors = [None] * tp
    t0 = time.perf_counter()

    def rank_main(rank):
        try:
            if device == "cuda":
                torch.cuda.set_device(0)  # each rank thread's own current device
            options = node_options(model, rings, tp, max_running, device)
            with kvshard.Node(comms[rank], **options) as node:
                eng = RankEngine(node, model, rank, tp, group, rings, faults)
                sched = Scheduler(node, phases, chunk, page_cap, max_running) if rank == 0 \
                    else None
                steps = batch_rows = 0
                while True:
                    # One collective a step: the leader's batch and its
                    # items (the work every rank computes) ride in the
                    # step; the step that says None lands the last frees.
                    if rank == 0:
                        plan = sched.plan()
                        items = plan["items"] if plan is not None else None
                        res = host_results(node.step(plan["batch"] if plan is not None
                                                     else None, payload=pickle.dumps(items)))
                    else:
                        res = host_results(node.step())
                        items = pickle.loads(res["payload"])
                    if items is None:
                        break
                    steps += 1
                    batch_rows += len(items)
                    for it in items:
                        it["ps"] = torch.arange(it["s"], it["e"])
                        it["pages_t"] = torch.tensor(it["pages"], dtype=torch.int64)
                        it["tokens_t"] = torch.tensor(it["tokens"], dtype=torch.int64)
                    results = eng.compute(items, res)
                    if rank == 0:
                        sched.finish_step(plan, results)
                report = node.check()
                box[rank] = dict(report=report, steps=steps, rows=eng.checked_rows,
                                 batch_rows=batch_rows,
                                 tables={k: v.clone() for k, v in eng.t.items()},
                                 stats=node.prefix_stats())
                if rank == 0:
                    box["sched"] = sched
        except BaseException as e:  # reported by the caller
            errors[rank] = e
            group.barrier.abort()

    threads = [threading.Thread(target=rank_main, args=(r,)) for r in range(tp)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for c in comms:
        c.close()
    for r, e in enumerate(errors):
        if e is not None and not isinstance(e, threading.BrokenBarrierError):
            raise RuntimeError(f"rank {r}: {type(e).__name__}: {e}") from e
    seconds = time.perf_counter() - t0
    failures = []
    for r in range(tp):
        if not box[r]["report"]["ok"]:
            failures.append(f"rank {r}'s check: {box[r]['report']['message']}")
    for r in range(1, tp):
        for name, t in box[0]["tables"].items():
            if not torch.equal(t.view(torch.uint8) if t.dtype == torch.bfloat16 else t,
                               box[r]["tables"][name].view(torch.uint8)
                               if t.dtype == torch.bfloat16 else box[r]["tables"][name]):
                failures.append(f"rank {r}'s {name} differs from rank 0's")
    sched = box["sched"]
    refs, dense, deviations, keys = {}, {}, {}, {}
    cache = references if references is not None else {}
    P = model.window
    for q in sorted(sched.done, key=lambda q: q.rid):
        seq = q.tokens[:-1]  # the last token is generated, never computed
        rc = q.recipe
        # The same history and provenance give the same references (another
        # ring mode's run, say).
        keys[q.rid] = (tuple(seq), rc.H, rc.reprefill,
                       tuple(keys[p] for p in rc.page_providers), keys.get(rc.tail))
        if keys[q.rid] not in cache:
            d = reference(model, seq, P)
            cache[keys[q.rid]] = (d, reference(model, seq, P, rc, refs) if rc.H else d)
        dense[q.rid], refs[q.rid] = cache[keys[q.rid]]
        ref = refs[q.rid]
        lo = ref.start
        got_pos = sorted(q.outs)
        if got_pos != list(range(lo, len(seq))):
            failures.append(f"request {q.rid}: computed positions {got_pos[0]}..{got_pos[-1]}, "
                            f"expected {lo}..{len(seq) - 1}")
            continue
        attn = torch.stack([q.outs[p][0] for p in got_pos], 1)  # [layers, n, hidden]
        logits = torch.stack([q.outs[p][1] for p in got_pos])
        for li in range(len(model.layers)):
            if not torch.allclose(attn[li], ref.out[li, lo:], rtol=RTOL, atol=ATOL):
                err = (attn[li] - ref.out[li, lo:]).abs().max().item()
                failures.append(f"request {q.rid}: layer {li} attention differs by {err:.3g}")
        if not torch.allclose(logits, ref.logits[lo:], rtol=RTOL, atol=ATOL):
            err = (logits - ref.logits[lo:]).abs().max().item()
            failures.append(f"request {q.rid}: logits differ by {err:.3g}")
        da = (ref.out[:, lo:] - dense[q.rid].out[:, lo:]).abs().max().item()
        dl = (ref.logits[lo:] - dense[q.rid].logits[lo:]).abs().max().item()
        deviations[q.rid] = (da, dl, da / dense[q.rid].out[:, lo:].abs().max().item(),
                             dl / dense[q.rid].logits[lo:].abs().max().item())
    return Outcome(rings, tuple(faults), sched.done, refs, dense, box[0]["stats"], sched.events,
                   box[0]["steps"], box[0]["batch_rows"], sum(box[r]["rows"] for r in range(tp)),
                   seconds, failures,
                   deviations)


def describe(o):
    lines = [f"rings {o.rings}{' faults ' + ','.join(o.faults) if o.faults else ''}: "
             f"{len(o.requests)} requests, {o.steps} steps, {o.checked_rows} step rows' contexts "
             f"checked, {o.seconds:.1f} s"]
    s = o.stats
    lines.append(f"  cache at the end: blocks {s.blocks}, tails {s.tails}; evictions "
                 f"{s.evictions}, tail drops {s.tail_drops}, spills {s.spills}, fetches "
                 f"{s.fetches}, host drops {s.host_drops} ({s.host_slots} host slots)")
    for e in o.events:
        if not e.endswith("finished"):
            lines.append(f"  {e}")
    for q in sorted(o.requests, key=lambda q: q.rid):
        ref = o.refs[q.rid]
        n = len(q.tokens) - 1 - ref.start
        kind = ("fetched, re-prefill" if q.recipe.fetched else "re-prefill" if q.recipe.reprefill
                else "exact hit" if q.recipe.H else "no hit")
        dev = o.deviations[q.rid]
        how = (f"deviates from dense by {dev[0]:.3g} in attention ({dev[2]:.0%} of its largest "
               f"value), {dev[1]:.3g} in logits ({dev[3]:.0%})"
               if max(dev) > ATOL else f"equals dense (within {max(dev):.1g})")
        lines.append(f"  request {q.rid}: {kind} at {q.recipe.H}, {n} positions computed, "
                     f"{how}")
    lines.append("  " + ("every attention output and logit matches the reference" if not o.failures
                         else f"{len(o.failures)} mismatches: " + "; ".join(o.failures[:4])))
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    ap.add_argument("--rings", default="all",
                    choices=["all", "per-request", "hca-per-request", "per-page"])
    ap.add_argument("--tp", type=int, default=2, choices=[1, 2, 4])
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"],
                    help="where the node's tables are (cuda: device 0, torch's current stream)")
    a = parse_once(ap)
    if not 0 <= a.seed < 2 ** 63:
        ap.error(f"--seed is 0 to 2**63 - 1 (torch's and numpy's seeds), got {a.seed}")
    if a.device == "cuda" and not torch.cuda.is_available():
        print("reference_engine: --device cuda, but torch sees no CUDA device "
              f"(torch {torch.__version__}, built with CUDA {torch.version.cuda})", file=sys.stderr)
        return 3
    rings = ["per-request", "hca-per-request", "per-page"] if a.rings == "all" else [a.rings]
    ok = True
    model, references = Model(seed=a.seed), {}
    try:
        for mode in rings:
            o = run(mode, tp=a.tp, model=model, references=references, device=a.device)
            print(describe(o))
            ok = ok and not o.failures
        sys.stdout.flush()  # a full disk is found here, not at exit
    except kvshard.Error as e:
        print(f"reference_engine: {e}", file=sys.stderr)
        return 1
    except OSError as e:
        return unwritable("reference_engine", e)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
