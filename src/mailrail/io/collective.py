"""The collective steps of a read or a write: quiescence, then one gather of what each rank found.

Every reader starts here: it refuses to run inside a handler, completes the rail's pending work
(``rail.barrier()``: a rank waiting in the gather below grants no credit, so a peer still sending earlier
work under backpressure would wait for it forever), then each rank expands its share of the paths
(paths ``r, r + size, ...``: a directory is listed by one rank, many files are looked up by all), and one
``allgather`` gives every rank the whole list.  An error a rank met there (a path that matches nothing)
travels in the gather, so every rank raises it, the same.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from ..errors import InputError
from .files import FileEntry, Source, expand

__all__ = ["start", "gather", "expand_all"]

T = TypeVar("T")


def start(rail: Any, where: str) -> None:
    """Refuse *where* inside a handler (it is collective), then complete every rank's pending work."""
    rail.channels.check_collective(where)
    rail.barrier()


def gather(rail: Any, work: Callable[[], T], shared: tuple[type[BaseException], ...] = (InputError,)) -> list[T]:
    """Collective: ``work()`` on every rank, the results in rank order on every rank.

    An error of a *shared* type (:class:`~mailrail.errors.InputError`) that a rank's work raised is raised on
    every rank (the lowest rank's), so all stop alike; anything else fails that rank alone (the job's
    failure path ends it).
    """
    try:
        mine: tuple[bool, Any] = (True, work())
    except shared as error:
        mine = (False, error)
    everyone = rail.channels.allgather(mine)
    for ok, value in everyone:
        if not ok:
            raise value
    return [value for _, value in everyone]


def expand_all(rail: Any, sources: Sequence[Source]) -> list[FileEntry]:
    """Collective: every file the sources name, in their order, each once (see :mod:`mailrail.io.files`)."""
    rank, size = rail.rank, rail.size

    def mine() -> dict[int, list[tuple[str, int]]]:
        return {index: expand(sources[index]) for index in range(rank, len(sources), size)}

    found: dict[int, list[tuple[str, int]]] = {}
    for part in gather(rail, mine):
        found.update(part)
    entries = []
    seen = set()
    for index, source in enumerate(sources):
        kind = source.filesystem.type_name
        for path, size_ in found[index]:
            if (kind, path) not in seen:
                seen.add((kind, path))
                entries.append(FileEntry(index, path, size_))
    return entries
