"""The reference engine (python/examples/reference_engine.py): a toy
DSV4-style model computing with kvshard's tables gets dense attention's
answer.

Two thread ranks (tensor parallel, kvshard.loopback_comms) serve eleven
requests in six phases under each ring placement (per-request,
hca-per-request, per-page): chunked prefill, batched decode, exact prefix
hits through retained tails (one while the request that left the tail
decodes on, two restored in one step), a re-prefill hit,
an exact hit through a re-prefilled tail, evictions forced by the engine's
page cap and spilled to the host tier, a hit fetched back whole and one
that is half on the GPU, half fetched. Every attention output and logit
of every position computed is held (torch.allclose) to a float64 dense
reference over the request's whole history, with the rows the cache hands
a request taken from the reference of the request that wrote them; the
ranks' tables are byte-identical and every step's ring contexts equal
what the mapping gives. Negative controls (the engine dropping a tier's
rows, undoing kvshard's tail-state restore, writing no tail states,
reading no tail window) must fail the same comparison.
"""

import os
import sys
import time
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples"))

try:
    import torch  # noqa: F401 (the engine views bf16 tiers with torch.from_dlpack)
except ImportError:
    torch = None

if torch is not None:
    import reference_engine as engine

MODES = ("per-request", "hca-per-request", "per-page")
# Requests whose every row is their own or an exact copy of a dense
# computation, and those downstream of a re-prefilled window.
EXACT = {1, 2, 3, 5, 8, 11}
REPREFILLED = {4: "re-prefill", 6: "exact hit through request 4's re-prefilled tail",
               7: "fetched, re-prefill", 9: "exact hit through request 7's re-prefilled tail",
               10: "half fetched, re-prefill"}


@unittest.skipIf(torch is None, f"{sys.executable} cannot import torch "
                 "(tools/setup.sh installs python3-torch)")
class ReferenceEngine(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.model = engine.Model()
        cls.references = {}
        cls.outcomes = {}
        for mode in MODES:
            t = time.perf_counter()
            cls.outcomes[mode] = engine.run(mode, tp=2, model=cls.model,
                                            references=cls.references)
            print(f"\n{engine.describe(cls.outcomes[mode])}\n  (with its references: "
                  f"{time.perf_counter() - t:.1f} s)", file=sys.stderr)

    def test_every_attention_output_and_logit_is_the_references(self):
        for mode, o in self.outcomes.items():
            with self.subTest(mode=mode):
                self.assertEqual(o.failures, [])
                self.assertEqual(sorted(q.rid for q in o.requests), list(range(1, 12)))

    def test_hits_whose_rows_are_exact_equal_dense_and_reprefills_are_measured(self):
        for mode, o in self.outcomes.items():
            for rid in EXACT:
                with self.subTest(mode=mode, request=rid):
                    self.assertLessEqual(max(o.deviations[rid]), engine.ATOL)
            for rid, what in REPREFILLED.items():
                with self.subTest(mode=mode, request=rid, what=what):
                    self.assertGreater(min(o.deviations[rid]), 1e-3,
                                       "a re-prefilled window is not exact for DSV4")

    def test_the_run_went_where_it_says(self):
        for mode, o in self.outcomes.items():
            with self.subTest(mode=mode):
                by = {q.rid: q for q in o.requests}
                kinds = {rid: (q.recipe.H, q.recipe.reprefill, q.recipe.fetched)
                         for rid, q in by.items()}
                self.assertEqual(kinds, {1: (0, False, False), 2: (0, False, False),
                                         3: (384, False, False), 4: (256, True, False),
                                         5: (0, False, False), 6: (256, False, False),
                                         7: (384, True, True), 8: (384, False, False),
                                         9: (384, False, False), 10: (640, True, True),
                                         11: (384, False, False)})
                self.assertEqual(by[11].recipe.tail, 1)
                self.assertLess(o.events.index("request 11: exact hit of 384 tokens"),
                                o.events.index("request 1 finished"), "request 1 decodes on")
                self.assertEqual(by[6].recipe.tail, 4)
                self.assertEqual(by[9].recipe.tail, 7)
                self.assertIn("request 10: hit 640 tokens, 2 pages fetched from the host tier, "
                              "re-prefill", o.events)
                s = o.stats
                self.assertGreaterEqual(s.evictions, 8)
                self.assertGreaterEqual(s.spills, 8)
                self.assertEqual(s.fetches, 5)
                self.assertEqual(s.host_drops, 0, "the provenance of a host copy is its first "
                                 "spill's: no slot may be reused")
                # Evictions the page cap forced before the phases' own.
                self.assertGreater(sum(e.startswith("evicted") for e in o.events), 2)
                self.assertEqual(o.checked_rows, 2 * o.batch_rows)

    def test_negative_controls_fail_the_comparison(self):
        phases = engine.short_scenario(self.model.vocab)
        clean = engine.run("per-request", tp=1, model=self.model, phases=phases,
                           references=self.references)
        self.assertEqual(clean.failures, [], "the control's scenario passes without a fault")
        for fault in engine.FAULTS:
            with self.subTest(fault=fault):
                o = engine.run("per-request", tp=1, model=self.model, phases=phases,
                               faults=(fault,), references=self.references)
                self.assertTrue(any("attention differs" in f or "logits differ" in f
                                    for f in o.failures),
                                f"{fault} passed the comparison: {o.failures}")
                print(f"  control {fault}: {o.failures[0]} (+{len(o.failures) - 1} more)",
                      file=sys.stderr)


@unittest.skipIf(torch is None, f"{sys.executable} cannot import torch")
class CommandLine(unittest.TestCase):
    """The program's refusals, each with its documented exit status."""

    def run_engine(self, *words, stdout=None):
        import subprocess
        example = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples",
                               "reference_engine.py")
        return subprocess.run([sys.executable, example, *words], stdout=stdout or subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, timeout=300)

    def test_bad_usage_is_refused_with_status_2(self):
        for words, says in ((["--device", "cpu", "--device=cpu"], "--device is given twice"),
                            (["--seed", "-1"], "--seed is 0 to 2**63 - 1"),
                            (["--seed", str(2 ** 63)], "--seed is 0 to 2**63 - 1"),
                            (["--tp", "0"], "invalid choice"),
                            (["--device", ""], "invalid choice")):
            out = self.run_engine(*words)
            self.assertEqual(out.returncode, 2, words)
            self.assertIn(says, out.stderr)

    def test_a_report_that_cannot_be_written_is_status_1(self):
        with open("/dev/full", "w") as full:
            out = self.run_engine("--tp", "1", "--rings", "per-page", stdout=full)
        self.assertEqual(out.returncode, 1, out.stderr)
        self.assertIn("reference_engine: writing the report: No space left on device", out.stderr)
        self.assertNotIn("Traceback", out.stderr)


if __name__ == "__main__":
    unittest.main()
