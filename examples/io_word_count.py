"""Word count over text files with mailrail.io: read_lines spreads the lines over the ranks, a CountingSet counts.

Every rank calls read_lines with the same paths: a large file is read by every rank in byte ranges, small
files are grouped, compressed ones are read whole, and every line reaches one rank.  Each batch is a pyarrow
string array: Arrow's kernels split it into lower-case words, cut to 16 bytes (the set's keys are ``S16``).

Run: ``mailrail run -n 4 -- python examples/io_word_count.py docs/``
"""

import argparse

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from mpi4py import MPI

from mailrail import MailRail
from mailrail.containers import CountingSet
from mailrail.io import read_lines

WORD = np.dtype("S16")

parser = argparse.ArgumentParser()
parser.add_argument("paths", nargs="+", help="files, directories or glob patterns")
parser.add_argument("--top", type=int, default=5)
args = parser.parse_args()

with MailRail(MPI.COMM_WORLD) as rail:
    counts = CountingSet(rail, WORD)
    lines = 0
    for batch in read_lines(rail, args.paths):  # this rank's share, batch by batch
        words = pc.list_flatten(pc.utf8_split_whitespace(pc.utf8_lower(batch)))
        words = words.filter(pc.greater(pc.binary_length(words), 0))  # (a blank line splits into "")
        counts.add(words.cast(pa.binary()).to_numpy(zero_copy_only=False).astype(WORD))
        lines += len(batch)
    lines = rail.comm.allreduce(lines)
    words, times = counts.top(args.top)  # collective: the same answer on every rank
    total = counts.total()
    if rail.rank == 0:
        print(f"{lines} lines, {total} words, on {rail.size} ranks")
        for word, count in zip(words.tolist(), times.tolist()):
            print(f"{count:8d}  {word.decode(errors='replace')}")
