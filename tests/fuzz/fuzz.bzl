"""libFuzzer targets, built with Debian's clang outside Bazel's gcc toolchain.

kvs_fuzz_test(name, srcs, data_srcs, libs, seconds) compiles the harness
and the library sources it needs in one clang invocation
(-fsanitize=fuzzer,address,undefined) and wraps the binary in an sh_test
that fuzzes for a bounded time (KVS_FUZZ_SECONDS overrides it) after
replaying every regression input under the target's corpus folder.
"""

def kvs_fuzz_test(name, harness, srcs, hdrs = [], libs = [], seconds = 5, corpus = None, size = "small"):
    binary = name + "_bin"
    native.genrule(
        name = binary,
        srcs = [harness] + srcs + hdrs,
        outs = [name + "_fuzzer"],
        cmd = " ".join([
            "/usr/bin/clang -std=c11 -O1 -g -D_GNU_SOURCE",
            "-fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined",
            "-I. -I$(GENDIR)",
            "$(location %s)" % harness,
        ] + ["$(locations %s)" % s for s in srcs] + [
            "-o $@",
        ] + ["-l" + lib for lib in libs]),
        testonly = True,
    )
    corpus_files = native.glob([(corpus or name) + "/*"])
    native.sh_test(
        name = name,
        size = size,
        srcs = ["//tests/fuzz:run_fuzzer.sh"],
        args = [
            "$(location :%s)" % binary,
            str(seconds),
            native.package_name() + "/" + (corpus or name),
        ],
        data = [":" + binary] + corpus_files,
    )
