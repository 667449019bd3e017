"""kvshard.plan() and kvshard.fit() against the kvplan program: the same
options give the same JSON, key for key, and the same refusals in the same
words, for the layouts in docs/operators.md and for every kvplan plan/fit line of
the hostile list (tests/tools/hostile_cases.txt), all in one process, so
nothing one call leaves behind may change the next one's answer.

Needs KVPLAN (the kvplan program) and HOSTILE (tests/tools/hostile_test.sh,
which sets up the list's files) with its tools in the environment."""

import json
import os
import subprocess
import tempfile
import unittest

import kvshard
from kvshard.plan import ALIASES, FIT_OPTIONS, PLAN_OPTIONS, PRINTING, kvplan_help, library_flags
from kvshard._options import to_flags

KVPLAN = os.environ["KVPLAN"]
HGX = "topology/data/hgx-h200-2socket-8gpu.xml"
TOPOLOGIES = [
    "bundled",
    HGX,
    "tests/data/epyc-nps2-numa-per-pair-8gpu.xml",
    "tests/data/nvidiaDGX2.xml",
]
NO_GPU = "tests/data/24em64t-2n6c2t-pci.xml"


def kvplan(words, env=None):
    """(exit status, standard output, standard error) of the kvplan program."""
    # The hostile list's slowest fit (101 x 1M tokens of Pro, refused naming
    # 2 nodes) takes about 45 s on a loaded 2-core machine, several times
    # that under ASan: a hang still ends here, a slow answer does not.
    run = subprocess.run([KVPLAN] + words, capture_output=True, text=True, timeout=900,
                         env=dict(os.environ, **(env or {})), stdin=subprocess.DEVNULL)
    return run.returncode, run.stdout, run.stderr


def last_line(text):
    lines = [l for l in text.splitlines() if l.strip()]
    return lines[-1] if lines else ""


def assert_status(test, status, rc):
    """kvplan's usage errors (exit 2) are KVS_ERR_PARSE; its failures (exit
    1) carry the library's own status (a topology file that does not parse
    is KVS_ERR_PARSE too, a missing one KVS_ERR_IO, ...)."""
    test.assertTrue(status.startswith("KVS_ERR_"), status)
    if rc == 2:
        test.assertEqual(status, "KVS_ERR_PARSE")


class SameAnswers(unittest.TestCase):
    def assert_same(self, subcommand, options):
        table = PLAN_OPTIONS if subcommand == "plan" else FIT_OPTIONS
        words = [subcommand] + to_flags(options, table, "test") + ["--json"]
        rc, out, err = kvplan(words)
        call = kvshard.plan if subcommand == "plan" else kvshard.fit
        if rc == 0 or (subcommand == "fit" and rc == 1 and out.strip()):
            got = call(**options)
            self.assertEqual(got.to_dict(), json.loads(out), words)
            return got
        with self.assertRaises(kvshard.Error, msg=words) as e:
            call(**options)
        self.assertEqual(str(e.exception), last_line(err), words)
        assert_status(self, e.exception.status, rc)
        return None

    def test_plans_equal_kvplan_plan_json(self):
        layouts = [dict(tp=8), dict(tp=4, pp=2), dict(tp=2, pp=4), dict(tp=1, pp=8),
                   dict(dp=8, ep=8, tp=1)]
        budgets = [dict(budget="80GiB"), dict(budget="12GiB"),
                   dict(budget_per_gpu=["12GiB"] + ["80GiB"] * 7), {}]
        checked = 0
        for topology in TOPOLOGIES:
            for layout in layouts:
                for budget in budgets:
                    options = dict(topology=topology, **layout, **budget)
                    with self.subTest(**options):
                        self.assert_same("plan", options)
                        checked += 1
        self.assertEqual(checked, 80)

    def test_engine_rules_fp8_and_attributes(self):
        cases = [
            dict(topology="bundled", tp=8, kv_dtype="fp8"),
            dict(topology="bundled", tp=8, engine="sglang", mem_fraction=0.88,
                 weights="125.65GiB", free_before_load="137.90GiB"),
            dict(topology="bundled", tp=8, engine="sglang", launch=True),
            dict(topology=HGX, dp=8, ep=8, tp=1, expert_weights="600GiB",
                 shared_weights="40GiB"),
            dict(topology="bundled", tp=4, pp=2, max_running=16, max_seq_len="1M",
                 state_rings="per-page"),
            dict(topology=NO_GPU, budget="24GiB", tp=1),
        ]
        for options in cases:
            with self.subTest(**options):
                self.assert_same("plan", options)
        p = kvshard.plan(topology="bundled", tp=8, budget="80GiB")
        d = p.to_dict()
        self.assertEqual(p.num_pages, d["num_pages"])
        self.assertEqual(p.ranks[0].pool_bytes, d["ranks"][0]["pool_bytes"])
        self.assertEqual(len(p.ranks), 8)
        with self.assertRaises(AttributeError):
            p.no_such_key
        d["num_pages"] = -1  # a copy: the plan does not change
        self.assertNotEqual(p.num_pages, -1)

    def test_fits_equal_kvplan_fit_json(self):
        cases = [
            dict(topology="bundled", context="1M", concurrency=8),
            dict(topology="bundled", context=131072, concurrency=64, kv_dtype="fp8"),
            dict(topology="bundled", context="1M", concurrency=8, engine="sglang"),
            dict(topology="bundled", context="1M", concurrency=16777216),  # no layout fits
            dict(topology=HGX, context=65536, concurrency=32, max_concurrency=True),
        ]
        for options in cases:
            with self.subTest(**options):
                self.assert_same("fit", options)
        f = kvshard.fit(topology="bundled", context="1M", concurrency=16777216)
        self.assertFalse(f.fits)

    def test_refusals_raise_with_kvplans_words_and_details(self):
        with self.assertRaises(kvshard.Error) as e:
            kvshard.plan(topology="bundled", page=192)
        self.assertEqual(e.exception.status, "KVS_ERR_PARSE")
        self.assertTrue(str(e.exception).startswith("kvplan plan: "), str(e.exception))
        with self.assertRaises(kvshard.Error) as e:
            kvshard.plan(topology="bundled", budget="1GiB", tp=8)
        self.assertEqual(e.exception.status, "KVS_ERR_BUDGET_TOO_SMALL")
        self.assertIsInstance(e.exception.details, dict)
        with self.assertRaises(kvshard.Error) as e:
            kvshard.plan(topology="tests/data/no-such-file.xml")
        self.assertEqual(e.exception.status, "KVS_ERR_IO")
        with self.assertRaisesRegex(TypeError, "unknown option 'budgte'; did you mean 'budget'"):
            kvshard.plan(budgte="1GiB")
        with self.assertRaisesRegex(TypeError, "unknown option 'budget'"):
            kvshard.fit(budget="1GiB", context=1, concurrency=1)
        with self.assertRaisesRegex(TypeError, "option 'tp' takes an int"):
            kvshard.plan(tp=8.0)
        # A failed call leaves nothing behind: the next one answers as
        # kvplan does.
        self.assert_same("plan", dict(topology="bundled", tp=8))

    def test_the_option_tables_are_kvplans(self):
        for subcommand, table in (("plan", PLAN_OPTIONS), ("fit", FIT_OPTIONS)):
            with self.subTest(subcommand):
                rc, out, _ = kvplan([subcommand, "--help"])
                self.assertEqual(rc, 0)
                self.assertEqual(kvplan_help(subcommand), out)
                listed = library_flags(subcommand)
                self.assertEqual(set(table) - ALIASES, listed)
                self.assertEqual(set(table) & PRINTING, set())


def hostile_kwargs(args):
    """kvplan words as keyword options: (subcommand, kwargs), ("unknown",
    name) for a flag no option stands for, or None for what a call cannot
    say (printing, a stray word, a flag given twice, a missing value)."""
    subcommand = "plan"
    if args and not args[0].startswith("-"):
        subcommand, args = args[0], args[1:]
    if subcommand not in ("plan", "fit"):
        return None
    table = PLAN_OPTIONS if subcommand == "plan" else FIT_OPTIONS
    kwargs = {}
    i = 0
    while i < len(args):
        word = args[i]
        if not word.startswith("--") or word in (">/dev/full", ">&-"):
            return None
        name, eq, value = word[2:].partition("=")
        key = name.replace("-", "_")
        if key.startswith("no_") and table.get(key[3:]) == "switch":
            key, value = key[3:], False
        elif table.get(key) in ("switch", "flag"):
            if eq:
                return None
            value = True
        if key in PRINTING or key == "json":
            return None
        kind = table.get(key)
        if kind is None:
            return ("unknown", key)
        if kind not in ("switch", "flag") and not eq:
            if i + 1 >= len(args) or args[i + 1].startswith("--"):
                return None
            value = args[i + 1]
            i += 1
        if key in kwargs:
            return None
        if kind in ("bytes_list", "int_list"):
            value = value.split(",")
        kwargs[key] = value
        i += 1
    return subcommand, kwargs


class HostileReplay(unittest.TestCase):
    """Every kvplan plan/fit line of the hostile list, as a call."""

    @classmethod
    def setUpClass(cls):
        tmp = os.environ.get("TEST_TMPDIR") or tempfile.mkdtemp()
        env = dict(os.environ, TEST_TMPDIR=tmp, HOSTILE_SETUP_ONLY="1")
        tools = os.environ["HOSTILE_TOOLS"].split()
        subprocess.run(["bash", os.environ["HOSTILE"], os.environ["HOSTILE_CASES"]] + tools,
                       check=True, env=env, stdin=subprocess.DEVNULL)
        cls.T = os.path.join(tmp, "hostile")

    def test_every_plan_and_fit_line(self):
        replayed = unknown = 0
        with open(os.environ["HOSTILE_CASES"]) as f:
            lines = [l.rstrip("\n") for l in f if l.strip() and not l.startswith("#")]
        for line in lines:
            want, command, says = line.split(" | ", 2)
            command = command.replace("$T", self.T)
            says = says.replace("$T", self.T)
            words = command.split()
            env = {}
            while words and "=" in words[0] and words[0].split("=")[0].isupper():
                k, v = words[0].split("=", 1)
                env[k] = v
                words = words[1:]
            if words[0] != "kvplan":
                continue
            # The backend registry loads a backend once per process, on the
            # loader's path as it was at start: a line that moves where it
            # looks runs in a process of its own (hostile_test.sh), never in
            # this one.
            if env.keys() & {"KVSHARD_BACKEND_PATH", "KVSHARD_CUDA_PATH", "LD_LIBRARY_PATH"}:
                continue
            converted = hostile_kwargs(words[1:])
            if converted is None:
                continue
            with self.subTest(line=line):
                if converted[0] == "unknown":
                    call = kvshard.fit if "fit" in words[1:2] else kvshard.plan
                    with self.assertRaisesRegex(TypeError, f"unknown option '{converted[1]}'"):
                        call(**{converted[1]: "1"})
                    unknown += 1
                    continue
                subcommand, kwargs = converted
                table = PLAN_OPTIONS if subcommand == "plan" else FIT_OPTIONS
                flags = [subcommand] + to_flags(kwargs, table, "test") + ["--json"]
                rc, out, err = kvplan(flags, env)
                # The words as a call mean what the case's words mean.
                self.assertEqual(str(rc), want, (flags, err))
                call = kvshard.plan if subcommand == "plan" else kvshard.fit
                saved = {k: os.environ.get(k) for k in env}
                os.environ.update(env)
                try:
                    if rc == 0 or (subcommand == "fit" and rc == 1 and out.strip()):
                        self.assertEqual(call(**kwargs).to_dict(), json.loads(out))
                    else:
                        with self.assertRaises(kvshard.Error) as e:
                            call(**kwargs)
                        self.assertEqual(str(e.exception), last_line(err))
                        self.assertIn(says, str(e.exception))
                        assert_status(self, e.exception.status, rc)
                finally:
                    for k, v in saved.items():
                        if v is None:
                            os.environ.pop(k, None)
                        else:
                            os.environ[k] = v
                replayed += 1
        print(f"hostile plan/fit lines replayed as calls: {replayed}, "
              f"unknown flags refused as TypeError: {unknown}")
        self.assertGreater(replayed, 120)


if __name__ == "__main__":
    unittest.main()
