"""kvshard for Python engines: plans as objects and the node over the C
library (libkvshard.so.2, through ctypes: no compiler at install time).

    import kvshard
    print(kvshard.plan(topology="bundled").num_pages)
    with kvshard.Node(budget="2GiB", device="cpu", topology="bundled") as node:
        ...

Every refusal raises kvshard.Error (.status is the kvs_status name); an
option of the wrong type or an unknown name raises TypeError naming it.
"""

from ._lib import Error
from ._torch import torch_comm
from .comm import Comm, loopback_comms, mpi_comm, nccl_comm, nccl_unique_id, self_comm
from .plan import Fit, Plan, fit, plan

__all__ = [
    "Comm", "Divergence", "Error", "Fit", "Node", "Plan", "PrefixCounts", "PrefixHit", "Rows",
    "StepRows", "Stepper", "TransferReport", "View",
    "fit",
    "library_version",
    "loopback_comms", "mpi_comm", "nccl_comm", "nccl_unique_id", "node_options", "plan",
    "self_comm", "torch_comm",
]

__version__ = "0.7.0"


def __getattr__(name):
    # The node needs numpy; planning does not, so an interpreter without
    # numpy still plans.
    if name in ("Divergence", "Node", "PrefixCounts", "PrefixHit", "Rows", "TransferReport",
                "View"):
        try:
            from . import node
        except ImportError as e:
            import sys
            raise ImportError(f"kvshard.{name} needs numpy, which {sys.executable} cannot "
                              f"import ({e}); Debian's /usr/bin/python3 has it with "
                              "python3-numpy") from e
        return getattr(node, name)
    if name in ("Stepper", "StepRows"):
        from . import stepper
        return getattr(stepper, name)
    raise AttributeError(f"module 'kvshard' has no attribute '{name}'")


def library_version():
    """The loaded library's version (kvs_version)."""
    from ._lib import lib
    return lib().kvs_version().decode()


def node_options():
    """The library's help for Node's options (kvplan's flags, then the
    node's own; Python takes them with underscores for dashes)."""
    from ._lib import lib
    return lib().kvs_node_flags_help().decode()
