"""What ``rail.ask`` returns: a :class:`Future` of a call's answer, and :func:`wait` for many.

A future knows its rail's channels (which make progress while :meth:`Future.result` waits) and the rank asked;
the channels settle it when the answer arrives (:data:`ANSWERED` or :data:`FAILED`, and the value or the
:class:`~mailrail.errors.RemoteError`).

**Compiled where built.**  A program may keep hundreds of thousands of asks outstanding, and a Python object per
ask is one more object for the cyclic garbage collector to scan at every full collection: most of an ask's cost,
measured (the performance page).  ``_futures.pyx`` is the same class, method for method, as an object the
collector does not track (a future holds no cycle of its own: its channels drop it once it is settled, or at
``finalize()``).  :data:`Future` is that class where the package was built with a compiler, else
:class:`PythonFuture`; ``tests/library/test_futures.py`` runs both.
"""

from __future__ import annotations

import importlib
import reprlib
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, Protocol

__all__ = ["ANSWERED", "FAILED", "FUTURE_TYPES", "Future", "PythonFuture", "WAITING", "wait"]


class Waiter(Protocol):
    """What a future waits on: its rail's channels (:meth:`mailrail.channels.Channels.wait_for`)."""

    def wait_for(self, futures: list[Any]) -> None: ...


def _compiled_futures() -> Any:
    try:
        return importlib.import_module("mailrail._futures")
    except ImportError:  # built without a compiler
        return None


_COMPILED = _compiled_futures()
#: A future's states (the compiled class's own objects where it is built: states are compared by identity).
WAITING, ANSWERED, FAILED = (
    (_COMPILED.WAITING, _COMPILED.ANSWERED, _COMPILED.FAILED) if _COMPILED else ("waiting", "answered", "failed")
)


class PythonFuture:
    """What a :meth:`rail.ask <mailrail.channels.Channels.ask>` will return: :meth:`result` waits for it (making
    progress on the rail), :meth:`done` says whether it is there.  *dest* is the rank asked."""

    __slots__ = ("_channels", "dest", "_state", "_value")

    def __init__(self, channels: Waiter, dest: int) -> None:
        self._channels, self.dest = channels, dest
        self._state = WAITING
        self._value: Any = None

    def _settle(self, value: Any, failed: bool) -> None:
        self._state, self._value = (FAILED if failed else ANSWERED), value

    def done(self) -> bool:
        """Whether the answer is there (no progress is made to find out)."""
        return self._state is not WAITING

    def result(self) -> Any:
        """What the function returned on rank :attr:`dest`, waiting for it if need be; what it raised there
        raises here as a :class:`~mailrail.errors.RemoteError`.  Not from inside a handler (a
        :class:`~mailrail.errors.MailRailError` says why)."""
        if self._state is WAITING:
            self._channels.wait_for([self])
        if self._state is FAILED:
            raise self._value
        return self._value

    def __repr__(self) -> str:
        return f"<Future of rank {self.dest}: {self._state}>"


if TYPE_CHECKING:
    Future = PythonFuture
else:
    #: The class of the futures ``rail.ask`` returns (see the module).
    Future = _COMPILED.Future if _COMPILED else PythonFuture
#: Every future class (the compiled one, where built, and the Python one).
FUTURE_TYPES: tuple[type, ...] = (PythonFuture, _COMPILED.Future) if _COMPILED else (PythonFuture,)


def wait(futures: Iterable[Future]) -> list[Any]:
    """Wait for every one of *futures* (making progress on their rails) and return their results, in order; the
    first that failed raises its :class:`~mailrail.errors.RemoteError` (the others keep theirs)."""
    futures = list(futures)
    types = FUTURE_TYPES
    waiting = [future for future in futures if type(future) not in types or future._state is WAITING]
    if waiting:
        for channels, theirs in _by_channels(waiting).items():
            channels.wait_for(theirs)
    return [future._value if future._state is ANSWERED else future.result() for future in futures]


def _by_channels(futures: list[Any]) -> dict[Waiter, list[Future]]:
    types = FUTURE_TYPES
    for future in futures:
        if type(future) not in types:
            raise TypeError(f"mailrail.wait() takes futures of rail.ask(), got {reprlib.repr(future)}")
    rails = {future._channels for future in futures}
    if len(rails) == 1:  # (the common case: one rail)
        return {rails.pop(): futures}
    grouped: dict[Waiter, list[Future]] = {}
    for future in futures:
        grouped.setdefault(future._channels, []).append(future)
    return grouped
