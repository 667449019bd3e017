"""libFuzzer targets, built with Debian's clang outside Bazel's gcc toolchain.

kvs_fuzz_test compiles a harness and the library sources it needs (the .c
files among `srcs`; headers ride along; `cflags` adds include and library
paths) in one clang invocation with
-fsanitize=fuzzer,address,undefined, and wraps the binary in an sh_test
(tests/fuzz/run_fuzzer.sh) that replays every input under `corpus` (seed
inputs and kept regression inputs alike: each must pass), then fuzzes from
them for `seconds` (KVS_FUZZ_SECONDS overrides it for long runs).
"""

def kvs_fuzz_test(
        name,
        harness,
        srcs,
        libs = [],
        cflags = [],
        corpus = [],
        flags = [],
        seconds = 5,
        size = "small"):
    binary = name + "_bin"
    native.genrule(
        name = binary,
        testonly = True,
        srcs = [harness] + srcs,
        outs = [name + "_fuzzer"],
        cmd = " ".join([
            "/usr/bin/clang -std=c11 -O1 -g -D_GNU_SOURCE",
            "-fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all",
            "-I. -I$(GENDIR)",
        ] + cflags + [
            "$$(for f in $(SRCS); do case $$f in *.c) echo $$f;; esac; done)",
            "-o $@",
        ] + ["-l" + lib for lib in libs]),
    )
    native.sh_test(
        name = name,
        size = size,
        srcs = ["//tests/fuzz:run_fuzzer.sh"],
        args = [
            "$(location :%s)" % binary,
            str(seconds),
            "'%s'" % " ".join(flags),
        ] + ["%s/%s" % (native.package_name(), d) for d in corpus],
        data = [":" + binary] + native.glob(["%s/*" % d for d in corpus]),
    )
