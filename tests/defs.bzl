"""The one GoogleTest rule every test package uses."""

load("//:copts.bzl", "KVS_TEST_COPTS")
load("//:mutants.bzl", "mutant_define", "mutant_label")

def kvs_cc_test(name, srcs = None, size = "small", copts = [], deps = [], linkstatic = True, mutants = {}, **kwargs):
    """A GoogleTest binary with the project's test flags and gtest's main.

    Args:
      name: the test's name; its source defaults to NAME.cc.
      srcs: the sources, when not just NAME.cc.
      size: Bazel's test size (small unless given).
      copts: flags beyond KVS_TEST_COPTS.
      deps: what it tests; gtest_main is added.
      linkstatic: linked into one binary (the default): the library's
        objects hide every symbol kvshard.h does not export, so the
        per-library shared objects of a dynamic test link could not see
        each other's internal functions.
      mutants: {mutant name: [deps to replace by their variants built with
        that planted bug]} (mutants.bzl): for each, a testonly binary
        NAME_mutant_<name> of the same sources with -DKVS_MUTANT_<NAME> (for
        code the test compiles itself, such as the kernel source) over those
        variants. It is not a test: tests/mutants runs it and expects it to
        fail.
      **kwargs: anything else cc_test takes (data, args, linkstatic, ...).
    """
    gtest = "//third_party:gtest_main"
    if mutants and "visibility" not in kwargs:
        # tests/mutants runs the unmutated test beside its mutant builds.
        kwargs["visibility"] = ["//tests:__subpackages__"]
    all_srcs = srcs if srcs != None else [name + ".cc"]
    all_deps = deps + ([] if gtest in deps or "//third_party:gtest" in deps else [gtest])
    native.cc_test(
        name = name,
        size = size,
        srcs = all_srcs,
        copts = KVS_TEST_COPTS + copts,
        deps = all_deps,
        linkstatic = linkstatic,
        **kwargs
    )
    for mutant, swapped in mutants.items():
        native.cc_binary(
            name = mutant_label(name, mutant),
            testonly = True,
            srcs = all_srcs,
            copts = KVS_TEST_COPTS + copts,
            local_defines = [mutant_define(mutant)],
            deps = [mutant_label(d, mutant) if d in swapped else d for d in all_deps],
            linkstatic = linkstatic,
            data = kwargs.get("data", []),
            tags = ["mutant"],
            visibility = ["//tests/mutants:__pkg__"],
        )
