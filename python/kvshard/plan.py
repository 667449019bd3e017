"""kvplan's answers as objects: plan(**options) and fit(**options) take
kvplan's flags as keyword arguments and return what `kvplan plan --json`
and `kvplan fit --json` print for them, with attribute access."""

import ctypes
import json

from ._lib import CError, Error, c_strings, check, lib
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
# underscores). The test suite holds these tables against kvplan's own
# --help, so neither can drift.
_MODEL = {
    "model": "str", "head_dim": "int", "index_head_dim": "int", "layers": "int",
    "ratios": "int_list", "swa_ratio": "float", "window_cache": "float", "page": "int",
    "scratch": "int", "floor_pages": "int", "max_seq_len": "tokens", "max_running": "int",
    "radix": "switch", "kv_dtype": "str", "mtp": "int", "engine": "str", "state_rings": "str",
}
_MEMORY = {
    "topology": "str", "nodes": "int", "mem_fraction": "float", "memory_ratio": "float",
    "reserve": "bytes", "gpu_memory": "bytes", "free_before_load": "bytes",
    "weights_total": "bytes", "expert_weights": "bytes", "shared_weights": "bytes",
}
PLAN_OPTIONS = dict(_MODEL, **_MEMORY, **{
    "allow_cross_node_tp": "flag", "tp": "int", "pp": "int", "dp": "int", "ep": "int",
    "budget": "bytes", "budget_per_gpu": "bytes_list", "weights": "bytes",
    "weights_per_gpu": "bytes_list", "launch": "flag", "prefix_cache": "flag",
    "host_cache": "bytes",
    "disk_cache": "bytes",
})
FIT_OPTIONS = dict(_MODEL, **_MEMORY, **{
    "context": "tokens", "concurrency": "int", "max_concurrency": "flag",
    "progress_s": "float",
})
# kvplan's flags the objects stand in for: how kvplan prints, not what.
PRINTING = {"json", "svg", "help"}
# Names kvplan's help gives in prose rather than as a flag's line.
ALIASES = {"memory_ratio"}


def _run(words):
    """kvs_plan_run: (standard output, standard error) of kvplan."""
    args = c_strings(words, "kvplan's words")
    out = ctypes.c_void_p()
    notes = ctypes.c_void_p()
    err = CError()
    status = lib().kvs_plan_run(args, len(words), ctypes.byref(out), ctypes.byref(notes),
                                ctypes.byref(err))
    try:
        text = ctypes.string_at(out).decode() if out.value else ""
        said = ctypes.string_at(notes).decode() if notes.value else ""
    finally:
        lib().kvs_free(out)
        lib().kvs_free(notes)
    try:
        check(status, err)
    except Error as e:
        # What kvplan printed with its refusal (a JSON error object with
        # --json: the bytes available and needed, the rank, ...).
        try:
            e.details = json.loads(text) if text.strip() else None
        except ValueError:
            e.details = None
        raise
    return text, said


def _answer(subcommand, options, table):
    where = f"kvshard.{subcommand}()"
    if "progress_s" not in options and subcommand == "fit":
        options = dict(options, progress_s=0)  # no progress lines: nobody reads them
    flags = to_flags(options, table, where)
    out, _ = _run([subcommand] + flags + ["--json"])
    return json.loads(out)


def plan(**options):
    """kvplan plan: the per-rank plan of a node (bundled, a topology file,
    or this machine), as a Plan equal to `kvplan plan --json`."""
    return Plan(_answer("plan", options, PLAN_OPTIONS))


def fit(**options):
    """kvplan fit: which layouts hold `concurrency` requests of `context`
    tokens, and with how much memory, as a Fit equal to `kvplan fit
    --json` (fits is False when no layout does)."""
    return Fit(_answer("fit", options, FIT_OPTIONS))


def kvplan_help(subcommand):
    """kvplan's usage for a subcommand, as `kvplan <subcommand> --help`."""
    return _run([subcommand, "--help"])[0]


def library_flags(subcommand):
    """The option names kvplan's help lists for a subcommand."""
    return library_names(kvplan_help(subcommand)) - PRINTING
