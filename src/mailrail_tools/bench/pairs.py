"""Ranks in pairs (0->1, 2->3, ...), as ``bench stream`` and ``bench calls`` run them: each sender to its partner."""

from __future__ import annotations

from typing import Any

from ..flags import usage_error


def unpaired(command: str, comm: Any) -> int | None:
    """Exit status 2, said in one line, when the job's ranks cannot pair up (fewer than 2, or an odd count)."""
    size = comm.Get_size()
    if size < 2 or size % 2:
        return usage_error(
            command, f"needs an even number of ranks >= 2, got {size}: mailrail run -n 2 {command}", comm
        )
    return None


def partner(rank: int) -> tuple[int, bool]:
    """*rank*'s partner, and whether *rank* is the pair's sender (the even one)."""
    return (rank + 1, True) if rank % 2 == 0 else (rank - 1, False)
