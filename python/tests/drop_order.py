"""One drop order of a node, its communicator and views of its memory, in
a fresh process (node_test.py's Lifetimes starts one per order, with
glibc told to unmap or scribble what is freed, so that memory used after
it was freed faults or reads wrong instead of staying readable by luck).

    python3 drop_order.py COMM ORDER
      COMM   self | loopback (a kvshard.Comm the node borrows) | owned
             (comm=None: the node makes and owns its own)
      ORDER  the three drops, comma-separated: node, comm, view
             (owned: node and view only), or "arrays" for the arrays
             alone: the node closed and dropped, then its arrays read

Prints one line per event and "done" last; exits 0 only when every view
read the node's memory as it was, and the node and its Comm went with the
last of them. A crash is the parent's to see (a signal, not "done").
"""

import gc
import sys
import weakref

import numpy as np

import kvshard
from kvshard import _dlpack

SMALL = dict(topology="bundled", device="cpu", budget="2GiB", tp=1, pp=1, max_running=4,
             max_seq_len=65536, bind_numa=False)


def fail(message):
    print(f"FAIL: {message}", flush=True)
    sys.exit(1)


def main(kind, order):
    comm = {"self": kvshard.self_comm, "owned": lambda: None,
            "loopback": lambda: kvshard.loopback_comms(1)[0]}[kind]()
    node = kvshard.Node(comm, **SMALL)
    P = node.page
    locs = np.arange(3 * P, 5 * P, dtype=np.int64)
    node.admit(1)
    node.bind(1, locs)
    node.step()
    expected = node.translate(locs)
    if not (expected >= 0).all():
        fail("the bound pages have no window slots")
    tables = node.tables()
    # The mapping is the host table's own array (malloc'd); state_4 is a
    # tier of the carve (mmap'd, unmapped when the node goes).
    mapping = np.from_dlpack(tables["mapping"])
    state = np.from_dlpack(tables["state_4"])
    # A View object and a capsule never consumed (not in "arrays").
    held = [] if order == "arrays" else [tables["compressed_4"],
                                         tables["index_state"].__dlpack__()]
    print(f"holding {len(held)} more", flush=True)
    del tables
    handle = weakref.ref(node._node)
    comm_ref = weakref.ref(node._comm)
    if comm is not None:
        comm = [comm]  # one reference, dropped below
    print(f"made: {node!r}, {_dlpack.live_views()} capsules out", flush=True)

    def read_views():
        got = mapping[locs]
        if not np.array_equal(got, expected):
            fail(f"the mapping changed under its view: {got[:4]} where the node bound "
                 f"{expected[:4]}")
        total = float(state.sum())
        if total != 0.0:
            fail(f"the state tier reads {total} under its view; the node wrote nothing there")
        print("views read the node's memory", flush=True)

    steps = ["node", "view"] if order == "arrays" else order.split(",")
    for step in steps:
        if step == "node":
            node.close()
            del node
            gc.collect()
            print("node closed and dropped", flush=True)
        elif step == "comm":
            if comm is None:
                fail("an owned communicator has no drop of its own")
            try:
                comm[0].close()
                print("comm closed", flush=True)
            except kvshard.Error as e:
                print(f"comm close refused: {e.status}: {e}", flush=True)
            del comm[0]
            gc.collect()
            print("comm dropped", flush=True)
        elif step == "view":
            read_views()
            del mapping, state, held
            gc.collect()
            print("views dropped", flush=True)
        else:
            fail(f"unknown drop {step!r}")
    gc.collect()
    if handle() is not None:
        fail("the node outlived its last view and its close")
    if comm_ref() is not None:
        fail("the communicator outlived its node and views")
    if _dlpack.live_views() != 0:
        fail(f"{_dlpack.live_views()} capsules were never released")
    print("done", flush=True)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
