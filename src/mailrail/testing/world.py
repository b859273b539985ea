"""N ranks of a MailRail program in one process, in a seeded order: unit tests without ``mpiexec``.

:class:`World` runs ``program(rail, *args)`` once per rank, each rank in its own thread, with an
in-memory :class:`Rail` in place of :class:`~mailrail.rail.MailRail`::

    from mailrail.testing import World

    results = World(size=4, seed=7).run(program, *args)  # results[r]: rank r's return value

**One rank at a time.**  The threads never run together: a baton passes between them.  A rank runs
until it reaches a *switch point* (each :meth:`Rail.send`, a :meth:`Rail.receive` or
:meth:`Rail.reserve_send_buffer` that returns None, and every collective), where the scheduler picks
the next rank to run, among those that can, with ``random.Random(seed)``.  Each message reaches its
receiver a random number of switch points after it was sent (seeded too), in order per (source,
destination) pair as MPI promises, so arrival orders across sources vary from seed to seed, and one
seed gives one run, every time: no sleeps, no clock, no real concurrency.

**Pools and backpressure.**  A rank has ``send_pool_slots`` send buffers: a sent buffer is in flight
until its bytes are copied into a receive slot of the receiver, then free again.  A receiver has
``recv_pool_slots`` receive slots: while all of them hold messages it has not released, messages to it
wait in the network, its senders' buffers stay in flight, and their ``reserve_send_buffer()`` returns
None, the backpressure a MailRail program must handle.  Bytes are copied (the receiver reads what the
sender's buffer held when the message landed); a released slot is overwritten at once, so a message
read after its release reads garbage here, not by chance later.  The ranks share the process: module
globals, ``run()``'s arguments and closures are the same objects on every rank.

**What is modelled.**  The rail's API and its rules (errors included), ``barrier()``'s termination
rule, ``finalize()``'s report, :attr:`Rail.channels` (the real :class:`~mailrail.channels.Channels`, so
containers and :meth:`Rail.call` run unchanged) and the lowercase collectives of :attr:`Rail.comm`.
**Not modelled:** MPI itself (no credits, flow-control modes or transports, no matching, no
eager/rendezvous sends), and time.  The real rail is tested under ``mpiexec``.

**Failures end the run.**  An exception on a rank stops every other rank and is re-raised by
:meth:`World.run`, with a note naming the rank.  Ranks that enter different collectives of their rails
(``CountingSet.total()`` on one, ``finalize()`` on another) raise
:class:`~mailrail.errors.CollectiveMismatchError`, naming each rank's call and where, as the real rail's judge
does: the ranks that reach the mismatched call stop there, and the run ends once no rank can go on.  When no
rank can proceed otherwise (a barrier some rank never joins, collectives of :attr:`Rail.comm` that do not
match, a rank that returned while the others wait), :class:`DeadlockError` names what each rank is doing; a run
that makes no progress for ``max_idle_steps`` switch points, or takes more than ``max_steps``, raises
:class:`LivelockError`.
"""

from __future__ import annotations

import functools
import heapq
import operator
import pickle
import random
import threading
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Concatenate, NoReturn, ParamSpec, TypeVar

import numpy as np

from ..channels import Channels, Future
from ..collectives import WITH_BLOCK_END, BarrierEntry, Call, CollectiveCalls, Judge, call_site
from ..config import default
from ..errors import (
    CollectiveMismatchError,
    FinalizedError,
    MailRailError,
    report_undelivered,
)
from ..flow.modes import UNCONSTRAINED
from ..interfaces import Message as ArrivedMessage
from ..pool import SlotPool
from ..protocol import (
    FREE,
    HELD,
    IN_FLIGHT,
    checked_rank,
    checked_size,
    finalized,
    not_from_the_pool,
    not_reserved,
    release_refused,
)

__all__ = ["World", "Rail", "TransportRail", "Comm", "Message", "WorldError", "DeadlockError", "LivelockError"]

if TYPE_CHECKING:  # the stack imports the transports (and mpi4py): only a World with implementation= loads it
    from .mpi import InMemoryMPI
    from .stack import RankRail

P = ParamSpec("P")
R = TypeVar("R")

#: The byte a receive slot is filled with when its message is released.
POISON = 0xDD


class WorldError(MailRailError):
    """A :class:`World` stopped a run that could not finish: :class:`DeadlockError` or :class:`LivelockError`."""


class DeadlockError(WorldError):
    """No rank can proceed (or the ranks called different collectives); the message says what each rank does."""


class LivelockError(WorldError):
    """The run made no progress for ``max_idle_steps`` switch points, or took more than ``max_steps``."""


class _Abort(BaseException):
    """Raised inside a rank's thread to unwind its program when the run ends early (never escapes run())."""


# A rank's scheduling status.
_NEW, _RUNNING, _BLOCKED, _RETURNED, _FAILED, _STOPPED = range(6)
_FINISHED = (_RETURNED, _FAILED, _STOPPED)


class World:
    """*size* ranks of a MailRail program in one process, run one at a time in the order *seed* decides.

    *datagram_size*, *send_pool_slots* and *recv_pool_slots* are the rail's knobs of the same names.
    *max_delay*: a message reaches its receiver 0 to *max_delay* switch points after it was sent.
    *max_steps*: the most switch points a run may take; *max_idle_steps*: the most in a row without
    progress (nothing sent, delivered, received, released, reserved, or any collective entered); 0 for
    no limit.  Either limit ends the run with :class:`LivelockError`.  A World may run any number of
    programs, each from the same seed.

    *implementation* (``"python"`` or ``"compiled"``; None: the model) runs MailRail's real stack on each
    rank (:class:`TransportRail`) over an in-memory MPI, with *flow_control*, *ranks_per_node*,
    *credits_per_pair*, *credit_threshold*, *max_recvs* and *piggyback* as the rail's knobs (None: their
    defaults), refused as :class:`~mailrail.rail.MailRail` refuses them.  There each switch point delivers a
    seeded number of the messages in flight (all of them with *max_delay* 0).
    """

    def __init__(
        self,
        size: int = 2,
        seed: int = 0,
        *,
        datagram_size: int = default("datagram_size"),
        send_pool_slots: int = 64,
        recv_pool_slots: int = 64,
        max_delay: int = 8,
        max_steps: int = 10**7,
        max_idle_steps: int = 100_000,
        implementation: str | None = None,
        flow_control: str = UNCONSTRAINED,
        ranks_per_node: int | None = None,
        credits_per_pair: int | None = None,
        credit_threshold: int | None = None,
        max_recvs: int | None = None,
        piggyback: bool | None = None,
    ) -> None:
        for name, value, low in (
            ("size", size, 1),
            ("datagram_size", datagram_size, 1),
            ("send_pool_slots", send_pool_slots, 1),
            ("recv_pool_slots", recv_pool_slots, 1),
            ("max_delay", max_delay, 0),
            ("max_steps", max_steps, 1),
            ("max_idle_steps", max_idle_steps, 0),
        ):
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise ValueError(f"World({name}={value!r}): an integer >= {low}")
        if implementation is None:
            if flow_control != UNCONSTRAINED or any(
                knob is not None for knob in (ranks_per_node, credits_per_pair, credit_threshold, max_recvs, piggyback)
            ):
                raise ValueError(
                    f"World(flow_control={flow_control!r}, ...): the in-memory model has no credits; pass "
                    f"implementation='python' or 'compiled' to run MailRail's real stack"
                )
            self.stack_knobs: dict[str, Any] | None = None
        else:
            from .stack import IMPLEMENTATIONS, unavailable

            if implementation not in IMPLEMENTATIONS:
                raise ValueError(
                    f"World(implementation={implementation!r}): one of {', '.join(map(repr, IMPLEMENTATIONS))}, or None"
                )
            reason = unavailable(implementation)
            if reason is not None:
                raise RuntimeError(f"World(implementation={implementation!r}): {reason}")
            knobs = {
                "ranks_per_node": ranks_per_node,
                "credits_per_pair": credits_per_pair,
                "credit_threshold": credit_threshold,
                "max_recvs": max_recvs,
                "piggyback": piggyback,
            }
            given = {name: value for name, value in knobs.items() if value is not None}
            config = _checked_config(size, flow_control, datagram_size, send_pool_slots, recv_pool_slots, given)
            #: The knobs each rank's stack is built with (:func:`mailrail.testing.stack.make_rank`'s keywords).
            self.stack_knobs = {
                name: getattr(config, name)
                for name in ("flow_control", "datagram_size", "send_pool_slots", "recv_pool_slots", *knobs)
            }
        self.implementation = implementation
        self.flow_control = flow_control
        self.size = size
        self.seed = seed
        self.datagram_size = datagram_size
        self.send_pool_slots = send_pool_slots
        self.recv_pool_slots = recv_pool_slots
        self.max_delay = max_delay
        self.max_steps = max_steps
        self.max_idle_steps = max_idle_steps
        #: Switch points the last run took.
        self.steps = 0

    def run(self, program: Callable[Concatenate[Rail, P], R], /, *args: P.args, **kwargs: P.kwargs) -> list[R]:
        """Run ``program(rail, *args, **kwargs)`` on every rank; return the ranks' results, in rank order.

        An exception on a rank stops the others (at their next switch point: an exception unwinds their
        programs, ``finally`` blocks run) and is raised here, with a note naming the rank;
        :class:`DeadlockError` or :class:`LivelockError` when the run cannot finish.
        """
        run = _Run(self)
        try:
            return run.run(program, args, kwargs)
        finally:
            self.steps = run.steps

    def __repr__(self) -> str:
        over = (
            ""
            if self.implementation is None
            else f", implementation={self.implementation!r}, flow_control={self.flow_control!r}"
        )
        return f"World(size={self.size}, seed={self.seed}{over})"


def _checked_config(
    size: int, flow_control: str, datagram_size: int, send_pool_slots: int, recv_pool_slots: int, knobs: dict[str, Any]
) -> Any:
    """The knobs as :class:`~mailrail.rail.MailRail` takes them: what it refuses (a bad value, a mode's budget that
    cannot be met) raises the same :class:`~mailrail.errors.ConfigError`, naming the value."""
    from ..config import Config
    from .stack import job_budget

    config = Config.from_env(
        {},
        warn=False,
        flow_control=flow_control,
        datagram_size=datagram_size,
        send_pool_slots=send_pool_slots,
        recv_pool_slots=recv_pool_slots,
        **knobs,
    )
    job_budget(
        size,
        config.flow_control,
        config.recv_pool_slots,
        config.ranks_per_node,
        config.credit_threshold,
        config.credits_per_pair,
    )
    return config


class Message:
    """An arrived message: ``data`` is a read-only ``uint8`` view of ``nbytes`` bytes from rank ``source``,
    valid until :meth:`Rail.release_receive_buffer` (as the real rail's messages)."""

    __slots__ = ("source", "nbytes", "data", "_slot", "_owner")

    def __init__(self, source: int, nbytes: int, data: np.ndarray, slot: int, owner: Rail) -> None:
        self.source = source
        self.nbytes = nbytes
        self.data = data
        self._slot = slot  # receive slot; -1 once released
        self._owner = owner

    def __repr__(self) -> str:
        state = "released" if self._slot < 0 else f"slot {self._slot}"
        return f"Message(source={self.source}, nbytes={self.nbytes}, {state})"


class Comm:
    """The collectives of mpi4py's lowercase API that MailRail programs use, over a :class:`World`'s ranks.

    Values travel pickled, as mpi4py's do: each rank gets its own copy.  Every rank must call the same
    collectives in the same order (a mismatch raises :class:`DeadlockError`).
    """

    def __init__(self, run: _Run, rank: int, name: str) -> None:
        self._run = run
        self._rank = rank
        self._size = run.world.size
        self.name = name

    @property
    def rank(self) -> int:
        return self._rank

    @property
    def size(self) -> int:
        return self._size

    def Get_rank(self) -> int:
        return self._rank

    def Get_size(self) -> int:
        return self._size

    def allgather(self, value: Any) -> list[Any]:
        """Every rank's *value*, in rank order."""
        result: list[Any] = self._collective("allgather()", value, lambda values: [values] * self._size)
        return result

    def allreduce(self, value: Any, op: str | Callable[[Any, Any], Any] = "sum") -> Any:
        """*op* over every rank's *value*, in rank order: ``"sum"`` (default), ``"prod"``, ``"max"``, ``"min"``
        (elementwise for numpy arrays), or a function of two values (mpi4py's ``MPI.SUM`` is one)."""
        function, name = _reduction(op)
        return self._collective(
            f"allreduce(op={name})", value, lambda values: [functools.reduce(function, values)] * self._size
        )

    def bcast(self, value: Any = None, root: int = 0) -> Any:
        """Rank *root*'s *value*, on every rank."""
        root = self._root(root)
        return self._collective(f"bcast(root={root})", value, lambda values: [values[root]] * self._size)

    def gather(self, value: Any, root: int = 0) -> list[Any] | None:
        """Every rank's *value*, in rank order, on rank *root*; None on the others."""
        root = self._root(root)
        result: list[Any] | None = self._collective(
            f"gather(root={root})",
            value,
            lambda values: [values if rank == root else None for rank in range(self._size)],
        )
        return result

    def Barrier(self) -> None:
        """Return once every rank called it (no messages involved: see :meth:`Rail.barrier` for those)."""
        self._collective("Barrier()", None, lambda values: [None] * self._size)

    barrier = Barrier

    def _root(self, root: int) -> int:
        if isinstance(root, bool) or not isinstance(root, int) or not 0 <= root < self._size:
            raise ValueError(f"{self.name}: root={root!r} is not a rank (0..{self._size - 1})")
        return root

    def _collective(self, signature: str, value: Any, combine: Callable[[list[Any]], list[Any]]) -> Any:
        return self._run.collective(self._rank, self.name, signature, value, combine)

    def __repr__(self) -> str:
        return f"<mailrail.testing.Comm {self.name} rank {self._rank} of {self._size}>"


def _reduction(op: str | Callable[[Any, Any], Any]) -> tuple[Callable[[Any, Any], Any], str]:
    if isinstance(op, str):
        named: dict[str, Callable[[Any, Any], Any]] = {
            "sum": operator.add,
            "prod": operator.mul,
            "max": _maximum,
            "min": _minimum,
        }
        if op not in named:
            raise ValueError(f"allreduce: unknown op {op!r}: 'sum', 'prod', 'max', 'min' or a function of two values")
        return named[op], op
    if not callable(op):
        raise TypeError(f"allreduce: op {op!r} is neither an op name nor callable")
    return op, str(getattr(op, "__name__", None) or op)


def _maximum(a: Any, b: Any) -> Any:
    return np.maximum(a, b) if isinstance(a, np.ndarray) or isinstance(b, np.ndarray) else max(a, b)


def _minimum(a: Any, b: Any) -> Any:
    return np.minimum(a, b) if isinstance(a, np.ndarray) or isinstance(b, np.ndarray) else min(a, b)


class Rail(BarrierEntry):
    """One rank's in-memory stand-in for :class:`~mailrail.rail.MailRail` (a :class:`World` makes them).

    The same application API and rules: :meth:`reserve_send_buffer`, :meth:`send`, :meth:`receive`,
    :meth:`release_receive_buffer`, :meth:`barrier`, :attr:`channels`, :meth:`call`, :meth:`finalize`,
    :meth:`stats`, :attr:`comm`, the ``with`` statement, and the same errors for bad destinations,
    oversized messages, foreign or re-sent buffers, double releases and use after finalize().
    """

    def __init__(self, run: _Run, rank: int) -> None:
        self._start(run, rank)
        world = run.world
        self._send_pool = SlotPool(world.send_pool_slots, world.datagram_size)
        self._send_state = [FREE] * world.send_pool_slots
        self._free_sends = list(range(world.send_pool_slots - 1, -1, -1))  # a stack, lowest slot on top
        self._reserved = 0
        self._in_flight = 0
        self._recv_pool = SlotPool(world.recv_pool_slots, world.datagram_size)
        self._recv_views = [view[:] for view in self._recv_pool.views]
        for view in self._recv_views:
            view.flags.writeable = False
        self._free_recvs = list(range(world.recv_pool_slots - 1, -1, -1))
        self._arrived: deque[Message] = deque()  # landed in a receive slot, not yet returned by receive()
        self._held = 0
        self._counters = dict.fromkeys(
            (
                "messages_sent",
                "bytes_sent",
                "messages_received",
                "bytes_received",
                "messages_released",
                "reserve_failures",
                "held_high_water",
            ),
            0,
        )

    def _start(self, run: _Run, rank: int) -> None:
        """What every rail of a World has, whatever moves its messages."""
        world = run.world
        self._run = run
        #: This rank: the ``dest`` other ranks send to it with.
        self.rank: int = rank
        #: The ranks of the world: valid destinations are ``0 .. size - 1``.
        self.size: int = world.size
        self.datagram_size: int = world.datagram_size
        self.send_pool_slots: int = world.send_pool_slots
        self._comm = Comm(run, rank, "rail.comm")
        self._channels: Channels | None = None
        self._in_barrier = False
        self._barriers = 0
        self._finalized = False
        self._calls = CollectiveCalls()  # its collective calls, judged by the run as they are entered
        self._exiting = False  # finalize() called by leaving `with`: its site says so

    # -- the application's API ---------------------------------------------------

    @property
    def comm(self) -> Comm:
        """The world's communicator for the application's own collectives (mpi4py's lowercase ones)."""
        return self._comm

    @property
    def channels(self) -> Channels:
        """The rail's :class:`~mailrail.channels.Channels` (made on first use, as the real rail's): record
        streams, containers and calls, whose collectives travel on a communicator of their own."""
        if self._channels is None:
            if self._finalized:
                raise FinalizedError("channels used after finalize()")
            self._channels = Channels(self, Comm(self._run, self.rank, "rail.channels"))
        return self._channels

    def call(self, dest: int, fn: Callable[..., object], *args: Any) -> None:
        """Run ``fn(*args)`` on rank *dest*, asynchronously (see :meth:`Channels.call
        <mailrail.channels.Channels.call>`); the next :meth:`barrier` completes it."""
        self.channels.call(dest, fn, *args)

    def ask(self, dest: int, fn: Callable[..., object], *args: Any) -> Future:
        """Run ``fn(*args)`` on rank *dest*; a :class:`~mailrail.channels.Future` of its answer (see
        :meth:`Channels.ask <mailrail.channels.Channels.ask>`)."""
        return self.channels.ask(dest, fn, *args)

    def reserve_send_buffer(self) -> np.ndarray | None:
        """A writable ``datagram_size``-byte send buffer, or None (backpressure: every buffer is reserved or
        in flight; keep calling :meth:`receive` and retry).  A None is a switch point."""
        if self._finalized:
            raise finalized("reserve_send_buffer()")
        if self._free_sends:
            slot = self._free_sends.pop()
            self._send_state[slot] = HELD
            self._reserved += 1
            self._run.progress()
            return self._send_pool.views[slot]
        self._counters["reserve_failures"] += 1
        self._run.switch(self.rank, "reserve_send_buffer() (it returned None)")
        return None

    def send(self, dest: int, buf: np.ndarray, nbytes: int) -> None:
        """Send the first *nbytes* of *buf* (from :meth:`reserve_send_buffer`) to rank *dest*; *buf* belongs to
        the rail until the message reaches its receiver.  A switch point."""
        if self._finalized:
            raise finalized(f"send(dest={dest!r})")
        try:
            dest = checked_rank(dest, self.size)
            nbytes = checked_size(nbytes, self.datagram_size)
        except MailRailError:  # as the real rail: a refused send gives its reserved buffer back
            self._unreserve(buf)
            raise
        slot = self._send_pool.slot_of(buf)  # a non-contiguous view raises (and stays reserved)
        if slot is None:
            raise not_from_the_pool(buf)
        state = self._send_state[slot]
        if state != HELD:
            raise not_reserved(slot, state)
        self._send_state[slot] = IN_FLIGHT
        self._reserved -= 1
        self._in_flight += 1
        self._counters["messages_sent"] += 1
        self._counters["bytes_sent"] += nbytes
        self._run.post(self.rank, dest, slot, nbytes)
        self._run.switch(self.rank, f"send(dest={dest})")

    def receive(self) -> Message | None:
        """One arrived message (arrival order, any source), or None; never blocks.  A None is a switch point."""
        if self._finalized:
            raise finalized("receive()")
        message = self._take()
        if message is None:
            self._run.switch(self.rank, "receive() (it returned None)")
        return message

    def release_receive_buffer(self, message: ArrivedMessage) -> None:
        """Give *message*'s receive slot back (its bytes are overwritten at once)."""
        if self._finalized:
            raise finalized("release_receive_buffer()")
        if type(message) is not Message or message._owner is not self:
            raise release_refused(message, False)
        slot = message._slot
        if slot < 0:
            raise release_refused(message, True)
        message._slot = -1
        self._recv_pool.views[slot].fill(POISON)
        self._free_recvs.append(slot)
        self._held -= 1
        self._counters["messages_released"] += 1
        self._run.released_total += 1
        self._run.progress()

    def pending_sends(self) -> int:
        """Send buffers reserved and not yet sent, plus sent messages not yet delivered."""
        return self._reserved + self._in_flight

    def _channels_barrier(self) -> int:
        return self.channels.barrier()

    def _enter_collective(self, name: str, key: str | None = None, site: str | None = None) -> None:
        """A collective call starts (see the real rail's): the run compares it with the other ranks' of its number at
        once.  Inside another call: nothing."""
        call = self._calls.enter(name, key, site)
        if call is not None:
            try:
                self._run.enter_call(self.rank, call)
            except BaseException:
                self._calls.leave()
                raise

    def _leave_collective(self) -> None:
        self._calls.leave()

    def _barrier(self, handler: Callable[[Message], object]) -> int:
        run = self._run
        self._barriers += 1
        number = run.enter_barrier(self.rank)
        what = f"barrier() (barrier #{number})"
        handled = 0
        edge = -1  # once the barrier completed: how many of the messages that faster ranks sent since it handles
        while True:
            if edge < 0 and run.barriers_completed >= number:
                edge = run.rng.randint(0, len(self._arrived))
            if edge == 0:
                return handled
            message = self._take()
            if message is None:
                if edge > 0:
                    return handled
                run.block(self.rank, what, lambda: run.barriers_completed >= number or bool(self._arrived))
                continue
            if edge > 0:
                edge -= 1
            handler(message)
            if message._slot >= 0:  # not released by the handler
                self.release_receive_buffer(message)
            handled += 1

    def finalize(self, strict: bool = False) -> dict[str, int]:
        """Collective: the real rail's report of what was never delivered, warned about or raised if *strict*.

        Counts send buffers reserved and never sent (``"reserved"``), received messages never released
        (``"unreleased"``), arrived messages never received (``"unreceived"``: every message to this rank still in
        the network when all ranks are in finalize()), records and calls left staged in the channels
        (``"staged"``), asks never answered (``"unanswered"``); ``"deferred"`` is always 0 (no credits here).  The
        rail refuses every call afterwards (:class:`~mailrail.errors.FinalizedError`).
        """
        if self._finalized:
            raise FinalizedError("finalize() called twice")
        if self._in_barrier:
            raise MailRailError("finalize() called from inside a barrier() handler: it is collective")
        self._enter_collective("finalize()", site=WITH_BLOCK_END.format(call_site()) if self._exiting else None)
        try:
            self._finalized = True
            unanswered = self._channels.unanswered() if self._channels is not None else 0
            staged = self._channels.close() if self._channels is not None else 0
            report = {
                "deferred": 0,
                "unreleased": 0,
                "unreceived": 0,
                "reserved": 0,
                **self._finish(),
                "staged": staged,
                "unanswered": unanswered,
            }
        finally:
            self._leave_collective()
        report_undelivered(f"Rail.finalize() on rank {self.rank}", report, strict)
        return report

    def _finish(self) -> dict[str, int]:
        """finalize()'s collective steps: the counts of its report."""
        reserved, unreleased = self._reserved, self._held
        self._run.collective(self.rank, "finalize", "finalize()", None, lambda values: values)
        return {"unreleased": unreleased, "unreceived": self._run.discard(self.rank), "reserved": reserved}

    def stats(self) -> dict[str, Any]:
        """This rank's counters (those of :mod:`mailrail.counters` that an in-memory rail has)."""
        stats: dict[str, Any] = dict(self._counters)
        stats["send_buffers_reserved"] = self._reserved
        stats["implementation"] = "mailrail.testing"
        stats["flow_control"] = UNCONSTRAINED
        return stats

    def __enter__(self) -> Rail:
        return self

    def __exit__(self, exc_type: object, error: BaseException | None, traceback: object) -> None:
        # As the real rail: a normal exit finalizes (collective); an exception never enters a collective.
        if error is None or _normal_exit(error):
            if not self._finalized:
                self._exiting = True  # its call's site: the end of the block
                self.finalize()
            return
        self._finalized = True

    def __repr__(self) -> str:
        state = " finalized" if self._finalized else ""
        return f"<mailrail.testing.{type(self).__name__} rank {self.rank} of {self.size}{state}>"

    def _notes(self) -> list[str]:
        """What this rank holds, for a deadlock's report."""
        notes = []
        if self._held:
            notes.append(f"holds {self._held} received message(s) not released")
        if self._arrived:
            notes.append(f"has {len(self._arrived)} arrived message(s) it has not received")
        waiting = self._run.waiting[self.rank]
        if waiting:
            notes.append(f"{len(waiting)} message(s) to it wait for a free receive slot")
        if self._reserved:
            notes.append(f"holds {self._reserved} reserved send buffer(s)")
        return notes

    # -- inside ----------------------------------------------------------------

    def _take(self) -> Message | None:
        if not self._arrived:
            return None
        message = self._arrived.popleft()
        self._held += 1
        counters = self._counters
        counters["messages_received"] += 1
        counters["bytes_received"] += message.nbytes
        if self._held > counters["held_high_water"]:
            counters["held_high_water"] = self._held
        self._run.progress()
        return message

    def _unreserve(self, buf: object) -> None:
        try:
            slot = self._send_pool.slot_of(buf)
        except MailRailError:
            return
        if slot is not None and self._send_state[slot] == HELD:
            self._send_state[slot] = FREE
            self._reserved -= 1
            self._free_sends.append(slot)


class TransportRail(Rail):
    """One rank of MailRail's real stack in a :class:`World` made with ``implementation=``: flow control, pools,
    Endpoint and the Python or compiled transport, built as :class:`~mailrail.rail.MailRail` builds them, over
    an :class:`~mailrail.testing.mpi.InMemoryMPI` whose messages the World delivers at its switch points.

    The API, switch points, ``barrier()`` rule and ``finalize()`` report are :class:`Rail`'s; the per-message
    calls, their errors and the credits are the real ones.  A ``barrier()`` or ``finalize()`` that waits
    polls, as the real rail does, so a rank that never joins shows as :class:`LivelockError` after
    ``max_idle_steps``, not as :class:`DeadlockError`.
    """

    def __init__(self, run: _Run, rank: int, stack: RankRail) -> None:
        self._start(run, rank)
        self._stack = stack
        transport = stack.transport
        self._reserve = transport.reserve_send_buffer
        self._send = transport.send
        self._receive = transport.receive
        self._release = transport.release_receive_buffer

    def reserve_send_buffer(self) -> np.ndarray | None:
        buf: np.ndarray | None = self._reserve()
        if buf is None:
            self._run.switch(self.rank, "reserve_send_buffer() (it returned None)")
        else:
            self._run.progress()
        return buf

    def send(self, dest: int, buf: np.ndarray, nbytes: int) -> None:
        self._send(dest, buf, nbytes)
        self._run.sent_total += 1
        self._run.progress()
        self._run.switch(self.rank, f"send(dest={dest})")

    def receive(self) -> Any:
        message = self._take()
        if message is None:
            self._run.switch(self.rank, "receive() (it returned None)")
        return message

    def release_receive_buffer(self, message: Any) -> None:
        self._release(message)
        self._run.released_total += 1
        self._run.progress()

    def pending_sends(self) -> int:
        return self._stack.pending_sends()

    def _take(self) -> Any:
        message = self._receive()
        if message is not None:
            self._run.progress()
        return message

    def _barrier(self, handler: Callable[[Any], object]) -> int:
        run = self._run
        self._barriers += 1
        number = run.enter_barrier(self.rank)
        what = f"barrier() (barrier #{number})"
        handled = 0
        while True:
            message = self._take()
            if message is None:
                if run.barriers_completed >= number:
                    return handled
                run.switch(self.rank, what)
                continue
            handler(message)
            if self._stack.endpoint.holds(message):  # not released by the handler
                self.release_receive_buffer(message)
            handled += 1

    def _finish(self) -> dict[str, int]:
        run, stack = self._run, self._stack
        run.collective(self.rank, "finalize", "finalize()", None, lambda values: values)  # every rank stopped sending
        report = stack.stop()
        while True:  # every rank's sends complete (the World delivers meanwhile), arrivals discarded
            in_flight, discarded = stack.settle()
            report["unreceived"] += discarded
            if not in_flight and run.settled():
                break
            run.switch(self.rank, "finalize() (its sends and every other rank's completing)")
        report["unreceived"] += stack.close()
        return report

    def stats(self) -> dict[str, Any]:
        """This rank's counters (:mod:`mailrail.counters`), its implementation and flow-control mode."""
        stats: dict[str, Any] = self._stack.counters()
        stats["implementation"] = self._stack.kind
        stats["flow_control"] = self._stack.flow.name
        return stats

    def _notes(self) -> list[str]:
        counters = self._stack.counters()
        notes = []
        if self._stack.held:
            notes.append(f"holds {self._stack.held} received message(s) not released")
        if counters["send_buffers_reserved"]:
            notes.append(f"holds {counters['send_buffers_reserved']} reserved send buffer(s)")
        if counters.get("deferred_now"):
            notes.append(f"has {counters['deferred_now']} send(s) waiting for credit")
        return notes


def _normal_exit(error: BaseException) -> bool:
    return isinstance(error, SystemExit) and error.code in (None, 0)


class _Packet:
    """A message in the network: its bytes stay in the sender's send slot until it lands."""

    __slots__ = ("source", "dest", "slot", "nbytes")

    def __init__(self, source: int, dest: int, slot: int, nbytes: int) -> None:
        self.source = source
        self.dest = dest
        self.slot = slot
        self.nbytes = nbytes


class _Gathering:
    """One collective call: what each rank brought (signature, pickled value), then each rank's result."""

    __slots__ = ("entries", "results")

    def __init__(self) -> None:
        self.entries: dict[int, tuple[str, bytes]] = {}
        self.results: list[bytes] | None = None


class _Rank:
    """A rank's thread and scheduling state."""

    __slots__ = ("rank", "wake", "status", "doing", "until", "rail", "thread")

    def __init__(self, rank: int, rail: Rail) -> None:
        self.rank = rank
        self.wake = threading.Semaphore(0)  # released to hand this rank the baton
        self.status = _NEW
        self.doing = "its program"
        self.until: Callable[[], bool] | None = None  # while blocked: when it can go on
        self.rail = rail
        self.thread: threading.Thread | None = None


class _Run:
    """One run of a program on a World: the ranks, the scheduler, the network, the collectives."""

    def __init__(self, world: World) -> None:
        self.world = world
        self.size = size = world.size
        self.rng = random.Random(world.seed)
        self.steps = 0
        self.clock = 0  # a message lands when the clock reaches its time
        self.idle = 0  # switch points since the last progress
        #: Over an implementation: the in-memory MPI the ranks' stacks talk through (None: the model's own network).
        self.mpi: InMemoryMPI | None = None
        #: Over an implementation: each rank's stack (none for the model).
        self.stacks: list[RankRail] = []
        rails: list[Rail]
        if world.implementation is None:
            rails = [Rail(self, rank) for rank in range(size)]
        else:
            from .mpi import InMemoryMPI
            from .stack import make_ranks

            assert world.stack_knobs is not None
            self.mpi = InMemoryMPI(size, seed=world.seed)
            self.stacks = make_ranks(self.mpi, world.implementation, **world.stack_knobs)
            rails = [TransportRail(self, rank, stack) for rank, stack in enumerate(self.stacks)]
        self.ranks = [_Rank(rank, rail) for rank, rail in enumerate(rails)]
        self.results: list[Any] = [None] * size
        self.failure: tuple[int | None, BaseException] | None = None
        self.aborting = False
        self.done = threading.Semaphore(0)  # released when the run is over
        # The network: a heap of (landing time, sequence, packet); what cannot land waits per receiver.
        self.network: list[tuple[int, int, _Packet]] = []
        self.sequence = 0
        self.pair_time: dict[tuple[int, int], int] = {}  # last landing time per (source, dest): FIFO per pair
        self.waiting: list[deque[_Packet]] = [deque() for _ in range(size)]
        self.waiting_total = 0
        self.sent_total = 0
        self.released_total = 0
        self.barrier_in = 0  # ranks in the next barrier to complete
        self.barriers_completed = 0
        self.calls: dict[int, dict[str, int]] = {rank: {} for rank in range(size)}  # collectives per comm
        self.gatherings: dict[tuple[str, int], _Gathering] = {}
        self.judge = Judge(size)  # the rails' collective calls

    # -- the run ----------------------------------------------------------------

    def run(self, program: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[Any]:
        try:
            results = self._run_ranks(program, args, kwargs)
        finally:
            if self.mpi is not None:
                self.mpi.close()  # abandons the transports of ranks that did not finalize
        if self.mpi is not None and (self.mpi.misuse or self.mpi.callback_errors):
            raise WorldError(
                f"mailrail.testing: MailRail used MPI wrongly ({self.world!r}): "
                f"{'; '.join(self.mpi.misuse + self.mpi.callback_errors)}"
            )
        return results

    def _run_ranks(self, program: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[Any]:
        for state in self.ranks:
            state.thread = threading.Thread(
                target=self._rank_main,
                args=(state, program, args, kwargs),
                name=f"mailrail.testing rank {state.rank}",
                daemon=True,
            )
            state.thread.start()
        self._hand_on(self._choose())
        self.done.acquire()
        for state in self.ranks:
            assert state.thread is not None
            state.thread.join()
        if self.failure is not None:
            rank, error = self.failure
            self.failure = None
            if rank is not None:
                error.add_note(f"mailrail.testing: raised on rank {rank} of {self.world!r}")
            raise error
        return self.results

    def _rank_main(
        self, state: _Rank, program: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> None:
        state.wake.acquire()
        try:
            if self.aborting:
                raise _Abort()
            state.status = _RUNNING
            self.results[state.rank] = program(state.rail, *args, **kwargs)
            state.status = _RETURNED
        except _Abort:
            state.status = _STOPPED
        except BaseException as error:
            if _normal_exit(error):
                state.status = _RETURNED
            else:
                state.status = _FAILED
                if self.failure is None:
                    self.failure = (state.rank, error)
                self.aborting = True
        finally:
            self.progress()
            chosen = None
            if not self.aborting:
                try:
                    chosen = self._choose()
                except _Abort:  # the run cannot go on: its failure is recorded
                    pass
            self._hand_on(chosen)

    def _hand_on(self, chosen: _Rank | None) -> None:
        """Give the baton to *chosen*; when the run is stopping, to the next rank to unwind, or to run()."""
        if self.aborting:
            chosen = next((state for state in self.ranks if state.status not in _FINISHED), None)
        if chosen is None:
            self.done.release()
        else:
            chosen.wake.release()

    def fail(self, error: MailRailError) -> NoReturn:
        if self.judge.mismatch is not None:  # what stopped the run: ranks in different collectives
            error = CollectiveMismatchError(f"mailrail.testing: {self.judge.verdict}")
        if self.failure is None:
            self.failure = (None, error)
        self.aborting = True
        raise _Abort()

    # -- scheduling ---------------------------------------------------------------

    def progress(self) -> None:
        self.idle = 0

    def switch(self, rank: int, doing: str) -> None:
        """A switch point of *rank*: the scheduler picks who runs next (maybe *rank* again)."""
        me = self.ranks[rank]
        me.doing = doing
        if self.aborting:
            raise _Abort()
        chosen = self._choose()
        if chosen is not me:
            assert chosen is not None  # this rank has not finished
            chosen.wake.release()
            me.wake.acquire()
            if self.aborting:
                raise _Abort()

    def block(self, rank: int, doing: str, until: Callable[[], bool]) -> None:
        """*rank* waits (a switch point) until *until*() holds; the scheduler runs it only then."""
        me = self.ranks[rank]
        me.status, me.until = _BLOCKED, until
        try:
            self.switch(rank, doing)
            while not until():
                self.switch(rank, doing)
        finally:
            me.status, me.until = _RUNNING, None

    def _choose(self) -> _Rank | None:
        """One step: the network moves, then a rank that can run is picked (None: every rank finished)."""
        world = self.world
        self.steps += 1
        self.clock += 1
        self.idle += 1
        if self.steps > world.max_steps:
            self.fail(LivelockError(self._report(f"the run took more than max_steps={world.max_steps} switch points")))
        while True:
            self._deliver()
            if self.barrier_in == self.size and self.sent_total == self.released_total:
                self.barriers_completed += 1
                self.barrier_in = 0
                self.progress()
            live = [state for state in self.ranks if state.status not in _FINISHED]
            if not live:
                return None
            runnable = [
                state for state in live if state.status != _BLOCKED or (state.until is not None and state.until())
            ]
            if runnable:
                break
            if self.mpi is not None or not self.network:  # (over an implementation, only collectives block)
                self.fail(DeadlockError(self._report("deadlock: no rank can proceed")))
            self.clock = max(self.clock, self.network[0][0])  # nothing runs until the next landing
        if world.max_idle_steps and self.idle > world.max_idle_steps:
            self.fail(
                LivelockError(
                    self._report(
                        f"no progress for max_idle_steps={world.max_idle_steps} switch points (nothing sent, "
                        f"delivered, received, released or reserved, no collective entered; a program that polls "
                        f"this long by design needs a larger max_idle_steps, or 0)"
                    )
                )
            )
        return runnable[self.rng.randrange(len(runnable))]

    # -- the network ----------------------------------------------------------------

    def post(self, source: int, dest: int, slot: int, nbytes: int) -> None:
        """A message leaves: it lands 0..max_delay steps from now, after the pair's earlier messages."""
        pair = (source, dest)
        when = max(self.clock + self.rng.randint(0, self.world.max_delay), self.pair_time.get(pair, 0))
        self.pair_time[pair] = when
        self.sequence += 1
        heapq.heappush(self.network, (when, self.sequence, _Packet(source, dest, slot, nbytes)))
        self.sent_total += 1
        self.progress()

    def _deliver(self) -> None:
        if self.mpi is not None:  # over an implementation: the in-memory MPI's messages, some of them each step
            in_flight = self.mpi.in_flight()
            if in_flight and self.mpi.deliver_random(self.rng.randint(0, in_flight) if self.world.max_delay else None):
                self.progress()
            return
        if self.waiting_total:
            for dest, queue in enumerate(self.waiting):
                free = self.ranks[dest].rail._free_recvs
                while queue and free:
                    self.waiting_total -= 1
                    self._land(queue.popleft())
        network = self.network
        while network and network[0][0] <= self.clock:
            packet = heapq.heappop(network)[2]
            queue = self.waiting[packet.dest]
            if queue or not self.ranks[packet.dest].rail._free_recvs:  # every receive slot taken: it waits
                queue.append(packet)
                self.waiting_total += 1
            else:
                self._land(packet)

    def _land(self, packet: _Packet) -> None:
        """The bytes move from the sender's send slot (free again) into a receive slot of the receiver."""
        sender, receiver = self.ranks[packet.source].rail, self.ranks[packet.dest].rail
        slot, nbytes = receiver._free_recvs.pop(), packet.nbytes
        receiver._recv_pool.views[slot][:nbytes] = sender._send_pool.views[packet.slot][:nbytes]
        sender._send_state[packet.slot] = FREE
        sender._free_sends.append(packet.slot)
        sender._in_flight -= 1
        receiver._arrived.append(Message(packet.source, nbytes, receiver._recv_views[slot][:nbytes], slot, receiver))
        self.progress()

    def settled(self) -> bool:
        """Over an implementation, once every rank is in finalize(): no message in the network, no send in flight."""
        assert self.mpi is not None
        return not self.mpi.in_flight() and not any(stack.endpoint.in_flight for stack in self.stacks)

    def discard(self, rank: int) -> int:
        """finalize(): drop every message to *rank* (arrived, waiting or on its way); return how many."""
        rail = self.ranks[rank].rail
        count = len(rail._arrived) + len(self.waiting[rank])
        rail._arrived.clear()
        self.waiting_total -= len(self.waiting[rank])
        self.waiting[rank].clear()
        kept = [entry for entry in self.network if entry[2].dest != rank]
        count += len(self.network) - len(kept)
        heapq.heapify(kept)
        self.network = kept
        return count

    # -- collectives ----------------------------------------------------------------

    def enter_call(self, rank: int, call: Call) -> None:
        """*rank*'s rail enters the collective *call*: ranks whose calls of one number differ end the run with
        :class:`~mailrail.errors.CollectiveMismatchError`, in the real rail's judge's words.

        Once two calls differ, every rank that reaches that call stops there, and the run ends when no rank can go
        on: the error names every rank's call that the program makes, whatever the order the ranks ran in."""
        judge = self.judge
        judge.note(rank, call)
        self.progress()
        if judge.mismatch is not None and call.number >= judge.mismatch:
            self.block(rank, f"{call.name} (ranks called different collectives)", lambda: False)
        if judge.complete(call.number):
            judge.settle(call.number)

    def enter_barrier(self, rank: int) -> int:
        """*rank* enters the next barrier; its number (barrier #1 is the first).  The barrier completes, at a
        switch point, once every rank is in it and every message sent was released."""
        number = self.barriers_completed + 1
        assert self.ranks[rank].rail._barriers == number, "a rank entered a barrier twice"
        self.barrier_in += 1
        self.progress()
        return number

    def collective(
        self, rank: int, comm: str, signature: str, value: Any, combine: Callable[[list[Any]], list[Any]]
    ) -> Any:
        """*rank* calls the collective *signature* on *comm*: wait for every rank's call, then its result."""
        payload = pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)  # as mpi4py: an error here is the caller's
        calls = self.calls[rank]
        number = calls[comm] = calls.get(comm, 0) + 1
        gathering = self.gatherings.setdefault((comm, number), _Gathering())
        gathering.entries[rank] = (signature, payload)
        self.progress()
        if len(gathering.entries) == self.size:
            del self.gatherings[comm, number]
            signatures = [gathering.entries[other][0] for other in range(self.size)]
            if len(set(signatures)) > 1:
                called = "; ".join(f"rank {other} called {text}" for other, text in enumerate(signatures))
                self.fail(DeadlockError(f"mismatched collectives on {comm} (its collective #{number}): {called}"))
            values = [pickle.loads(gathering.entries[other][1]) for other in range(self.size)]
            gathering.results = [pickle.dumps(result, protocol=pickle.HIGHEST_PROTOCOL) for result in combine(values)]
        where = "finalize()" if comm == "finalize" else f"{comm}.{signature} (collective #{number} on {comm})"
        self.block(rank, where, lambda: gathering.results is not None)
        assert gathering.results is not None
        return pickle.loads(gathering.results[rank])

    # -- reports ----------------------------------------------------------------------

    def _report(self, what: str) -> str:
        lines = [f"mailrail.testing: {what} ({self.world!r}, step {self.steps}):"]
        lines.extend(f"  {self._describe(state)}" for state in self.ranks)
        in_network = self.mpi.in_flight() if self.mpi is not None else len(self.network) + self.waiting_total
        lines.append(
            f"  messages: {self.sent_total} sent, {self.released_total} released, {in_network} in the network "
            f"(a barrier completes once every rank is in it and every message sent was released)"
        )
        return "\n".join(lines)

    def _describe(self, state: _Rank) -> str:
        rail = state.rail
        if state.status == _NEW:
            text = "has not started its program"
        elif state.status == _RETURNED:
            text = "returned from its program"
        elif state.status == _FAILED:
            text = "raised an exception"
        elif state.status == _STOPPED:
            text = "was stopped"
        else:
            text = f"is in {state.doing}"
        notes = rail._notes()
        return f"rank {state.rank} {text}" + (f"; {', '.join(notes)}" if notes else "")
