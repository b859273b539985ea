"""Which collective each rank is in, as the program wrote it, and the judge that compares them.

Every collective a program calls on a rail (``rail.barrier()``, a container's collective such as
``CountingSet.total()``, a container's construction, ``finalize()``) is one :class:`Call`: its number on
this rail (1, 2, ...), its name as the program wrote it, the key the ranks must agree on (``barrier`` for
every spelling of a barrier, else the name) and its site, the first frame outside MailRail's collective code
(``wc.py:12``).  What such a call does inside (a container's ``total()`` runs a barrier, then an
allreduce) is part of it, not a call of its own: :class:`CollectiveCalls` counts only the outermost.

Each rank tells a judge the calls it enters (the rails send their :class:`Call` to rank 0; the in-memory
world of :mod:`mailrail.testing` tells its scheduler); :class:`Judge` compares the calls of each number
and, when two ranks are in different collectives, words the one error that names them
(:func:`mismatch_text`).  No MPI here: the rails move the notes.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import struct
import sys
from collections.abc import Callable
from types import CodeType, FrameType
from typing import Any, Concatenate, ParamSpec, TypeVar

from .errors import FinalizedError, nested_barrier_error
from .failure import describe_ranks
from .interfaces import Message

__all__ = [
    "BARRIER",
    "Call",
    "CollectiveCalls",
    "Judge",
    "collective",
    "call_site",
    "mismatch_text",
    "program_frame",
    "WITH_BLOCK_END",
]

#: The key of every spelling of a barrier (``rail.barrier()``, ``Container.barrier()``, ``Coalescer.barrier()``):
#: ranks may call any of them together.
BARRIER = "barrier"
#: The site of a ``finalize()`` that leaving ``with MailRail(...)`` called; ``{}`` is the ``with`` line's site.
WITH_BLOCK_END = "the end of the `with` block opened at {}"
#: Longest site a note carries (a path's end is kept: the file's name is what tells).
SITE_LIMIT = 240

_NUMBER = struct.Struct("<Q")
_SEPARATOR = "\x00"


@dataclasses.dataclass(frozen=True, slots=True)
class Call:
    """One collective call of a rank: its *number* on the rail, the *key* ranks must agree on, the *name* as the
    program wrote it (``CountingSet.total()``) and its *site* (``wc.py:12``)."""

    number: int
    key: str
    name: str
    site: str

    @property
    def described(self) -> str:
        """``CountingSet.total() at wc.py:12``."""
        return f"{self.name} at {self.site}"

    def encode(self) -> bytes:
        """The call as a note's bytes (:meth:`decode` reads them)."""
        what = (self.key, self.name, self.site)
        body = _BODIES.get(what)
        if body is None:
            body = _BODIES[what] = _SEPARATOR.join(what).encode()
        return _NUMBER.pack(self.number) + body

    @classmethod
    def decode(cls, data: bytes | bytearray | memoryview) -> Call:
        (number,) = _NUMBER.unpack_from(data, 0)
        body = bytes(data[_NUMBER.size :])
        what = _READ.get(body)
        if what is None:
            key, name, site = body.decode(errors="replace").split(_SEPARATOR, 2)
            what = _READ[body] = (key, name, site)
        return cls(number, *what)


#: Notes' bodies by what they say, and back: a program makes few distinct calls, each many times.
_BODIES: dict[tuple[str, str, str], bytes] = {}
_READ: dict[bytes, tuple[str, str, str]] = {}


# -- where the program called from ------------------------------------------------------------------------------

_PACKAGE = os.path.dirname(os.path.abspath(__file__))
#: The modules whose frames are MailRail's collective code, not the program's (a tool of the package, an
#: application under ``mailrail/apps``, is a program like any other).
_INTERNAL_FILES = frozenset(
    os.path.join(_PACKAGE, name) for name in ("rail.py", "channels.py", "coalesce.py", "collectives.py")
)
_INTERNAL_DIRECTORIES = tuple(os.path.join(_PACKAGE, name) + os.sep for name in ("containers", "testing"))
_internal_code: dict[CodeType, bool] = {}
_sites: dict[tuple[str, int], str] = {}


def _is_internal(code: CodeType) -> bool:
    known = _internal_code.get(code)
    if known is None:
        path = os.path.abspath(code.co_filename)
        known = _internal_code[code] = path in _INTERNAL_FILES or path.startswith(_INTERNAL_DIRECTORIES)
    return known


def program_frame(depth: int = 1) -> tuple[str, int]:
    """``(file, line)`` of the first frame outside MailRail's collective code, above the caller's *depth*-th
    frame: where the program called the collective (a thread started inside MailRail: its outermost frame)."""
    frame: FrameType | None = sys._getframe(depth)
    last = frame
    known = _internal_code.get
    while frame is not None:
        internal = known(frame.f_code)
        if not (_is_internal(frame.f_code) if internal is None else internal):
            break
        last = frame
        frame = frame.f_back
    found = frame or last
    assert found is not None
    return found.f_code.co_filename, found.f_lineno or 0


def call_site(depth: int = 1) -> str:
    """``file:line`` of :func:`program_frame`, the file relative to the working directory when it is inside it."""
    where = program_frame(depth + 1)
    site = _sites.get(where)
    if site is None:
        path = where[0]
        if os.path.isabs(path):
            relative = os.path.relpath(path)
            path = path if relative.startswith(os.pardir) else relative
        site = f"{path}:{where[1]}"
        if len(site) > SITE_LIMIT:
            site = "..." + site[-(SITE_LIMIT - 3) :]
        _sites[where] = site
    return site


# -- the calls of one rail ----------------------------------------------------------------------------------------


class CollectiveCalls:
    """The collective calls of one rank's rail: their count, and the one being run (:attr:`current`).

    :meth:`enter` at the start of every collective entry point and :meth:`leave` at its end (in a ``finally``);
    only the outermost entry is a call of the program's, numbered and returned.
    """

    def __init__(self) -> None:
        #: Calls entered so far (the number of the last one).
        self.number = 0
        #: The call being run, or the last one once it returned.
        self.current: Call | None = None
        #: Entries not left yet: non-zero while a collective call runs.
        self.depth = 0

    @property
    def inside(self) -> bool:
        """True while a collective call runs."""
        return self.depth > 0

    def enter(self, name: str, key: str | None = None, site: str | None = None) -> Call | None:
        """The call *name* starts (*key*: what ranks must agree on, default the name; *site*: default the program's
        frame): the new :class:`Call`, or None inside another call (part of it)."""
        self.depth += 1
        if self.depth > 1:
            return None
        self.number += 1
        self.current = Call(self.number, key or name, name, site or call_site(2))
        return self.current

    def leave(self) -> None:
        self.depth -= 1


S = TypeVar("S")
P = ParamSpec("P")
R = TypeVar("R")


def collective(method: Callable[Concatenate[S, P], R]) -> Callable[Concatenate[S, P], R]:
    """Make a public method of a container, a Coalescer or the channels one collective call of its rail.

    The call is named ``Kind.method()`` (``CountingSet.total()``; a constructor ``Kind()``), and every
    collective it runs inside is part of it.  A method named ``barrier`` is a barrier (:data:`BARRIER`).  Refused
    from inside a handler first, as every collective is (nothing is entered then).  The object has ``rail``; a
    constructor takes the rail as its first argument.
    """
    operation = method.__name__
    key = BARRIER if operation == "barrier" else None
    constructor = operation == "__init__"

    @functools.wraps(method)
    def entered(self: S, /, *args: P.args, **kwargs: P.kwargs) -> R:
        if constructor:
            rail: Any = args[0] if args else kwargs["rail"]
        else:
            rail = self.rail  # type: ignore[attr-defined]
        if rail._calls.depth:  # part of the call running (the method checks handlers itself, as it did)
            return method(self, *args, **kwargs)
        kind = getattr(self, "kind", None) or type(self).__name__
        name = f"{kind}()" if constructor else f"{kind}.{operation}()"
        rail.channels.check_collective(name)
        rail._enter_collective(name, key)
        try:
            return method(self, *args, **kwargs)
        finally:
            rail._leave_collective()

    return entered


# -- the judge ------------------------------------------------------------------------------------------------------


class Judge:
    """The calls of every rank, by number, as the notes bring them: which ranks disagree, which are awaited.

    :meth:`note` each rank's calls (its own included, in any order across ranks, in order per rank);
    :attr:`mismatch` is then the first number whose calls differ, and :attr:`verdict` the error that says so.
    :meth:`settle` forgets a number once every rank's call of it has come.
    """

    def __init__(self, size: int) -> None:
        self.size = size
        self._calls: dict[int, dict[int, Call]] = {}
        #: Each rank's latest call noted.
        self.last: dict[int, Call] = {}
        #: The number of the first call whose ranks' calls differ, or None.
        self.mismatch: int | None = None
        self._mismatched: dict[int, Call] = {}
        self._settled = 0  # the calls of this number and before are forgotten

    @property
    def verdict(self) -> str | None:
        """The mismatch, worded with every call of its number that came so far (:func:`mismatch_text`), or None."""
        if self.mismatch is None:
            return None
        return mismatch_text(self.mismatch, self._mismatched, self.size)

    def note(self, rank: int, call: Call) -> None:
        calls = self._calls.setdefault(call.number, {})
        calls[rank] = call
        latest = self.last.get(rank)
        if latest is None or latest.number < call.number:
            self.last[rank] = call
        if self.mismatch is None and next(iter(calls.values())).key != call.key:
            self.mismatch, self._mismatched = call.number, calls

    def calls(self, number: int) -> dict[int, Call]:
        """The calls of *number* that came, by rank."""
        return self._calls.get(number, {})

    def complete(self, number: int) -> bool:
        """Every rank's call of *number* came."""
        return len(self._calls.get(number, ())) == self.size

    def missing(self, number: int) -> list[int]:
        """The ranks whose call of *number* has not come."""
        calls = self._calls.get(number, {})
        return [rank for rank in range(self.size) if rank not in calls]

    def settle(self, number: int) -> None:
        """Forget the calls of *number* and before (every rank's came, and they agree)."""
        for old in range(self._settled + 1, number + 1):  # (usually one: numbers settle in order)
            self._calls.pop(old, None)
        self._settled = max(self._settled, number)

    def whereabouts(self, ranks: list[int]) -> str:
        """Where *ranks* were last seen: ``rank 3 last entered collective #4, CountingSet.size() at wc.py:10``."""
        parts = []
        for rank in ranks:
            call = self.last.get(rank)
            if call is None:
                parts.append(f"rank {rank} has entered no collective of this rail yet")
            else:
                parts.append(f"rank {rank} last entered collective #{call.number}, {call.described}")
        return "; ".join(parts)


def mismatch_text(number: int, calls: dict[int, Call], size: int) -> str:
    """The error of ranks in different collectives: each group of ranks and the call they made, as written."""
    groups: dict[str, list[int]] = {}
    for rank in sorted(calls):
        groups.setdefault(calls[rank].described, []).append(rank)
    parts = [f"{describe_ranks(ranks)} called {described}" for described, ranks in groups.items()]
    absent = [rank for rank in range(size) if rank not in calls]
    if absent:
        parts.append(f"{describe_ranks(absent)} {'has' if len(absent) == 1 else 'have'} not come yet")
    return (
        f"ranks called different collectives (collective #{number} of this rail): {'; '.join(parts)}. Every rank "
        f"calls the rail's collectives (barrier(), finalize(), the containers' collectives and constructors) in "
        f"the same order"
    )


class BarrierEntry:
    """How every rail enters ``barrier()`` (:class:`~mailrail.rail.MailRail` and :mod:`mailrail.testing`'s
    rails): refused after ``finalize()`` and from a handler, told to the judge as the program's own call unless
    it is part of another collective, delegated to the channels without a handler, never nested in a barrier's
    handler.  A rail provides the steps this calls."""

    _finalized: bool
    _in_barrier: bool
    _calls: CollectiveCalls
    _channels: Any  # the rail's Channels once made, else None

    def barrier(self, handler: Callable[[Message], object] | None = None) -> int:
        """Collective: return once every message sent by anyone before the call is received and released.

        Keeps receiving meanwhile: each message goes to *handler* (which may send
        more messages) and is released when the handler returns.  Messages the
        application still holds must be released for the barrier to finish.  Returns
        the messages handled.

        Without a handler, arrivals go to the rail's :attr:`channels`: ``barrier()`` flushes what
        containers, Coalescers and :meth:`call` staged, dispatches every arrival to its channel, and
        returns once all their asynchronous work, and the work that work sent, is done.  A datagram
        that is no channel's (sent with :meth:`send`) then raises
        :class:`~mailrail.errors.ProtocolError`: pass *handler* to process your own messages.

        With ``stall_timeout`` set, a barrier that makes no progress for that long
        raises :class:`~mailrail.errors.StallError` naming (on rank 0) the ranks that
        have not called it.  Called from inside a barrier handler: :class:`MailRailError`.
        Ranks in different collectives (this barrier on one, ``finalize()`` or a container's collective on
        another) raise :class:`~mailrail.errors.CollectiveMismatchError` on rank 0, naming each rank's call.
        """
        if self._finalized:
            raise FinalizedError("barrier() called after finalize()")
        called = not self._calls.depth  # the program's own call (else part of a container's, or of this one)
        if called:
            self._refuse_in_handler("barrier()")  # before anything is said to the judge
            self._enter_collective("barrier()", BARRIER)
        try:
            if handler is None:
                return self._channels_barrier()  # flushes, then comes back here with its dispatch as the handler
            if self._in_barrier:  # the outer barrier's collectives would interleave with this one's: a hang
                raise nested_barrier_error()
            self._in_barrier = True
            try:
                return self._barrier(handler)
            finally:
                self._in_barrier = False
        finally:
            if called:
                self._leave_collective()

    def _refuse_in_handler(self, what: str) -> None:
        """Raise when *what*, a collective, is called from inside a handler (the rail's channels know)."""
        if self._channels is not None:
            self._channels.check_collective(what)

    def _channels_barrier(self) -> int:
        """``barrier()`` without a handler: the channels flush and dispatch every arrival."""
        raise NotImplementedError

    def _enter_collective(self, name: str, key: str | None = None, site: str | None = None) -> None:
        raise NotImplementedError

    def _leave_collective(self) -> None:
        raise NotImplementedError

    def _barrier(self, handler: Callable[[Message], object]) -> int:
        """The barrier itself: receive, hand each arrival to *handler*, until every rank's messages are in."""
        raise NotImplementedError
