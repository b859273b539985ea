"""mailrail.io's writers on a real MailRail: each rank writes tests/io_support.py's ``rank_table(rank)`` as its part
of a Parquet and a CSV dataset, then every rank reads both back with read_parquet and read_csv; rank 0 prints
what was written and the checksums read back (``RESULT``).  Arguments: the two directories."""

import argparse
import json
import os
import sys

from mpi4py import MPI

sys.path.append(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # tests/: io_support
from io_support import checksum, rank_table, row_text
from mailrail import MailRail
from mailrail.io import read_csv, read_parquet, write_csv, write_parquet


class Local:
    """A container's stand-in: its rail, and local() returning this rank's table."""

    def __init__(self, rail, table):
        self.rail = rail
        self.table = table

    def local(self):
        return self.table


parser = argparse.ArgumentParser()
parser.add_argument("parquet")
parser.add_argument("csv")
args = parser.parse_args()

with MailRail(MPI.COMM_WORLD) as rail:
    source = Local(rail, rank_table(rail.rank))
    written = {"parquet": write_parquet(source, args.parquet), "csv": write_csv(source, args.csv)}
    back = {}
    for name, reader in (("parquet", read_parquet), ("csv", read_csv)):
        rows = [row_text(row) for batch in reader(rail, getattr(args, name)) for row in batch.to_pylist()]
        back[name] = rail.comm.allgather(checksum(rows))
    rail.barrier()
    if rail.rank == 0:
        report = {name: {"parts": w.parts, "total_rows": w.total_rows} for name, w in written.items()}
        print("RESULT " + json.dumps({"written": report, "back": back}), flush=True)
