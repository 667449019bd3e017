"""One shared library from the whole of a set of cc_library targets.

cc_binary(linkshared = True) links its deps lazily (gold's --start-lib), so
a symbol nothing in the link refers to is dropped, and a library's API is
exactly such symbols. This rule links every object of the deps' transitive
closure instead, with the system libraries they name as its own needs."""

def _dedup(items):
    seen = {}
    out = []
    for item in items:
        key = item if type(item) == "string" else item.path
        if key not in seen:
            seen[key] = True
            out.append(item)
    return out

def _kvs_shared_library_impl(ctx):
    toolchain = ctx.attr._cc_toolchain[cc_common.CcToolchainInfo]
    objects = []
    flags = []
    for dep in ctx.attr.deps:
        for linker_input in dep[CcInfo].linking_context.linker_inputs.to_list():
            flags.extend(linker_input.user_link_flags)
            for library in linker_input.libraries:
                objects.extend(library.pic_objects or library.objects or [])
    objects = _dedup(objects)
    flags = _dedup(flags)
    out = ctx.actions.declare_file(ctx.attr.name)
    args = ctx.actions.args()
    args.add("-shared")
    args.add("-B/usr/bin")
    args.add("-o", out)
    args.add("-Wl,-soname," + ctx.attr.name)
    args.add("-Wl,--no-undefined")
    inputs = list(objects)
    if ctx.file.version_script:
        args.add("-Wl,--version-script=" + ctx.file.version_script.path)
        inputs.append(ctx.file.version_script)
    args.add_all(objects)
    args.add_all(flags)
    # The kernels object is C++ (nvcc), and the C parts use libm.
    args.add_all(["-lstdc++", "-lm"])
    # --linkopt from the command line or a config (the sanitizers' runtimes).
    args.add_all(ctx.fragments.cpp.linkopts)
    ctx.actions.run(
        executable = toolchain.compiler_executable,
        arguments = [args],
        inputs = depset(inputs, transitive = [toolchain.all_files]),
        outputs = [out],
        use_default_shell_env = True,
        mnemonic = "KvsSharedLibrary",
        progress_message = "Linking %s from every object of its deps" % ctx.attr.name,
    )
    return [DefaultInfo(files = depset([out]), runfiles = ctx.runfiles(files = [out]))]

kvs_shared_library = rule(
    implementation = _kvs_shared_library_impl,
    fragments = ["cpp"],
    attrs = {
        "deps": attr.label_list(providers = [CcInfo]),
        "version_script": attr.label(allow_single_file = True),
        "_cc_toolchain": attr.label(default = "@bazel_tools//tools/cpp:current_cc_toolchain"),
    },
)
