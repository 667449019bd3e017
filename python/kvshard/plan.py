"""kvplan's answers as objects: plan(**options) and fit(**options) take
kvplan's flags as keyword arguments and return what `kvplan plan --json`
and `kvplan fit --json` print for them, with attribute access."""

import ctypes
import json

from ._lib import CError, Error, check, lib
from ._options import to_flags, library_names


class _Record:
    """A JSON object with attribute access (lists of them too)."""

    def __init__(self, data):
        self._data = data

    def __getattr__(self, name):
        try:
            value = self.__dict__["_data"][name]
        except KeyError:
            raise AttributeError(name) from None
        return _wrap(value)

    def __getitem__(self, key):
        return _wrap(self._data[key])

    def __contains__(self, key):
        return key in self._data

    def keys(self):
        return self._data.keys()

    def to_dict(self):
        """A deep copy of the JSON object, key for key."""
        return json.loads(json.dumps(self._data))

    def __repr__(self):
        return f"<{type(self).__name__} {json.dumps(self._data)[:120]}...>"


def _wrap(value):
    if isinstance(value, dict):
        return _Record(value)
    if isinstance(value, list):
        return [_wrap(v) for v in value]
    return value


class Plan(_Record):
    """What `kvplan plan --json` prints: num_pages, ranks[...], ..."""


class Fit(_Record):
    """What `kvplan fit --json` prints: fits, layouts[...], ..."""


# Option kinds for plan() and fit(), by name (kvplan's flags with
# underscores). The test suite holds this table against the library's
# own flag list (kvs_plan_flags_help), so neither can drift.
_COMMON = {
    "model": "str", "head_dim": "int", "index_head_dim": "int", "layers": "int",
    "ratios": "int_list", "swa_ratio": "float", "window_cache": "float", "page": "int",
    "scratch": "int", "floor_pages": "int", "max_seq_len": "int", "max_running": "int",
    "radix": "switch", "kv_dtype": "str", "mtp": "int", "engine": "str", "state_rings": "str",
    "topology": "str", "nodes": "int", "allow_cross_node_tp": "flag",
    "memory_ratio": "float", "mem_fraction": "float", "weights": "bytes",
    "weights_per_gpu": "bytes_list", "weights_total": "bytes", "reserve": "bytes",
}
PLAN_OPTIONS = dict(_COMMON, tp="int", pp="int", budget="bytes", budget_per_gpu="bytes_list")
FIT_OPTIONS = dict(_COMMON, context="int", concurrency="int", budget="bytes",
                   budget_per_gpu="bytes_list", tp="int", pp="int", gpus="int", memory="bytes")
# kvplan's flags the objects stand in for: how kvplan prints, not what.
_PRINTING = {"json", "svg", "help"}


def _run(subcommand, options, table):
    where = f"kvshard.{subcommand}()"
    flags = [subcommand] + to_flags(options, table, where) + ["--json"]
    args = (ctypes.c_char_p * len(flags))(*[f.encode() for f in flags])
    out = ctypes.c_void_p()
    err = CError()
    status = lib().kvs_plan_json(args, len(flags), ctypes.byref(out), ctypes.byref(err))
    check(status, err)
    try:
        text = ctypes.string_at(out).decode()
    finally:
        lib().kvs_free(out)
    return json.loads(text)


def plan(**options):
    """kvplan plan: the per-rank plan of a node (bundled, a topology file,
    or this machine), as a Plan."""
    return Plan(_run("plan", options, PLAN_OPTIONS))


def fit(**options):
    """kvplan fit: which layouts hold `concurrency` requests of `context`
    tokens, and with how much memory, as a Fit."""
    return Fit(_run("fit", options, FIT_OPTIONS))


def library_flags(subcommand):
    """The option names the library's kvplan takes for a subcommand."""
    return library_names(lib().kvs_plan_flags_help(subcommand.encode()).decode()) - _PRINTING
