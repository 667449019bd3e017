"""kvshard's communicator over a torch.distributed ProcessGroup: the C
library's "callbacks" backend (kvshard.h's kvs_comm_callbacks) with each
collective done by torch.

Host bytes travel as tensors over the C buffers: a uint8 tensor for a
broadcast, int64 tensors for an unsigned 64-bit allreduce. torch has no
uint64 reduction, so MIN and MAX reduce each word xor 2**63 (which orders
as int64 exactly as the word does as uint64) and SUM reduces the 32-bit
halves (exact for any group below 2**31 ranks) and joins them modulo 2**64,
never relying on int64 overflow. A gloo (or other CPU) group reduces the C
buffers in place; an NCCL group stages them through a CUDA tensor on the
device that was current at torch_comm().

Point to point (kvshard's exchange) is torch.distributed.batch_isend_irecv
over uint8 tensors on the C memory, every request then waited for; sends
and receives of a rank to itself are matched by it in batch order and
copied (gloo crashes on a send to itself in torch 1.13), so they need their
counterparts in the same batch. An NCCL group's transfers are staged
through tensors on that device, as its collectives are.

A callback runs on the thread that made the kvshard call (which released
the GIL; the callback takes it back). Whatever it raises (BaseException
included: an exception that escaped into ctypes would read as success)
becomes the collective's failure with the exception's type and text,
KVS_ERR_TIMEOUT when torch said it timed out, else KVS_ERR_COMM, and
poisons the communicator; the engine sees kvshard.Error.
"""

import ctypes
import re

from ._lib import (ALLREDUCE_CALLBACK, BARRIER_CALLBACK, BROADCAST_CALLBACK, COMM_REDUCE_MAX,
                   COMM_REDUCE_MIN, COMM_REDUCE_SUM, DESTROY_CALLBACK, ERROR_MESSAGE_MAX,
                   EXCHANGE_CALLBACK, STATUS_COMM, STATUS_TIMEOUT, CommCallbacks, Error, c_int,
                   call)
from .comm import Comm

_TOP = 1 << 63
_TIMED_OUT = re.compile(r"timed?\s*out|deadline", re.IGNORECASE)


def _import_torch():
    try:
        import torch
        import torch.distributed as dist
    except ImportError as e:
        import sys
        raise ImportError(f"kvshard.torch_comm needs torch, which {sys.executable} cannot import "
                          f"({e})") from e
    if not dist.is_available():
        raise ImportError("kvshard.torch_comm needs torch.distributed, which this torch build "
                          "lacks")
    return torch, dist


class TorchGroup:
    """The callbacks' state: the group, where its tensors live, and the
    ctypes objects the C communicator calls. The Comm keeps it (keep=)
    until the C communicator is destroyed, so no callback outlives it."""

    def __init__(self, torch, dist, group):
        import numpy
        self.torch, self.dist, self.np = torch, dist, numpy
        self.group = group
        self.backend = str(dist.get_backend(group))
        # NCCL moves device memory only: stage through the current device.
        self.device = (torch.device("cuda", torch.cuda.current_device())
                       if self.backend == "nccl" else None)
        self.callbacks = CommCallbacks(
            size=ctypes.sizeof(CommCallbacks), user=None,
            broadcast=BROADCAST_CALLBACK(self._broadcast),
            allreduce_u64=ALLREDUCE_CALLBACK(self._allreduce),
            barrier=BARRIER_CALLBACK(self._barrier),
            destroy=DESTROY_CALLBACK(),  # NULL: Python's keep ends with the Comm
            exchange=EXCHANGE_CALLBACK(self._exchange))

    # ---- the collectives over C memory ----

    def global_rank(self, group_rank):
        """torch's src is a global rank; kvshard's root a group rank."""
        if self.group is None or self.group is self.dist.group.WORLD:
            return group_rank
        fn = getattr(self.dist, "get_global_rank", None)
        if fn is None:  # torch < 2.0
            fn = self.dist.distributed_c10d._get_global_rank
        return fn(self.group, group_rank)

    def on_group(self, tensor, collective):
        """collective(t) on a CPU tensor's bytes, through the device for
        NCCL; the tensor holds the result after."""
        staged = tensor if self.device is None else tensor.to(self.device)
        collective(staged)
        if staged is not tensor:
            tensor.copy_(staged.cpu())  # the copy waits for the collective

    def all_reduce(self, tensor, op):
        self.on_group(tensor, lambda t: self.dist.all_reduce(t, op=op, group=self.group))

    def broadcast(self, address, n, root):
        buf = (ctypes.c_uint8 * n).from_address(address)
        src = self.global_rank(root)
        self.on_group(self.torch.frombuffer(buf, dtype=self.torch.uint8),
                      lambda t: self.dist.broadcast(t, src=src, group=self.group))

    def allreduce_u64(self, address, count, op):
        np, torch, ReduceOp = self.np, self.torch, self.dist.ReduceOp
        words = np.ctypeslib.as_array((ctypes.c_uint64 * count).from_address(address))
        if op == COMM_REDUCE_SUM:
            halves = np.concatenate([words & np.uint64(0xFFFFFFFF), words >> np.uint64(32)])
            t = torch.from_numpy(halves.astype(np.int64))
            self.all_reduce(t, ReduceOp.SUM)
            sums = t.numpy().astype(np.uint64)
            words[:] = sums[:count] + (sums[count:] << np.uint64(32))  # wraps mod 2**64
        elif op in (COMM_REDUCE_MIN, COMM_REDUCE_MAX):
            ordered = (words ^ np.uint64(_TOP)).view(np.int64).copy()
            t = torch.from_numpy(ordered)
            self.all_reduce(t, ReduceOp.MIN if op == COMM_REDUCE_MIN else ReduceOp.MAX)
            words[:] = ordered.view(np.uint64) ^ np.uint64(_TOP)
        else:  # the C wrapper checked it; a guard, not a path
            raise ValueError(f"allreduce op {op} is none of min (0), max (1), sum (2)")

    def exchange(self, transfers, n):
        """kvshard's batch of n transfers (C kvs_comm_transfer structs, each
        of at least one byte, on host memory: this is a host backend) as
        one batch_isend_irecv, every request waited for; an NCCL group's
        go through tensors on the current device, received ones copied
        back. This rank's sends to itself land in its receives from itself,
        k-th in k-th, by a copy: torch's gloo cannot send to its own rank."""
        torch, dist = self.torch, self.dist
        rank = dist.get_rank(self.group)
        own_sends, own_receives, ops, back = [], [], [], []
        for i in range(n):
            t = transfers[i]
            if t.peer == rank:
                (own_sends if t.send else own_receives).append(t)
                continue
            host = torch.frombuffer((ctypes.c_uint8 * t.bytes).from_address(t.data),
                                    dtype=torch.uint8)
            tensor = host
            if self.device is not None:  # NCCL moves device memory only
                tensor = host.to(self.device) if t.send else torch.empty(
                    t.bytes, dtype=torch.uint8, device=self.device)
                if not t.send:
                    back.append((host, tensor))
            op = dist.isend if t.send else dist.irecv
            ops.append(dist.P2POp(op, tensor, self.global_rank(t.peer), self.group))
        if len(own_sends) != len(own_receives):
            raise ValueError(f"rank {rank}'s batch has {len(own_sends)} sends to itself and "
                             f"{len(own_receives)} receives from itself: torch_comm matches "
                             "them within one batch")
        for k, (send, receive) in enumerate(zip(own_sends, own_receives)):
            if send.bytes != receive.bytes:
                raise ValueError(f"rank {rank}'s send {k} to itself is {send.bytes} bytes, its "
                                 f"receive {receive.bytes}: matched transfers must be the same "
                                 "size")
        if ops:
            for request in dist.batch_isend_irecv(ops):
                request.wait()
        for host, tensor in back:
            host.copy_(tensor.cpu())  # the copy waits for the receive
        for send, receive in zip(own_sends, own_receives):
            ctypes.memmove(receive.data, send.data, send.bytes)

    def barrier(self):
        # One word reduced on the group's device: a barrier that needs no
        # guess of the NCCL device (torch's barrier guesses it by rank).
        self.all_reduce(self.torch.zeros(1, dtype=self.torch.int64), self.dist.ReduceOp.SUM)

    # ---- the C callbacks: nothing escapes ----

    def _run(self, what, err, fn, *args):
        try:
            fn(*args)
            return 0
        except BaseException as e:  # noqa: B902 -- see the module's note
            text = f"torch.distributed {what} ({self.backend}) raised {type(e).__name__}: {e}"
            if err:
                err.contents.message = text.encode(errors="replace")[:ERROR_MESSAGE_MAX - 1]
            timed_out = isinstance(e, TimeoutError) or _TIMED_OUT.search(str(e))
            return STATUS_TIMEOUT if timed_out else STATUS_COMM

    def _broadcast(self, user, address, n, root, timeout_ms, err):
        return self._run("broadcast", err, self.broadcast, address, n, root)

    def _allreduce(self, user, address, count, op, timeout_ms, err):
        return self._run("all_reduce", err, self.allreduce_u64, address, count, op)

    def _barrier(self, user, timeout_ms, err):
        return self._run("barrier", err, self.barrier)

    def _exchange(self, user, transfers, n, timeout_ms, err):
        return self._run("batch_isend_irecv", err, self.exchange, transfers, n)


def torch_comm(group=None, timeout_ms=30000):
    """kvshard's communicator over a torch.distributed ProcessGroup (None:
    the default group), this process's rank of it: gloo (CPU tensors over
    kvshard's host buffers) or NCCL (staged through the current CUDA
    device). torch.distributed must be initialised. timeout_ms is handed to
    every collective as its deadline, but a wait inside torch is bounded by
    the group's own timeout (init_process_group(timeout=...)), which
    kvshard cannot shorten. The Comm holds the group and its callbacks
    until its C communicator goes (Comm's rules)."""
    timeout_ms = c_int(timeout_ms, "timeout_ms", "int")
    torch, dist = _import_torch()
    if group is getattr(dist.GroupMember, "NON_GROUP_MEMBER", ()):
        raise Error("KVS_ERR_INVALID_ARGUMENT",
                    "torch_comm(): this process is not a member of the group (new_group gave "
                    "it GroupMember.NON_GROUP_MEMBER)")
    if group is not None and not isinstance(group, dist.ProcessGroup):
        raise TypeError(f"group must be None or a torch.distributed.ProcessGroup, got "
                        f"{type(group).__name__}")
    if not dist.is_initialized():
        raise Error("KVS_ERR_INVALID_ARGUMENT",
                    "torch_comm(): torch.distributed is not initialised: call "
                    "torch.distributed.init_process_group first")
    state = TorchGroup(torch, dist, group)
    rank, size = dist.get_rank(group), dist.get_world_size(group)
    out = ctypes.c_void_p()
    call("kvs_comm_callbacks_create", ctypes.byref(state.callbacks), rank, size, timeout_ms,
         ctypes.byref(out))
    return Comm(out, keep=state)
