"""One streaming pass over a rank's trace: messages and bytes per (phase, destination).

Replay uses it to validate a rank's file before any message flies and to know
what every receiver must get; ``trace stats`` adds the ranks up.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from ..errors import TraceFormatError
from .events import Event, MessageBlock


@dataclass
class RankSummary:
    """``bytes[p, d]`` / ``messages[p, d]``: what this rank sends to rank *d* in segment *p*.

    There are ``barriers + 1`` segments: the last one follows the last barrier
    (often empty; whether it is a phase is decided over all ranks, see :func:`phase_count`).
    """

    rank: int
    bytes: np.ndarray
    messages: np.ndarray
    min_size: int
    max_size: int

    @property
    def barriers(self) -> int:
        return len(self.bytes) - 1

    @property
    def trailing_messages(self) -> int:
        return int(self.messages[-1].sum())


def summarize(events: Iterable[Event], rank: int, ranks: int) -> RankSummary:
    byte_rows: list[np.ndarray] = []
    message_rows: list[np.ndarray] = []
    phase_bytes = np.zeros(ranks, np.int64)
    phase_messages = np.zeros(ranks, np.int64)
    min_size, max_size = None, None
    for event in events:
        if isinstance(event, MessageBlock):
            if not len(event):
                continue
            phase_messages += np.bincount(event.dests, minlength=ranks)
            # bincount's weights are float64: exact while a block's sum stays below 2**53 bytes
            phase_bytes += np.bincount(event.dests, weights=event.sizes, minlength=ranks).astype(np.int64)
            low, high = int(event.sizes.min()), int(event.sizes.max())
            min_size = low if min_size is None else min(min_size, low)
            max_size = high if max_size is None else max(max_size, high)
        else:
            byte_rows.append(phase_bytes.copy())
            message_rows.append(phase_messages.copy())
            phase_bytes[:] = 0
            phase_messages[:] = 0
    byte_rows.append(phase_bytes)
    message_rows.append(phase_messages)
    return RankSummary(rank, np.array(byte_rows), np.array(message_rows), min_size or 0, max_size or 0)


def phase_count(trace_path: str, shapes: list[tuple[int, int]]) -> int:
    """Phases every rank replays, from each rank's ``(barriers, trailing_messages)``.

    All ranks must have recorded the same number of barriers (they are global);
    messages after the last barrier form one more phase, closed by the replay's final barrier.
    """
    barriers = {b for b, _ in shapes}
    if len(barriers) > 1:
        listing = ", ".join(f"rank {rank}: {b}" for rank, (b, _) in enumerate(shapes))
        raise TraceFormatError(
            f"{trace_path}: the ranks recorded different numbers of barriers ({listing}); "
            f"barriers are global, so the rank files do not belong to one run"
        )
    return barriers.pop() + (1 if any(trailing for _, trailing in shapes) else 0)
