"""Word count as ``app wordcount`` and ``bench wordcount`` both run it, and the check that counts independently.

**A word** is a maximal run of characters other than ASCII whitespace (space, tab, newline, carriage return,
vertical tab, form feed: the bytes 0x20 and 0x09-0x0D), case kept: what Python's ``bytes.split()`` returns
for the file's bytes.  Any Unicode character that is not one of those six is part of a word (``über``,
``東京``, a no-break space), and a word may be of any length; a line end (``\\n`` or ``\\r\\n``) ends a word.
UTF-8 never uses those bytes inside a multi-byte character, so splitting the bytes is splitting the text.

:func:`count_words` reads with :func:`mailrail.io.read_lines` (each line to one rank, large files split at
byte ranges), splits each batch with :func:`mailrail.io.split_words` (which splits by exactly this
definition, in one compiled pass: no Python loop per word or line) and adds the words to a
``CountingSet(rail, str)``.  :func:`counted_directly` is the check: a ``collections.Counter`` over every
file's raw bytes split by ``bytes.split()``, in one process, sharing no code with the count it checks.
"""

from __future__ import annotations

import bz2
import collections
import gzip
import lzma
import time
from dataclasses import dataclass
from typing import Any

#: How many words :func:`count_words` ranks by count.
TOP = 10


def words_of(lines: Any) -> Any:
    """The words of a ``pyarrow`` string array of lines, in order, as one string array (see the module doc)."""
    from mailrail.io import split_words

    return split_words(lines)


@dataclass
class Counted:
    """What :func:`count_words` found: the same on every rank but *lines_here* and *seconds*."""

    words: Any  #: a CountingSet(rail, str) of every word
    top_words: list[str]
    top_counts: list[int]
    distinct: int
    total: int
    lines: int
    files: list[str]
    #: This rank's seconds from the start to the top words, distinct and total (read, split, count, top).
    seconds: float


def count_words(rail: Any, paths: Any, *, top: int = TOP, batch_bytes: int | None = None) -> Counted:
    """Collective: count the words of the files *paths* names (files, directories, globs: as read_lines takes)."""
    from mailrail.containers import CountingSet
    from mailrail.io import read_lines

    start = time.perf_counter()
    words = CountingSet(rail, str)
    batches = read_lines(rail, paths, **({} if batch_bytes is None else {"batch_bytes": batch_bytes}))
    lines = 0
    for batch in batches:
        lines += len(batch)
        words.add(words_of(batch))
    top_words, top_counts = words.top(top)
    distinct, total = words.size(), words.total()
    seconds = time.perf_counter() - start
    return Counted(
        words,
        top_words.to_pylist(),
        [int(count) for count in top_counts],
        distinct,
        total,
        rail.comm.allreduce(lines),
        list(batches.files),
        seconds,
    )


# -- the independent check ----------------------------------------------------------------------------------

#: Python's own decompressors for the suffixes it has one for (the others are opened through pyarrow).
OPENERS: dict[str, Any] = {".gz": gzip.open, ".bz2": bz2.open, ".xz": lzma.open}


def raw_bytes(path: str) -> bytes:
    """The bytes of *path*, decompressed by its suffix."""
    for suffix, opener in OPENERS.items():
        if path.endswith(suffix):
            with opener(path, "rb") as compressed:
                return bytes(compressed.read())
    if path.endswith((".zst", ".lz4", ".br")):
        import pyarrow as pa

        with pa.input_stream(path, compression="detect") as stream:
            return bytes(stream.read())
    with open(path, "rb") as plain:
        return plain.read()


def counted_directly(files: list[str]) -> collections.Counter[str]:
    """Every word of *files* counted in this process: ``bytes.split()`` over each file's raw bytes, decoded."""
    counter: collections.Counter[bytes] = collections.Counter()
    for path in files:
        counter.update(raw_bytes(path).split())
    return collections.Counter({word.decode("utf-8"): count for word, count in counter.items()})


def agrees(counts: dict[str, int], expected: collections.Counter[str]) -> list[str]:
    """What differs between *counts* (every word and its count) and *expected*, in at most a few lines."""
    problems = []
    if sum(counts.values()) != sum(expected.values()):
        problems.append(f"total {sum(counts.values()):,}, expected {sum(expected.values()):,}")
    if len(counts) != len(expected):
        problems.append(f"distinct {len(counts):,}, expected {len(expected):,}")
    wrong = [word for word in expected if counts.get(word) != expected[word]]
    wrong += [word for word in counts if word not in expected]
    for word in wrong[:5]:
        problems.append(f"{word!r}: counted {counts.get(word, 0)}, expected {expected.get(word, 0)}")
    return problems
