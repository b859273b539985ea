"""Word count over text files with mailrail.io: read_lines spreads the lines over the ranks, a CountingSet counts.

Every rank calls read_lines with the same paths: a large file is read by every rank in byte ranges, small
files are grouped, compressed ones are read whole, and every line reaches one rank.  Each batch is a pyarrow
string array: Arrow's kernels split it into lower-case words at whitespace, added as they are to a
``CountingSet(rail, str)``: exact words of any length (``mailrail app wordcount`` is this program, verified).

Run: ``mailrail run -n 4 -- python examples/io_word_count.py docs/``
"""

import argparse

import pyarrow.compute as pc
from mpi4py import MPI

from mailrail import MailRail
from mailrail.containers import CountingSet
from mailrail.io import read_lines

parser = argparse.ArgumentParser()
parser.add_argument("paths", nargs="+", help="files, directories or glob patterns")
parser.add_argument("--top", type=int, default=5)
args = parser.parse_args()

with MailRail(MPI.COMM_WORLD) as rail:
    counts = CountingSet(rail, str)
    lines = 0
    for batch in read_lines(rail, args.paths):  # this rank's share, batch by batch
        words = pc.list_flatten(pc.utf8_split_whitespace(pc.utf8_lower(batch)))
        words = words.filter(pc.greater(pc.binary_length(words), 0))  # (a blank line splits into "")
        counts.add(words)  # a pyarrow string array: whole words, any length
        lines += len(batch)
    lines = rail.comm.allreduce(lines)
    words, times = counts.top(args.top)  # collective: the same answer on every rank (words: a pyarrow array)
    total = counts.total()
    if rail.rank == 0:
        print(f"{lines} lines, {total} words, on {rail.size} ranks")
        for word, count in zip(words.to_pylist(), times.tolist()):
            print(f"{count:8d}  {word}")
