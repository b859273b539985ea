"""The example of docs/containers/array.md, as written there, with its figures printed as ``RESULT {json}``."""

import json

import numpy as np
from mpi4py import MPI

from mailrail import MailRail
from mailrail.containers.array import Array

with MailRail(MPI.COMM_WORLD) as rail:
    features = Array(rail, 1000, np.dtype((np.float32, 4)))  # four float32 per element: values are (n, 4)
    start, block = features.local_view()  # this rank's block: a writable view, (count, 4)
    block[:] = np.arange(start, start + len(block))[:, None]  # each rank fills its own, no messages
    degree = Array(rail, 1000, np.int64)  # zero-initialized
    edges = np.random.default_rng(rail.rank).integers(0, 1000, (5000, 2))
    degree.reduce(edges.ravel(), 1, "add")  # asynchronous: each index's repeats combined here first
    if rail.rank == 0:
        features.set([0, 1], np.full((2, 4), -1, np.float32))  # asynchronous
    near = features.gather(edges[:8, 1])  # collective: (8, 4) float32, after every update above
    counts = degree.gather(np.arange(1000))  # collective: int64, every rank's reduce applied
    if rail.rank == 0:
        print(
            "RESULT "
            + json.dumps(
                {
                    "near": near.tolist(),
                    "wanted": edges[:8, 1].tolist(),
                    "total_degree": int(counts.sum()),
                    "owners": degree.owner([0, 999]).tolist(),
                }
            ),
            flush=True,
        )
