"""An in-memory MPI with two faces, so that MailRail's real stack runs in one process, without ``mpiexec``.

One :class:`InMemoryMPI` is a network of ``size`` ranks inside this process (in the spirit of trio's
fake network and memory streams).  It models what MailRail's transports use of MPI, with MPI's semantics:

- point-to-point messages with an envelope (source, dest, tag, communicator context), matched by
  persistent or one-off requests; wildcard receives (``ANY_SOURCE``/``ANY_TAG``) match in posting
  order, unmatched arrivals wait in an unexpected queue in arrival order, and messages of one
  (source, dest, communicator) channel never overtake each other (channels do, freely);
- persistent requests (``Recv_init``/``Send_init``, ``Start``, inactive after completion,
  ``Free``), one-off sends (``Isend``, null after completion), ``Test``/``Wait`` with statuses
  (source, tag, error, count, cancelled), the empty status of an inactive or null request,
  ``Cancel`` of an unmatched receive, ``Test_cancelled`` and ``Get_count``;
- truncation: a message longer than the receive buffer fills the buffer and completes the
  receive with ``MPI_ERR_TRUNCATE`` (return code and status), as MPI does;
- real data movement: receive buffers are memory (numpy slots, raw addresses on the C face) and
  the bytes are copied with ``ctypes.memmove``, so checksums test what the transports sent;
- eager or rendezvous sends: a send no longer than ``eager_limit`` bytes (every send when it is
  None) is buffered when it starts and completes at once; a longer one completes only when a
  receive matches it, and its bytes are read from the sender's buffer then.

Nothing moves by itself: no threads, no progress behind the caller's back.  A message leaves the
network only when the caller says (:meth:`InMemoryMPI.deliver`, ``deliver(choice)`` picking one of the
busy channels, :meth:`InMemoryMPI.deliver_random`, :meth:`InMemoryMPI.deliver_all`), which is how
scripted, seeded and Hypothesis-generated schedules control arrival orders and credit returns racing
payloads.  :class:`mailrail.testing.World` with ``implementation=`` delivers at its switch points.

The two faces share that one network:

- the Python face (:attr:`InMemoryMPI.mpi`, :meth:`InMemoryMPI.comm`) has the mpi4py names
  :class:`~mailrail.transport.python.PythonTransport` calls; errors raise ``mpi4py.MPI.Exception``
  with MPI's error codes, as mpi4py does;
- the C face (:meth:`InMemoryMPI.library`) is a :class:`~mailrail.transport.compiled.MPILibrary`
  whose ten functions are ``ctypes`` callbacks, with a status layout of this module's own
  (:data:`STATUS_LAYOUT`, unlike Open MPI's), so the compiled transport runs over the same network.

What MPI would call erroneous use (starting an active request, an unknown handle, freeing a
posted receive, a ``Wait`` that could never return) is refused with an error code and recorded
in :attr:`InMemoryMPI.misuse`; leaving a ``with InMemoryMPI(...)`` block with misuse recorded fails.

:mod:`mailrail.testing.stack` builds a rank's rail over it the way :class:`~mailrail.rail.MailRail` does.
"""

from __future__ import annotations

import ctypes
import dataclasses
import itertools
import random
import types
from collections import deque
from collections.abc import Callable
from typing import Any

import numpy as np

from .._mpi import MPI  # as the package starts it: this singleton then leaves no segment in /dev/shm
from ..transport import compiled
from ..transport.compiled import MPILibrary

# -- constants (MPICH's wildcard values and BYTE handle: not Open MPI's, so a transport that used the
#    real library's constants instead of the ones it is given would fail here) ------------------------

ANY_SOURCE = -2
ANY_TAG = -1
BYTE = 0x4C00010D
REQUEST_NULL = 0
SUCCESS = 0
#: Error codes are the real library's, so ``MPI.Exception(code)`` names them.
ERR_TRUNCATE = MPI.ERR_TRUNCATE
ERR_REQUEST = MPI.ERR_REQUEST
ERR_TYPE = MPI.ERR_TYPE
ERR_RANK = MPI.ERR_RANK
ERR_TAG = MPI.ERR_TAG
ERR_COUNT = MPI.ERR_COUNT
ERR_COMM = MPI.ERR_COMM
ERR_BUFFER = MPI.ERR_BUFFER
ERR_OTHER = MPI.ERR_OTHER
ERR_INTERN = MPI.ERR_INTERN

#: The C face's MPI_Status: byte offsets of its fields (count is 8 bytes, the rest 4).
STATUS_LAYOUT = {"count": 0, "cancelled": 8, "tag": 12, "error": 16, "source": 20}
STATUS_SIZE = 24
#: The C face's MPI_Request: an 8-byte request number (0: MPI_REQUEST_NULL).
REQUEST_SIZE = 8


class WouldBlock(AssertionError):
    """A blocking call (``Wait``) on a request that nothing in this process could ever complete."""


@dataclasses.dataclass(frozen=True)
class Status:
    """What a completed request reports."""

    source: int = ANY_SOURCE
    tag: int = ANY_TAG
    error: int = SUCCESS
    count: int = 0
    cancelled: bool = False


#: The status of an inactive or null request (MPI's "empty" status).
EMPTY = Status()


@dataclasses.dataclass(eq=False)
class Envelope:
    """A message on its way: in a channel of the network, then (unmatched) in the receiver's unexpected queue."""

    serial: int  # send order across the world (deliver_all's order)
    source: int
    dest: int
    tag: int
    context: int
    nbytes: int
    address: int  # the sender's buffer
    data: bytes | None  # eager: copied when the send started; rendezvous: read when matched
    send: Request | None  # rendezvous: the send request that completes when the message is matched


class Request:
    """A request of one rank, in MPI's states: active or inactive, complete or not, persistent or one-off.

    The ``mpi_*`` methods are MPI's C calls (they return an error code); the capitalized methods are
    mpi4py's (they raise ``MPI.Exception``), used by the Python transport.
    """

    def __init__(
        self,
        comm: FakeComm,
        kind: str,
        *,
        persistent: bool,
        address: int,
        count: int,
        peer: int,
        tag: int,
        keep: object = None,
    ) -> None:
        self.comm = comm
        self.world = comm.world
        self.kind = kind  # "send" or "recv"
        self.persistent = persistent
        self.address, self.count, self.peer, self.tag = address, count, peer, tag
        self.keep = keep  # the buffer object (Python face): it must outlive the request
        self.active = False
        self.complete = False
        self.null = False  # freed, or a one-off request whose completion was reported
        self.filled = False  # a receive holding a matched message until it is started again or freed
        self.status = EMPTY
        self.handle = 0  # the C face's request number, 0 until it is given one

    def __repr__(self) -> str:
        state = "null" if self.null else "complete" if self.complete else "active" if self.active else "inactive"
        peer = "dest" if self.kind == "send" else "source"
        return (
            f"<{'persistent ' if self.persistent else ''}{self.kind} of rank {self.comm.rank} on "
            f"{self.comm.name!r}, {peer} {self.peer}, tag {self.tag}, {self.count} bytes, {state}>"
        )

    # -- MPI's calls ----------------------------------------------------------------------------

    def mpi_start(self) -> int:
        if self.null or not self.persistent or self.active:
            return self.world.refuse(ERR_REQUEST, f"Start on {self!r}")
        self._unfill()
        self.active, self.complete, self.status = True, False, EMPTY
        if self.kind == "send":
            self.world.post_send(self)
        else:
            self.world.post_receive(self)
        return SUCCESS

    def mpi_test(self) -> tuple[int, bool, Status]:
        """``(code, flag, status)``: an incomplete active request gives flag False; a complete one
        becomes inactive (persistent) or null (one-off), and its error is the return code."""
        if self.null or not self.active:
            return SUCCESS, True, EMPTY
        if not self.complete:
            return SUCCESS, False, EMPTY
        status = self.status
        self.active = False
        if not self.persistent:
            self.world.forget(self)
        return status.error, True, status

    def mpi_wait(self) -> tuple[int, Status]:
        if not self.null and self.active and not self.complete:
            self.world.refuse(ERR_OTHER, f"Wait on {self!r}: nothing can complete it (a deadlock)")
            raise WouldBlock(f"Wait on {self!r} would block forever")
        code, _, status = self.mpi_test()
        return code, status

    def mpi_cancel(self) -> int:
        if self.null:
            return self.world.refuse(ERR_REQUEST, f"Cancel on {self!r}")
        if self.kind == "send":
            return self.world.refuse(
                ERR_REQUEST, f"Cancel of a send ({self!r}): not modelled, and no transport does it"
            )
        if self.active and not self.complete:  # unmatched: it completes, cancelled
            self.world.unpost(self)
            self.complete, self.status = True, Status(cancelled=True)
        return SUCCESS

    def mpi_free(self) -> int:
        if self.null:
            return self.world.refuse(ERR_REQUEST, f"Free on {self!r}")
        if self.kind == "recv" and self.active and not self.complete:
            return self.world.refuse(ERR_REQUEST, f"Free of a posted receive ({self!r}): MPI may still write into it")
        self._unfill()
        self.world.forget(self)  # an active send still completes: its message stays in the network
        return SUCCESS

    def _unfill(self) -> None:
        if self.filled:
            self.filled = False
            self.world.occupancy[self.comm.rank, self.comm.context] -= 1

    # -- mpi4py's methods (the Python face) ---------------------------------------------------

    def Start(self) -> None:
        _check(self.mpi_start())

    def Test(self, status: FakeStatus | None = None) -> bool:
        code, flag, found = self.mpi_test()
        if status is not None and flag:
            status.set(found)
        _check(code)
        return flag

    def Wait(self, status: FakeStatus | None = None) -> bool:
        code, found = self.mpi_wait()
        if status is not None:
            status.set(found)
        _check(code)
        return True

    def Cancel(self) -> None:
        _check(self.mpi_cancel())

    def Free(self) -> None:
        _check(self.mpi_free())


def _check(code: int) -> None:
    """mpi4py's rule: an error code is an ``MPI.Exception``."""
    if code != SUCCESS:
        raise MPI.Exception(code)


class FakeStatus:
    """mpi4py's ``MPI.Status`` for the Python face."""

    def __init__(self) -> None:
        self.set(EMPTY)

    def set(self, status: Status) -> None:
        self._status = status

    def Get_source(self) -> int:
        return self._status.source

    def Get_tag(self) -> int:
        return self._status.tag

    def Get_error(self) -> int:
        return self._status.error

    def Get_count(self, datatype: int = BYTE) -> int:
        if datatype != BYTE:
            raise MPI.Exception(ERR_TYPE)
        return self._status.count

    def Is_cancelled(self) -> bool:
        return self._status.cancelled


class FakeComm:
    """One rank's view of one communicator: the mpi4py calls the Python transport makes, and a handle
    that the C face's calls name."""

    def __init__(self, world: InMemoryMPI, rank: int, name: str, context: int, handle: int) -> None:
        self.world, self.rank, self.name, self.context, self.handle = world, rank, name, context, handle

    def __repr__(self) -> str:
        return f"<FakeComm {self.name!r} of rank {self.rank}>"

    def Get_rank(self) -> int:
        return self.rank

    def Get_size(self) -> int:
        return self.world.size

    def Recv_init(self, buf: Any, source: int = ANY_SOURCE, tag: int = ANY_TAG) -> Request:
        address, count, keep = _buffer(buf)
        return _made(self.world.recv_init(self, address, count, source, tag, keep))

    def Isend(self, buf: Any, dest: int, tag: int = 0) -> Request:
        address, count, keep = _buffer(buf)
        return _made(self.world.send_init(self, address, count, dest, tag, persistent=False, keep=keep))

    def Send_init(self, buf: Any, dest: int, tag: int = 0) -> Request:
        address, count, keep = _buffer(buf)
        return _made(self.world.send_init(self, address, count, dest, tag, persistent=True, keep=keep))


def _made(result: Request | int) -> Request:
    if isinstance(result, int):
        raise MPI.Exception(result)
    return result


def _buffer(buf: Any) -> tuple[int, int, object]:
    """``(address, bytes, keep-alive)`` of an mpi4py buffer spec: a byte array, or ``[array, count, BYTE]``."""
    if isinstance(buf, list | tuple):
        array, count, datatype = buf
        if datatype != BYTE:
            raise MPI.Exception(ERR_TYPE)
    else:
        array, count = buf, None
    if not isinstance(array, np.ndarray) or array.dtype != np.uint8 or not array.flags.c_contiguous:
        raise MPI.Exception(ERR_BUFFER)
    count = array.nbytes if count is None else count
    if not 0 <= count <= array.nbytes:
        raise MPI.Exception(ERR_COUNT)
    return array.__array_interface__["data"][0], count, array


class InMemoryMPI:
    """``size`` ranks and the network between them (see the module doc).

    *eager_limit*: sends of at most that many bytes complete when they start (None: every send);
    longer ones are rendezvous.  *tag_ub*: the largest tag (MPI guarantees 32767).  *seed*: of
    :attr:`random`, for schedules that pick what moves next.
    """

    def __init__(self, size: int, *, eager_limit: int | None = None, tag_ub: int = 32767, seed: int = 0) -> None:
        if size < 1:
            raise ValueError(f"a world needs a rank, got size {size}")
        self.size = size
        self.eager_limit = eager_limit
        self.tag_ub = tag_ub
        self.random = random.Random(seed)
        self.finalized = False
        self._contexts: dict[str, int] = {}
        self._comms: dict[tuple[int, str], FakeComm] = {}
        self._comm_by_handle: dict[int, FakeComm] = {}
        self._network: dict[tuple[int, int, int], deque[Envelope]] = {}  # (source, dest, context)
        self._posted: list[list[Request]] = [[] for _ in range(size)]  # per rank, posting order
        self._unexpected: list[list[Envelope]] = [[] for _ in range(size)]  # per rank, arrival order
        self._serial = itertools.count()
        self._handles = itertools.count(1)
        self._requests: dict[int, Request] = {}  # the C face's live request numbers
        self._library: MPILibrary | None = None
        self._callbacks: list[Any] = []  # the C face's callbacks: alive as long as the world
        #: What MPI would call erroneous use, one line each (see the module doc).
        self.misuse: list[str] = []
        #: Exceptions raised inside C callbacks (ctypes cannot propagate them): a bug of the fake.
        self.callback_errors: list[str] = []
        #: Per (rank, context): messages sent to it and not yet matched, plus its receives holding a
        #: matched message not yet re-posted or freed; and the peak of that.  Credits bound it by
        #: the receive slots.
        self.occupancy: dict[tuple[int, int], int] = {}
        self.occupancy_high_water: dict[tuple[int, int], int] = {}
        #: Per (rank, context): the most messages at once in the unexpected queue.
        self.unexpected_high_water: dict[tuple[int, int], int] = {}
        self.messages_started = 0
        self.messages_delivered = 0
        self.mpi = types.SimpleNamespace(
            Status=FakeStatus,
            BYTE=BYTE,
            ANY_SOURCE=ANY_SOURCE,
            ANY_TAG=ANY_TAG,
            ERR_TRUNCATE=ERR_TRUNCATE,
            # no request here ever equals it: a persistent request that completed with an error stays
            # usable, as in MPICH and Open MPI 5 (Open MPI 4 frees it; tests/library/test_rail_faults.py runs that)
            REQUEST_NULL=REQUEST_NULL,
            Exception=MPI.Exception,
            Is_initialized=lambda: True,
            Is_finalized=lambda: self.finalized,
        )
        #: Things to undo (and transports to abandon) when the world closes.
        self._closers: list[Callable[[], None]] = []

    # -- communicators ----------------------------------------------------------------------------

    def comm(self, rank: int, name: str) -> FakeComm:
        """Rank *rank*'s end of the communicator called *name* (one context per name, as a ``Dup``)."""
        if not 0 <= rank < self.size:
            raise ValueError(f"rank {rank} is not in a world of {self.size}")
        found = self._comms.get((rank, name))
        if found is None:
            context = self._contexts.setdefault(name, len(self._contexts))
            found = FakeComm(self, rank, name, context, 0x44000000 + 16 * len(self._comm_by_handle))
            self._comms[rank, name] = found
            self._comm_by_handle[found.handle] = found
        return found

    def context(self, name: str) -> int:
        return self._contexts[name]

    # -- requests (both faces call these) -------------------------------------------------------

    def recv_init(
        self, comm: FakeComm, address: int, count: int, source: int, tag: int, keep: object = None
    ) -> Request | int:
        if count < 0:
            return self.refuse(ERR_COUNT, f"Recv_init of {count} bytes")
        if source != ANY_SOURCE and not 0 <= source < self.size:
            return self.refuse(ERR_RANK, f"Recv_init from rank {source}")
        if tag != ANY_TAG and not 0 <= tag <= self.tag_ub:
            return self.refuse(ERR_TAG, f"Recv_init with tag {tag}")
        return Request(comm, "recv", persistent=True, address=address, count=count, peer=source, tag=tag, keep=keep)

    def send_init(
        self, comm: FakeComm, address: int, count: int, dest: int, tag: int, *, persistent: bool, keep: object = None
    ) -> Request | int:
        if count < 0:
            return self.refuse(ERR_COUNT, f"a send of {count} bytes")
        if not 0 <= dest < self.size:
            return self.refuse(ERR_RANK, f"a send to rank {dest} in a world of {self.size}")
        if not 0 <= tag <= self.tag_ub:
            return self.refuse(ERR_TAG, f"a send with tag {tag} (tag_ub {self.tag_ub})")
        request = Request(comm, "send", persistent=persistent, address=address, count=count, peer=dest, tag=tag)
        request.keep = keep
        if not persistent:
            request.active = True
            self.post_send(request)
        return request

    def post_send(self, request: Request) -> None:
        comm = request.comm
        eager = self.eager_limit is None or request.count <= self.eager_limit
        envelope = Envelope(
            serial=next(self._serial),
            source=comm.rank,
            dest=request.peer,
            tag=request.tag,
            context=comm.context,
            nbytes=request.count,
            address=request.address,
            data=ctypes.string_at(request.address, request.count) if eager else None,
            send=None if eager else request,
        )
        if eager:
            request.complete = True
        self._network.setdefault((envelope.source, envelope.dest, envelope.context), deque()).append(envelope)
        self.messages_started += 1
        key = (envelope.dest, envelope.context)
        self.occupancy[key] = now = self.occupancy.get(key, 0) + 1
        if now > self.occupancy_high_water.get(key, 0):
            self.occupancy_high_water[key] = now

    def post_receive(self, request: Request) -> None:
        """A started receive matches the oldest unexpected message it can, else waits, posted."""
        rank = request.comm.rank
        unexpected = self._unexpected[rank]
        for index, envelope in enumerate(unexpected):
            if _matches(request, envelope):
                del unexpected[index]
                self._match(request, envelope)
                return
        self._posted[rank].append(request)

    def unpost(self, request: Request) -> None:
        self._posted[request.comm.rank].remove(request)

    def forget(self, request: Request) -> None:
        request.null = True
        if request.handle:
            self._requests.pop(request.handle, None)

    def refuse(self, code: int, what: str) -> int:
        """Erroneous use: recorded, and answered with *code* as MPI would."""
        self.misuse.append(what)
        return code

    # -- the network: nothing moves until the test says -----------------------------------------

    def channels(self) -> list[tuple[int, int, int]]:
        """The busy channels ``(source, dest, context)``, sorted: what :meth:`deliver` can choose from."""
        return sorted(key for key, queue in self._network.items() if queue)

    def in_flight(self) -> int:
        """Messages in the network (not yet at their receiver)."""
        return sum(len(queue) for queue in self._network.values())

    def deliver(self, choice: int | None = None) -> Envelope | None:
        """Move one message to its receiver: the oldest of channel ``channels()[choice % busy]``, or with
        *choice* None the oldest in the world.  Returns it, or None when the network is empty."""
        busy = self.channels()
        if not busy:
            return None
        if choice is None:
            key = min(busy, key=lambda k: self._network[k][0].serial)
        else:
            key = busy[choice % len(busy)]
        envelope = self._network[key].popleft()
        self.messages_delivered += 1
        for index, request in enumerate(self._posted[envelope.dest]):
            if _matches(request, envelope):
                del self._posted[envelope.dest][index]
                self._match(request, envelope)
                return envelope
        unexpected = self._unexpected[envelope.dest]
        unexpected.append(envelope)
        waiting = sum(1 for e in unexpected if e.context == envelope.context)
        if waiting > self.unexpected_high_water.get((envelope.dest, envelope.context), 0):
            self.unexpected_high_water[envelope.dest, envelope.context] = waiting
        return envelope

    def deliver_all(self) -> int:
        """Deliver everything in the network, oldest first; return how many."""
        count = 0
        while self.deliver() is not None:
            count += 1
        return count

    def deliver_random(self, count: int | None = None) -> int:
        """Deliver *count* messages (default: all), each from a busy channel chosen by :attr:`random`."""
        moved = 0
        while (count is None or moved < count) and self.in_flight():
            self.deliver(self.random.randrange(len(self.channels())))
            moved += 1
        return moved

    def unexpected(self, rank: int, name: str) -> int:
        """Messages that arrived at *rank* on communicator *name* and match no posted receive."""
        context = self._contexts.get(name)
        return sum(1 for envelope in self._unexpected[rank] if envelope.context == context)

    def receive_unexpected(self, rank: int, name: str) -> int:
        """Take every unexpected message of *rank* on *name* (what finalize's probe-and-receive does);
        their rendezvous sends complete.  Returns how many."""
        context = self._contexts.get(name)
        if context is None:  # no communicator of that name: nothing sent on it
            return 0
        taken = [e for e in self._unexpected[rank] if e.context == context]
        self._unexpected[rank] = [e for e in self._unexpected[rank] if e.context != context]
        for envelope in taken:
            self.occupancy[rank, context] -= 1
            if envelope.send is not None:
                envelope.send.complete = True
        return len(taken)

    def posted(self, rank: int, name: str | None = None) -> int:
        """Receives *rank* has posted (on communicator *name*, or any) and nothing has matched."""
        context = None if name is None else self._contexts.get(name)
        return sum(1 for r in self._posted[rank] if context is None or r.comm.context == context)

    def live_requests(self) -> int:
        """Request numbers the C face handed out and nothing freed or completed away."""
        return len(self._requests)

    def _match(self, request: Request, envelope: Envelope) -> None:
        data = envelope.data if envelope.data is not None else ctypes.string_at(envelope.address, envelope.nbytes)
        count = min(envelope.nbytes, request.count)
        if count:
            ctypes.memmove(request.address, data, count)
        error = ERR_TRUNCATE if envelope.nbytes > request.count else SUCCESS
        request.status = Status(source=envelope.source, tag=envelope.tag, error=error, count=count)
        request.complete = True
        request.filled = True  # occupancy moves from "sent to it" to "in its buffers": unchanged
        if envelope.send is not None:
            envelope.send.complete = True

    # -- the C face -------------------------------------------------------------------------------

    def library(self) -> MPILibrary:
        """The ten MPI functions of :data:`~mailrail.transport.compiled.MPI_FUNCTIONS` as ctypes callbacks
        over this world, with this module's layout facts (what the compiled transport is given)."""
        if self._library is None:
            functions: dict[str, int] = {}
            for name, (argtypes, body) in self._c_functions().items():
                prototype = ctypes.CFUNCTYPE(ctypes.c_int, *argtypes)
                callback = prototype(self._guarded(name, body))
                self._callbacks.append(callback)
                address = ctypes.cast(callback, ctypes.c_void_p).value
                assert address is not None
                functions[name] = address
            assert set(functions) == set(compiled.MPI_FUNCTIONS)
            self._library = MPILibrary(
                functions=functions,
                status_size=STATUS_SIZE,
                request_size=REQUEST_SIZE,
                source_offset=STATUS_LAYOUT["source"],
                tag_offset=STATUS_LAYOUT["tag"],
                error_offset=STATUS_LAYOUT["error"],
                byte=BYTE,
                any_source=ANY_SOURCE,
                any_tag=ANY_TAG,
            )
        return self._library

    def _guarded(self, name: str, body: Callable[..., int]) -> Callable[..., int]:
        def call(*args: Any) -> int:
            try:
                return body(*args)
            except WouldBlock as error:  # recorded as misuse already
                del error
                return ERR_OTHER
            except BaseException as error:  # ctypes would print and return garbage: record, fail the call
                self.callback_errors.append(f"{name}: {type(error).__name__}: {error}")
                return ERR_INTERN

        return call

    def _c_functions(self) -> dict[str, tuple[tuple[Any, ...], Callable[..., int]]]:
        pointer, integer, handle = ctypes.c_void_p, ctypes.c_int, ctypes.c_ssize_t

        def request_at(address: int | None) -> Request | int | None:
            """The request whose number the transport's buffer holds: None for MPI_REQUEST_NULL, an error
            code for a number that is not live."""
            if not address:
                return self.refuse(ERR_REQUEST, "a NULL request pointer")
            number = ctypes.c_int64.from_address(address).value
            if number == REQUEST_NULL:
                return None
            found = self._requests.get(number)
            if found is None:
                return self.refuse(ERR_REQUEST, f"request number {number}, which is not live")
            return found

        def store(address: int, request: Request) -> int:
            request.handle = next(self._handles)
            self._requests[request.handle] = request
            ctypes.c_int64.from_address(address).value = request.handle
            return SUCCESS

        def write_status(address: int | None, status: Status) -> None:
            if address:  # NULL is MPI_STATUS_IGNORE
                ctypes.c_int64.from_address(address + STATUS_LAYOUT["count"]).value = status.count
                ctypes.c_int32.from_address(address + STATUS_LAYOUT["cancelled"]).value = int(status.cancelled)
                ctypes.c_int32.from_address(address + STATUS_LAYOUT["tag"]).value = status.tag
                ctypes.c_int32.from_address(address + STATUS_LAYOUT["error"]).value = status.error
                ctypes.c_int32.from_address(address + STATUS_LAYOUT["source"]).value = status.source

        def after_completion(address: int, request: Request) -> None:
            if request.null:  # a one-off request completed away: the transport's copy becomes MPI_REQUEST_NULL
                ctypes.c_int64.from_address(address).value = REQUEST_NULL

        def comm_of(handle_value: int, datatype: int) -> FakeComm | int:
            found = self._comm_by_handle.get(handle_value)
            if found is None:
                return self.refuse(ERR_COMM, f"communicator handle {handle_value:#x}")
            if datatype != BYTE:
                return self.refuse(ERR_TYPE, f"datatype handle {datatype:#x}")
            return found

        def test(address: int, flag: int, status: int) -> int:
            request = request_at(address)
            if isinstance(request, int):
                return request
            code, done, found = (SUCCESS, True, EMPTY) if request is None else request.mpi_test()
            ctypes.c_int.from_address(flag).value = int(done)
            if done:
                write_status(status, found)
                if request is not None:
                    after_completion(address, request)
            return code

        def wait(address: int, status: int) -> int:
            request = request_at(address)
            if isinstance(request, int):
                return request
            code, found = (SUCCESS, EMPTY) if request is None else request.mpi_wait()
            write_status(status, found)
            if request is not None:
                after_completion(address, request)
            return code

        def start(address: int) -> int:
            request = request_at(address)
            if request is None:
                return self.refuse(ERR_REQUEST, "Start on MPI_REQUEST_NULL")
            return request if isinstance(request, int) else request.mpi_start()

        def free(address: int) -> int:
            request = request_at(address)
            if request is None:
                return self.refuse(ERR_REQUEST, "Request_free on MPI_REQUEST_NULL")
            if isinstance(request, int):
                return request
            code = request.mpi_free()
            if code == SUCCESS:
                ctypes.c_int64.from_address(address).value = REQUEST_NULL
            return code

        def cancel(address: int) -> int:
            request = request_at(address)
            if request is None:
                return self.refuse(ERR_REQUEST, "Cancel on MPI_REQUEST_NULL")
            return request if isinstance(request, int) else request.mpi_cancel()

        def get_count(status: int, datatype: int, count: int) -> int:
            if datatype != BYTE:
                return self.refuse(ERR_TYPE, f"Get_count with datatype {datatype:#x}")
            ctypes.c_int.from_address(count).value = ctypes.c_int64.from_address(status + STATUS_LAYOUT["count"]).value
            return SUCCESS

        def test_cancelled(status: int, flag: int) -> int:
            cancelled = ctypes.c_int32.from_address(status + STATUS_LAYOUT["cancelled"]).value
            ctypes.c_int.from_address(flag).value = cancelled
            return SUCCESS

        def make_send(persistent: bool) -> Callable[..., int]:
            def send(buf: int | None, count: int, datatype: int, dest: int, tag: int, comm: int, address: int) -> int:
                found = comm_of(comm, datatype)
                if isinstance(found, int):
                    return found
                made = self.send_init(found, buf or 0, count, dest, tag, persistent=persistent)
                return made if isinstance(made, int) else store(address, made)

            return send

        def recv_init(
            buf: int | None, count: int, datatype: int, source: int, tag: int, comm: int, address: int
        ) -> int:
            found = comm_of(comm, datatype)
            if isinstance(found, int):
                return found
            made = self.recv_init(found, buf or 0, count, source, tag)
            return made if isinstance(made, int) else store(address, made)

        sends = (pointer, integer, handle, integer, integer, handle, pointer)
        return {
            "MPI_Test": ((pointer, pointer, pointer), test),
            "MPI_Start": ((pointer,), start),
            "MPI_Get_count": ((pointer, handle, pointer), get_count),
            "MPI_Isend": (sends, make_send(False)),
            "MPI_Send_init": (sends, make_send(True)),
            "MPI_Recv_init": (sends, recv_init),
            "MPI_Request_free": ((pointer,), free),
            "MPI_Cancel": ((pointer,), cancel),
            "MPI_Wait": ((pointer, pointer), wait),
            "MPI_Test_cancelled": ((pointer, pointer), test_cancelled),
        }

    # -- lifetime -----------------------------------------------------------------------------------

    def on_close(self, closer: Callable[[], None]) -> None:
        self._closers.append(closer)

    def close(self) -> None:
        """Undo what :func:`make_rank` set up (abandon transports still open, restore patches), newest first."""
        while self._closers:
            self._closers.pop()()

    def __enter__(self) -> InMemoryMPI:
        return self

    def __exit__(self, kind: object, error: BaseException | None, traceback: object) -> None:
        self.close()
        if error is None:
            assert not self.callback_errors, f"the fake's C callbacks raised: {self.callback_errors}"
            assert not self.misuse, f"erroneous MPI use: {self.misuse}"


def _matches(request: Request, envelope: Envelope) -> bool:
    return (
        request.comm.context == envelope.context
        and request.comm.rank == envelope.dest
        and request.peer in (ANY_SOURCE, envelope.source)
        and request.tag in (ANY_TAG, envelope.tag)
    )
