"""Keyword options as kvplan's flags.

Names are kvplan's with underscores for dashes; values are checked for
their Python type here (a wrong type raises TypeError naming the option),
then handed to the library as "--name=value" strings, where kvplan's own
parsers read them: a value kvplan refuses (a string that is not a number
included, or a number past the flag's C type) raises kvshard.Error with
kvplan's words. A switch is a bool (True or False, never a string or an
int read as its truth) and a string holding a NUL character is refused
(ValueError), each naming the option.
"""

import difflib
import numbers

from ._lib import c_bool, c_text

# kind of each option: int, float, bytes (an int, or a string such as
# "9GiB"), tokens (an int, or a string such as "1M"), bytes_list, int_list,
# str, switch (True/False), flag (True only), stream (an int address or an
# object with .cuda_stream).
_MODEL = {
    "model": "str", "head_dim": "int", "index_head_dim": "int", "layers": "int",
    "ratios": "int_list", "swa_ratio": "float", "page": "int", "scratch": "int",
    "floor_pages": "int", "max_seq_len": "tokens", "max_running": "int", "radix": "switch",
    "kv_dtype": "str", "mtp": "int", "state_rings": "str",
}
_MACHINE = {
    "topology": "str", "tp": "int", "pp": "int", "nodes": "int", "allow_cross_node_tp": "flag",
    "budget": "bytes", "budget_per_gpu": "bytes_list", "memory_ratio": "float",
    "mem_fraction": "float", "reserve": "bytes", "weights": "bytes",
    "weights_per_gpu": "bytes_list",
}
NODE_OPTIONS = dict(_MODEL, **_MACHINE, **{
    "device": "str", "cuda_device": "int", "stream": "stream", "no_stream": "flag",
    "step_backend": "str",
    "cuda_graphs": "switch", "check_every": "int", "check_integrity": "switch",
    "digest_steps": "flag", "prefix_cache": "flag", "host_cache": "bytes", "disk_cache": "bytes", "disk_path": "str",
    "disk_model": "str", "max_batch": "int", "step_capacity": "int", "bind_numa": "switch",
    "carry_batch": "flag", "max_payload_bytes": "int", "explicit_release": "flag",
    "local_rank": "int", "host_index": "int", "host": "str",
})
# Options the package itself takes, not the library's flags.
NODE_PYTHON_OPTIONS = {"timeout_ms": "int"}


def _is_int(v):
    return isinstance(v, numbers.Integral) and not isinstance(v, bool)


def _text(kind, name, v, where):
    if kind == "int":
        if isinstance(v, str):
            return v  # as on kvplan's command line: its parser reads it, or refuses it
        if not _is_int(v):
            raise TypeError(
                f"{where}: option '{name}' takes an int (or its text), got {type(v).__name__}")
        return str(int(v))
    if kind == "float":
        if isinstance(v, str):
            return v
        if isinstance(v, bool) or not isinstance(v, numbers.Real):
            raise TypeError(
                f"{where}: option '{name}' takes a number (or its text), got {type(v).__name__}")
        return repr(float(v))
    if kind in ("bytes", "tokens"):
        if _is_int(v):
            return str(int(v))
        if isinstance(v, str):
            return v
        example = "'9GiB'" if kind == "bytes" else "'1M'"
        raise TypeError(
            f"{where}: option '{name}' takes {kind} as an int or a string such as {example}, "
            f"got {type(v).__name__}")
    if kind in ("bytes_list", "int_list"):
        if isinstance(v, (str, bytes)) or not hasattr(v, "__iter__"):
            raise TypeError(f"{where}: option '{name}' takes a list, got {type(v).__name__}")
        items = list(v)
        return ",".join(_text("bytes" if kind == "bytes_list" else "int", name, x, where)
                        for x in items)
    if kind == "str":
        if not isinstance(v, str):
            raise TypeError(f"{where}: option '{name}' takes a string, got {type(v).__name__}")
        return v
    if kind == "stream":
        address = getattr(v, "cuda_stream", v)
        if not _is_int(address):
            raise TypeError(
                f"{where}: option '{name}' takes a cudaStream_t address (an int) or a stream "
                f"with .cuda_stream, got {type(v).__name__}")
        return str(int(address))
    raise AssertionError(kind)


def to_flags(options, table, where, extra=None):
    """kwargs -> ["--name=value", ...] in the given order. Unknown names
    raise TypeError with the nearest known one."""
    flags = []
    known = dict(table, **(extra or {}))
    for name, v in options.items():
        if name in (extra or {}):
            continue
        kind = table.get(name)
        if kind is None:
            near = difflib.get_close_matches(name, list(known), n=1)
            hint = f"; did you mean '{near[0]}'?" if near else ""
            raise TypeError(f"{where} got an unknown option '{name}'{hint}")
        dashed = name.replace("_", "-")
        if v is None:
            raise TypeError(f"{where}: option '{name}' is None; leave it out for the default")
        if kind in ("switch", "flag"):
            if c_bool(v, f"{where}: option '{name}'"):
                flags.append(f"--{dashed}")
            elif kind == "switch":
                flags.append(f"--no-{dashed}")
            continue
        text = _text(kind, name, v, where)
        c_text(text, f"{where}: option '{name}'")  # C would end the value at a NUL
        flags.append(f"--{dashed}={text}")
    return flags


def library_names(help_text):
    """The flag names a library help text lists, as option names."""
    import re
    names = set()
    for line in help_text.splitlines():
        if not line.startswith("  --"):
            continue  # prose, not a flag's line
        head = re.split(r"\s{2,}", line.strip())[0]
        flags = re.findall(r"--([a-z][a-z0-9-]*)", head)
        for flag in flags:
            # "--x | --no-x" is one switch, x; a lone "--no-x" is a flag of its own.
            if flag.startswith("no-") and flag[3:] in flags:
                continue
            names.add(flag.replace("-", "_"))
    return names
