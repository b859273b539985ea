"""A trace directory: one file per rank, ``trace_<rank>.bin`` or ``trace_<rank>.txt``, optionally ``.gz``."""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from dataclasses import dataclass

from ..errors import TraceFormatError
from .binary import read_binary
from .events import Event
from .jsonl import read_jsonl

TRACE_FILE = re.compile(r"trace_([0-9]+)\.(bin|txt)(\.gz)?")
FORMATS = {"bin": "binary", "txt": "json"}


@dataclass(frozen=True)
class TraceDir:
    """The validated rank files of one trace; :meth:`events` streams one rank's events."""

    path: str
    format: str  # "binary" or "json"
    files: tuple[str, ...]  # files[rank]

    @property
    def ranks(self) -> int:
        return len(self.files)

    @classmethod
    def open(cls, path: str) -> TraceDir:
        """Find the rank files in *path*; a missing rank, a duplicate or mixed formats raise."""
        path = os.fspath(path)
        if not os.path.isdir(path):
            raise TraceFormatError(
                f"{path}: not a trace directory (expected trace_<rank>.bin or trace_<rank>.txt files, optionally .gz)"
            )
        by_rank: dict[int, list[str]] = {}
        extensions = set()
        for name in sorted(os.listdir(path)):
            match = TRACE_FILE.fullmatch(name)
            if match:
                by_rank.setdefault(int(match.group(1)), []).append(name)
                extensions.add(match.group(2))
        if not by_rank:
            raise TraceFormatError(
                f"{path}: no trace files (expected trace_0.bin, trace_1.bin, ... or trace_0.txt, ...; optionally .gz)"
            )
        if len(extensions) > 1:
            raise TraceFormatError(
                f"{path}: mixes binary (.bin) and JSON-lines (.txt) rank files; a trace is one format"
            )
        for rank, names in by_rank.items():
            if len(names) > 1:
                raise TraceFormatError(f"{path}: rank {rank} has several files ({', '.join(names)}); keep one")
        ranks = max(by_rank) + 1
        missing = [rank for rank in range(ranks) if rank not in by_rank]
        if missing:
            shown = ", ".join(f"trace_{rank}" for rank in missing[:8]) + (" ..." if len(missing) > 8 else "")
            raise TraceFormatError(
                f"{path}: missing rank file(s) {shown}: the files go up to trace_{ranks - 1}, "
                f"so the trace has {ranks} ranks and needs one file for each"
            )
        files = tuple(os.path.join(path, by_rank[rank][0]) for rank in range(ranks))
        return cls(path, FORMATS[extensions.pop()], files)

    def require_ranks(self, job_ranks: int) -> None:
        """Raise unless a job of *job_ranks* ranks can replay this trace (one rank per file)."""
        if job_ranks != self.ranks:
            raise TraceFormatError(
                f"{self.path}: the trace has {self.ranks} rank(s) (trace_0 .. trace_{self.ranks - 1}) but the "
                f"job has {job_ranks}: replay it on {self.ranks} (mailrail run -n {self.ranks} replay {self.path})"
            )

    def events(self, rank: int, **reader_options) -> Iterator[Event]:
        """Stream rank *rank*'s messages and barriers (see :mod:`mailrail.trace.events`)."""
        read = read_binary if self.format == "binary" else read_jsonl
        return read(self.files[rank], rank, self.ranks, **reader_options)
