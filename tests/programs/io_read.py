"""mailrail.io's readers on a real MailRail: each rank reads its share of the files, then rank 0 prints every rank's
count and order-free checksum of what it read (``RESULT``), for the test to compare with one process's read.

``--reader lines|csv|json|parquet``, ``--batch-bytes``, then the paths.  Lines are checksummed as they are; rows
as ``json.dumps(row, sort_keys=True, default=str)`` (tests/io_support.py's ``checksum`` and ``row_text``).
"""

import argparse
import json
import os
import sys

from mpi4py import MPI

sys.path.append(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # tests/: io_support
from io_support import checksum, row_text
from mailrail import MailRail
from mailrail.io import read_csv, read_json_lines, read_lines, read_parquet

READERS = {"lines": read_lines, "csv": read_csv, "json": read_json_lines, "parquet": read_parquet}

parser = argparse.ArgumentParser()
parser.add_argument("--reader", choices=sorted(READERS), required=True)
parser.add_argument("--batch-bytes", type=int, default=16 << 20)
parser.add_argument("paths", nargs="+")
args = parser.parse_args()

with MailRail(MPI.COMM_WORLD) as rail:
    batches = READERS[args.reader](rail, args.paths, batch_bytes=args.batch_bytes)
    values = []
    count = 0
    for batch in batches:
        count += 1
        assert batch.nbytes <= 2 * args.batch_bytes or len(batch) == 1, (batch.nbytes, len(batch))
        if args.reader == "lines":
            values += batch.to_pylist()
        else:
            assert batch.schema == batches.schema
            values += [row_text(row) for row in batch.to_pylist()]
    rows, total = checksum(values)
    mine = {
        "rows": rows,
        "checksum": total,
        "batches": count,
        "share": len(batches.share),
        "schema": str(batches.schema),
    }
    everyone = rail.comm.allgather(mine)
    rail.barrier()
    if rail.rank == 0:
        print("RESULT " + json.dumps({"ranks": everyone}), flush=True)
