"""Test-only mutant builds: each planted bug's library variants.

A planted bug sits in product code between `#ifdef KVS_MUTANT_<NAME>` and
`#else` (or under `#ifndef`), one or two lines, commented; only a build with
-DKVS_MUTANT_<NAME> has it. For each mutant NAME a library lists,
kvs_cc_library also defines the testonly variant `<library>_mutant_<name>`:
the same sources and flags with that define, and its listed deps replaced by
their own variants, so that a test binary built on the variants holds the
mutant and no second, correct copy of the code. tests/mutants runs such
binaries and passes only when they fail as the bug must make them fail.
"""

load("@rules_cc//cc:defs.bzl", "cc_library")

def mutant_define(mutant):
    """The preprocessor name that turns `mutant` on."""
    return "KVS_MUTANT_" + mutant.upper()

def mutant_label(label, mutant):
    """The variant of `label` (a library or test) built with `mutant`."""
    return label + "_mutant_" + mutant

def kvs_cc_library(name, mutants = {}, **kwargs):
    """A cc_library, plus one testonly variant per planted bug.

    Args:
      name: the library.
      mutants: {mutant name: [deps of this library to replace by their
        variants for that mutant]} (the deps that hold code the mutant's
        variant chain must not duplicate).
      **kwargs: everything cc_library takes.
    """
    cc_library(name = name, **kwargs)
    for mutant, swapped in mutants.items():
        variant = dict(kwargs)
        variant["deps"] = [
            mutant_label(d, mutant) if d in swapped else d
            for d in kwargs.get("deps", [])
        ]
        variant["local_defines"] = kwargs.get("local_defines", []) + [mutant_define(mutant)]
        variant["testonly"] = True
        # Tests, and the packages whose libraries chain variants of others'
        # (the CUDA backend's, kvplan's over //plan's).
        variant["visibility"] = [
            "//tests:__subpackages__",
            "//backends:__subpackages__",
            "//kvplan:__pkg__",
        ]
        variant["tags"] = kwargs.get("tags", []) + ["mutant"]
        cc_library(name = mutant_label(name, mutant), **variant)
