"""kvs_mutant_test: a planted bug and the test that must catch it (a C
mutant build); kvs_py_mutant_test: the same for the Python package."""

load("//:mutants.bzl", "mutant_label")

def kvs_mutant_test(name, mutant, test, expect, args = [], env = {}, size = "medium"):
    """Passes when `test` passes and its `mutant` build fails saying `expect`.

    Args:
      name: the sh_test.
      mutant: the planted bug's name (KVS_MUTANT_<MUTANT> in the source).
      test: the kvs_cc_test label; kvs_cc_test(mutants = {mutant: ...})
        defines its variant, <test>_mutant_<mutant>.
      expect: text the mutant build's output must hold (the assertion the
        bug trips), or a list of texts, any of which will do (the ways
        the bug may show first).
      args: arguments for both runs (a gtest filter).
      env: environment for both runs (a short schedule count).
      size: the sh_test's size.
    """
    planted = mutant_label(test, mutant)
    if type(expect) == type([]):
        expect = "|||".join(expect)
    native.sh_test(
        name = name,
        size = size,
        srcs = ["mutant_test.sh"],
        args = [
            mutant,
            test,
            "$(rootpath %s)" % test,
            "$(rootpath %s)" % planted,
        ] + args,
        data = [
            test,
            planted,
        ],
        # The text goes in the environment: args are split like a shell's.
        env = dict(env, MUTANT_EXPECT = expect),
        tags = ["plain_only"],
    )

def kvs_py_mutant_test(name, mutant, expect, tests, size = "small"):
    """Passes when python/tests/node_test.py passes and fails saying `expect`
    against a copy of the package with `mutant` planted.

    The shipped package holds no switch for it: the bug is the patch
    python/<mutant>.patch (here), applied by py_mutant_test.sh to a copy
    made for this test.

    Args:
      name: the sh_test.
      mutant: the planted bug's name (python/<mutant>.patch).
      expect: text the run against the planted copy must print (the
        assertion the bug trips), or a list of texts, any of which will do.
      tests: the node_test.py cases to run (Class or Class.test_name).
      size: the sh_test's size.
    """
    if type(expect) == type([]):
        expect = "|||".join(expect)
    native.sh_test(
        name = name,
        size = size,
        srcs = ["py_mutant_test.sh"],
        args = [
            mutant,
            "$(rootpath python/%s.patch)" % mutant,
            "$(rootpath //:libkvshard.so.2)",
            "python/tests/node_test.py",
        ] + tests,
        data = [
            "python/%s.patch" % mutant,
            "//:libkvshard.so.2",
            "//python:package",
            "//python/tests:node_test_files",
        ],
        env = {"MUTANT_EXPECT": expect},
        tags = ["plain_only"],
    )
