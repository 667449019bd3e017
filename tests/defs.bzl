"""The one GoogleTest rule every test package uses."""

load("//:copts.bzl", "KVS_TEST_COPTS")

def kvs_cc_test(name, srcs = None, size = "small", copts = [], deps = [], linkstatic = True, **kwargs):
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
      **kwargs: anything else cc_test takes (data, args, linkstatic, ...).
    """
    gtest = "//third_party:gtest_main"
    native.cc_test(
        name = name,
        size = size,
        srcs = srcs if srcs != None else [name + ".cc"],
        copts = KVS_TEST_COPTS + copts,
        deps = deps + ([] if gtest in deps or "//third_party:gtest" in deps else [gtest]),
        linkstatic = linkstatic,
        **kwargs
    )
