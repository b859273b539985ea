"""Decoded events parked in a temporary file, so a replay's timed loop does no text parsing.

Decoding JSON lines has a cost per record; replaying straight from the text
would charge that to the communication being measured.  The validation
pass therefore writes each decoded block as raw arrays to an anonymous
temporary file (bounded memory, whatever the trace size), and the replay reads
them back at disk-cache speed.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterable, Iterator

import numpy as np

from mailrail.trace.events import Event, MessageBlock, PhaseEnd

_HEADER = np.dtype([("count", "<i8"), ("stamped", "<i8")])  # count -1: a PhaseEnd
_PHASE_END = -1


class Spool:
    def __init__(self) -> None:
        self._file = tempfile.TemporaryFile(prefix="mailrail-replay-")

    def record(self, events: Iterable[Event]) -> Iterator[Event]:
        """Pass *events* through, keeping a copy of each."""
        write = self._file.write
        for event in events:
            if isinstance(event, MessageBlock):
                stamped = event.timestamps is not None
                write(np.array((len(event), stamped), _HEADER).tobytes())
                write(event.dests.astype("<i8").tobytes())
                write(event.sizes.astype("<i8").tobytes())
                if stamped:
                    write(event.timestamps.astype("<i8").tobytes())
            else:
                write(np.array((_PHASE_END, 0), _HEADER).tobytes())
            yield event

    def events(self) -> Iterator[Event]:
        """The recorded events again, in order."""
        stream = self._file
        stream.flush()
        stream.seek(0)
        while True:
            raw = stream.read(_HEADER.itemsize)
            if not raw:
                return
            header = np.frombuffer(raw, _HEADER)[0]
            count = int(header["count"])
            if count == _PHASE_END:
                yield PhaseEnd("spooled")
                continue
            arrays = np.frombuffer(stream.read(8 * count * (3 if header["stamped"] else 2)), "<i8")
            arrays = arrays.reshape(-1, count) if count else np.zeros((3, 0), np.int64)
            yield MessageBlock(arrays[0], arrays[1], arrays[2] if header["stamped"] else None)

    def close(self) -> None:
        self._file.close()
