"""Word count over text files with a distributed CountingSet of strings: the top words of all the files.

``read_lines`` gives each rank its share of the lines (a large file is split among the ranks at byte ranges);
each rank splits them into lower-case words (runs of Unicode letters, digits, ``_`` and ``'``, of any length) and
adds them to one ``CountingSet(rail, str)``: exact words, whatever their length or script; repeated words are
combined before they leave the rank.
``top(k)`` is collective and the same on every rank.  ``--verify``: rank 0 counts every file again its own way
(a ``collections.Counter`` over the raw text, split character by character) and compares.

Run: ``mailrail run -n 4 -- python examples/word_count.py docs/*.md``
"""

import argparse
import collections
import re

from mpi4py import MPI

from mailrail import MailRail
from mailrail.containers import CountingSet
from mailrail.io import read_lines

WORD = re.compile(r"[\w']+")


def counted_directly(paths: list[str]) -> collections.Counter:
    """Every file's words counted in one process, without the regular expression: characters that are not part
    of a word become spaces, then split."""
    counter = collections.Counter()
    for path in paths:
        with open(path, encoding="utf-8", errors="replace") as file:
            text = file.read().lower()
        counter.update("".join(c if c.isalnum() or c in "_'" else " " for c in text).split())
    return counter


parser = argparse.ArgumentParser()
parser.add_argument("files", nargs="+")
parser.add_argument("--top", type=int, default=10)
parser.add_argument("--verify", action="store_true")
args = parser.parse_args()

with MailRail(MPI.COMM_WORLD) as rail:
    counts = CountingSet(rail, str)
    for lines in read_lines(rail, args.files):  # this rank's share of the lines: pyarrow string arrays
        counts.add(WORD.findall("\n".join(lines.to_pylist()).lower()))  # a list of str: any length
    words, times = counts.top(args.top)  # collective: every rank gets the same list (a pyarrow array of words)
    distinct, total = counts.size(), counts.total()
    if rail.rank == 0:
        print(f"{total} words, {distinct} distinct, in {len(args.files)} files on {rail.size} ranks")
        for word, count in zip(words.to_pylist(), times.tolist()):
            print(f"{count:8d}  {word}")
        if args.verify:
            direct = counted_directly(args.files)
            assert total == sum(direct.values()) and distinct == len(direct), (total, distinct)
            assert times.tolist() == [n for _, n in direct.most_common(args.top)], "top counts differ"
            assert all(direct[w] == n for w, n in zip(words.to_pylist(), times.tolist())), "a word's count differs"
            print("verified")
