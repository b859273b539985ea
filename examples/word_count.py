"""Word count over text files with a distributed CountingSet: the top words of all the files.

Each rank reads its share of the files (every size-th file, from its rank on), splits them into
lower-case words, and adds them as fixed-width bytes (``S16``: a longer word is cut to its first 16
bytes) to one ``CountingSet``; repeated words are combined before they leave the rank.  ``top(k)`` is
collective and the same on every rank.  ``--verify``: rank 0 counts every file itself and compares.

Run: ``mailrail run -n 4 -- python examples/word_count.py docs/*.md``
"""

import argparse
import collections
import re

import numpy as np
from mpi4py import MPI

from mailrail import MailRail
from mailrail.containers import CountingSet

WORD = np.dtype("S16")
WORD_PATTERN = re.compile(rb"[a-z0-9']+")


def words_of(path: str) -> np.ndarray:
    """The file's words, lower-cased, as fixed-width bytes (numpy converts the whole list at once)."""
    with open(path, "rb") as file:
        return np.array(WORD_PATTERN.findall(file.read().lower()), dtype=WORD)


parser = argparse.ArgumentParser()
parser.add_argument("files", nargs="+")
parser.add_argument("--top", type=int, default=10)
parser.add_argument("--verify", action="store_true")
args = parser.parse_args()

with MailRail(MPI.COMM_WORLD) as rail:
    counts = CountingSet(rail, WORD)
    for path in args.files[rail.rank :: rail.size]:
        counts.add(words_of(path))
    words, times = counts.top(args.top)  # collective: every rank gets the same list
    distinct, total = counts.size(), counts.total()
    if rail.rank == 0:
        print(f"{total} words, {distinct} distinct, in {len(args.files)} files on {rail.size} ranks")
        for word, count in zip(words.tolist(), times.tolist()):
            print(f"{count:8d}  {word.decode()}")
        if args.verify:
            direct = collections.Counter(w for path in args.files for w in words_of(path).tolist())
            assert total == sum(direct.values()) and distinct == len(direct), (total, distinct)
            assert times.tolist() == [n for _, n in direct.most_common(args.top)], "top counts differ"
            assert all(direct[w] == n for w, n in zip(words.tolist(), times.tolist()))
            print("verified")
