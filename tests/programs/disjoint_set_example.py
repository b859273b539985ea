"""The example of docs/containers/disjoint-set.md, as written there, with its figures printed as ``RESULT {json}``."""

import json

import numpy as np
from mpi4py import MPI

from mailrail import MailRail
from mailrail.containers.disjoint_set import DisjointSet

with MailRail(MPI.COMM_WORLD) as rail:
    groups = DisjointSet(rail, np.int64)
    if rail.rank == 0:
        groups.union([1, 2], [2, 3])  # asynchronous: {1, 2, 3}
    if rail.rank == rail.size - 1:
        groups.union([5, 4, 6], [4, 5, 6])  # {4, 5}, and 6 alone: a set of its own
    roots = groups.find([3, 2, 1, 5, 4, 6, 9])  # collective: [1 1 1 4 4 6 9]; 9 was never named
    sets, items = groups.num_sets(), groups.size()  # collectives: 3 sets of 6 items
    if rail.rank == 0:
        print("RESULT " + json.dumps({"roots": roots.tolist(), "sets": sets, "items": items}), flush=True)
