"""libFuzzer targets, built with Debian's clang outside Bazel's gcc toolchain.

kvs_fuzz_test compiles a harness together with every C source of the
libraries it names in `deps` (found by walking their `deps`, so a library
that gains a source or a dependency needs no change here; `exclude` drops
files such as a tool's main) in one clang invocation with
-fsanitize=fuzzer,address,undefined, links what those libraries link, and
wraps the binary in an sh_test (tests/fuzz/run_fuzzer.sh) that replays every
input under `corpus` (folders) and `corpus_files` (seed inputs and kept
regression inputs alike: each must pass), then fuzzes from them for
`seconds` (KVS_FUZZ_SECONDS overrides it for long runs) with `dict` as the
libFuzzer dictionary, if any.

Each harness reports, through tests/fuzz/fuzz_stats.h, how many inputs it
ran and how many got past parsing into the project's own code.
"""

_FuzzSources = provider(
    doc = "The C sources, headers, include paths and link flags of a library closure.",
    fields = ["srcs", "hdrs", "includes", "linkopts"],
)

def _fuzz_sources_impl(target, ctx):
    srcs = []
    for attr in ["srcs", "hdrs", "textual_hdrs"]:
        for t in getattr(ctx.rule.attr, attr, []):
            srcs.extend(t.files.to_list())
    hdrs = []
    includes = []
    if CcInfo in target:
        cc = target[CcInfo].compilation_context
        hdrs.append(cc.headers)
        includes.extend([cc.includes, cc.quote_includes, cc.system_includes])
    deps = [d[_FuzzSources] for d in getattr(ctx.rule.attr, "deps", []) if _FuzzSources in d]
    return [_FuzzSources(
        srcs = depset(srcs, transitive = [d.srcs for d in deps]),
        hdrs = depset(transitive = hdrs + [d.hdrs for d in deps]),
        includes = depset(transitive = includes + [d.includes for d in deps]),
        linkopts = depset(
            getattr(ctx.rule.attr, "linkopts", []),
            transitive = [d.linkopts for d in deps],
            order = "topological",
        ),
    )]

_fuzz_sources = aspect(
    implementation = _fuzz_sources_impl,
    attr_aspects = ["deps"],
)

def _kvs_fuzz_binary_impl(ctx):
    info = [d[_FuzzSources] for d in ctx.attr.deps]
    srcs = depset(ctx.files.srcs, transitive = [i.srcs for i in info])
    excluded = {f: True for f in ctx.attr.exclude}
    c_files = [f for f in srcs.to_list() if f.extension == "c" and f.short_path not in excluded]
    for f in ctx.attr.exclude:
        if f not in [s.short_path for s in srcs.to_list()]:
            fail("exclude names %s, which is not among the sources" % f)
    includes = depset(transitive = [i.includes for i in info]).to_list()
    linkopts = depset(transitive = [i.linkopts for i in info], order = "topological").to_list()
    out = ctx.actions.declare_file(ctx.label.name)
    args = [
        "-std=c11",
        "-O1",
        "-g",
        "-D_GNU_SOURCE",
        "-fsanitize=fuzzer,address,undefined",
        "-fno-sanitize-recover=all",
        "-I.",
        "-I" + ctx.bin_dir.path,
        "-I" + ctx.genfiles_dir.path,
    ] + ["-I" + i for i in includes] + ctx.attr.cflags + [f.path for f in c_files] + [
        "-o",
        out.path,
    ] + linkopts
    ctx.actions.run(
        executable = "/usr/bin/clang",
        arguments = args,
        inputs = depset(transitive = [srcs] + [i.hdrs for i in info]),
        outputs = [out],
        mnemonic = "FuzzBinary",
        progress_message = "Building the libFuzzer binary %s" % ctx.label,
        use_default_shell_env = True,
    )
    return [DefaultInfo(files = depset([out]), executable = out)]

kvs_fuzz_binary = rule(
    implementation = _kvs_fuzz_binary_impl,
    attrs = {
        "srcs": attr.label_list(allow_files = True, doc = "The harness and its own headers."),
        "deps": attr.label_list(aspects = [_fuzz_sources], doc = "Libraries (or a cc_binary)."),
        "exclude": attr.string_list(doc = "Sources to leave out, by path (a tool's main)."),
        "cflags": attr.string_list(),
    },
    executable = True,
)

def kvs_fuzz_test(
        name,
        harness,
        deps,
        exclude = [],
        cflags = [],
        corpus = [],
        corpus_files = [],
        dict = None,
        flags = [],
        seconds = 5,
        size = "small"):
    binary = name + "_bin"
    kvs_fuzz_binary(
        name = binary,
        testonly = True,
        srcs = [harness, "//tests/fuzz:fuzz_stats.h"],
        deps = deps,
        exclude = exclude,
        cflags = cflags,
    )
    native.sh_test(
        name = name,
        size = size,
        srcs = ["//tests/fuzz:run_fuzzer.sh"],
        args = [
            "$(location :%s)" % binary,
            str(seconds),
            "'%s'" % " ".join(flags),
            "$(location %s)" % dict if dict else "-",
        ] + ["%s/%s" % (native.package_name(), d) for d in corpus] +
               ["$(locations %s)" % f for f in corpus_files],
        data = [":" + binary] + native.glob(["%s/*" % d for d in corpus]) + corpus_files +
               ([dict] if dict else []),
    )
