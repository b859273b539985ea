"""From CSV files to a Parquet dataset with mailrail.io: each rank reads its share of the rows, keeps those it
is asked to, and writes them as its part of one dataset, which rank 0 then reads back with pyarrow and pandas.

The CSV files have a header line ``customer,amount,day``; ``amount`` is read as a float wherever it looks
like an integer in the first rows.  Run:
``mailrail run -n 4 -- python examples/io_tables.py 'sales/*.csv' big-sales/ --min 100``
"""

import argparse

import pandas
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from mpi4py import MPI

from mailrail import MailRail
from mailrail.io import read_csv, write_parquet

parser = argparse.ArgumentParser()
parser.add_argument("csv", help="CSV files: a directory, a glob pattern or a file")
parser.add_argument("out", help="the Parquet dataset to write (a directory)")
parser.add_argument("--min", type=float, default=0.0, help="keep the rows whose amount is at least this")
args = parser.parse_args()

with MailRail(MPI.COMM_WORLD) as rail:
    batches = read_csv(rail, args.csv, column_types={"amount": pa.float64()})
    kept = (batch.filter(pc.greater_equal(batch["amount"], args.min)) for batch in batches)
    written = write_parquet(kept, args.out, rail=rail, overwrite=True)  # collective: every part is complete
    rows = rail.comm.allreduce(batches.rows)
    if rail.rank == 0:
        table = pq.read_table(args.out)  # the parts, as one table
        frame = pandas.read_parquet(args.out)
        assert table.num_rows == len(frame) == written.total_rows
        print(f"{rows} rows read, {written.total_rows} kept, in {len(written.parts)} parts")
        print(f"total amount kept: {frame['amount'].sum():.2f}")
