"""What a rank sees of its node on a virtual cluster, and traffic within and between nodes.

Each rank reports its host name, the size of its COMM_TYPE_SHARED communicator
and MailRail's node count.  With ``--bytes N`` rank 0 sends N bytes to the
last rank (another node) and, when they share a node, rank 1 sends N bytes to
rank 0; receivers check the bytes.  Rank 0 prints ``RESULT <json>``.
"""

import argparse
import json
import socket

import numpy as np
from mpi4py import MPI

from mailrail.flow.node_memory import NodeTopology


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--bytes", type=int, default=0)
    args = parser.parse_args()
    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    shared = comm.Split_type(MPI.COMM_TYPE_SHARED, key=rank)
    topology = NodeTopology(comm, None)
    me = {
        "rank": rank,
        "host": socket.gethostname(),
        "shared_size": shared.Get_size(),
        "nodes": topology.nodes,
        "node": topology.node,
    }
    topology.free()
    same_node = comm.bcast(shared.Get_size() > 1 and size > 1, root=0)
    checked = 0
    if args.bytes:
        pattern = (np.arange(args.bytes, dtype=np.uint32) % 251).astype(np.uint8)
        pairs = [(0, size - 1)] + ([(1, 0)] if same_node else [])
        for source, dest in pairs:
            if rank == source:
                comm.Send(pattern, dest=dest, tag=7)
            elif rank == dest:
                buf = np.empty(args.bytes, np.uint8)
                comm.Recv(buf, source=source, tag=7)
                assert np.array_equal(buf, pattern)
                checked += 1
    everyone = comm.gather(dict(me, checked=checked), root=0)
    shared.Free()
    if rank == 0:
        print("RESULT " + json.dumps({"ranks": everyone, "intra_node_pair": same_node}), flush=True)


if __name__ == "__main__":
    main()
