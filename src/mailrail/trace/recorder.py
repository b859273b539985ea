"""Recording: with ``MAILRAIL_TRACE=DIR`` a MailRail application writes its own sends as a trace.

:class:`~mailrail.rail.MailRail` creates a :class:`TraceWriter` per rank and reports
every application ``send()`` (one ygm_async record: destination, payload bytes)
and every ``barrier()`` (barrier_begin/barrier_end records carrying the messages
submitted and released so far).  The result is YGM's binary format, one
``DIR/trace_<rank>.bin`` per rank, which ``mailrail replay DIR`` replays.
"""

from __future__ import annotations

import contextlib
import os

from .binary import BinaryTraceWriter

#: Trace files this process has started, and the next event id of each: a later MailRail in the
#: same process (a benchmark creating one per configuration) appends to its rank's file instead of
#: overwriting it, and its event ids continue the sequence.
_started: dict[str, int] = {}


class TraceWriter(BinaryTraceWriter):
    """One rank's recording; buffered, flushed at every barrier_end and on close."""

    @classmethod
    def for_rank(cls, directory: str, rank: int) -> TraceWriter:
        # The directory, or its parent, was checked by Config: make the one directory, never a chain
        # (another rank may have made it just now).
        with contextlib.suppress(FileExistsError):
            os.mkdir(directory)
        path = os.path.realpath(os.path.join(directory, f"trace_{rank}.bin"))
        writer = cls(path, append=path in _started)
        writer._next_id = _started.get(path, 1)
        _started[path] = writer._next_id
        return writer

    def close(self) -> None:
        super().close()
        _started[self.path] = self._next_id

    def barrier_end(self, send_count: int = 0, recv_count: int = 0) -> None:
        super().barrier_end(send_count, recv_count)
        # Barriers are rare next to messages: flushing here leaves whole phases on disk even
        # if the application dies before finalize().
        self.flush()
