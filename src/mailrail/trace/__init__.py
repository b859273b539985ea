"""Communication traces: YGM's binary and JSON-lines formats, read as streams, written in binary.

- :class:`TraceDir` finds and validates a directory of rank files; ``TraceDir.events(rank)``
  streams that rank's :class:`MessageBlock` s and :class:`PhaseEnd` s.
- :func:`read_binary` / :func:`read_jsonl` read one file (plain or ``.gz``).
- :class:`BinaryTraceWriter` writes the binary format (recording, generation).
- :mod:`.recorder`: the recorder (:class:`~mailrail.trace.recorder.TraceWriter`), with which a
  MailRail application run with ``MAILRAIL_TRACE=DIR`` writes its own sends as a trace.

This is the library side of traces.  The commands that use them (``mailrail replay``,
``mailrail trace stats``, ``mailrail trace generate``) are tools, in :mod:`mailrail_tools.replay`.

Corrupt input raises :class:`~mailrail.errors.TraceFormatError` naming the file and the
byte offset or line.  Nothing here imports MPI.
"""

from ..errors import TraceFormatError
from .binary import BinaryTraceWriter, read_binary
from .directory import TraceDir
from .events import MessageBlock, PhaseEnd, iter_messages, load_phases
from .jsonl import read_jsonl
from .summary import RankSummary, summarize

__all__ = [
    "TraceDir",
    "MessageBlock",
    "PhaseEnd",
    "BinaryTraceWriter",
    "TraceFormatError",
    "RankSummary",
    "read_binary",
    "read_jsonl",
    "iter_messages",
    "load_phases",
    "summarize",
]
