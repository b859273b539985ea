"""The Python transport: mpi4py calls that move bytes for the sans-I/O :class:`~mailrail.protocol.Endpoint`.

Payloads travel on the rail's data communicator with wildcard receives; credit
returns as zero-byte messages (count in the tag) on the credit communicator.
Every per-call loop is bounded: receives are polled at the head of a ring in
posting order (wildcard receives on one communicator match in that order),
sends are reclaimed a few at a time from the oldest, so a call costs O(1)
whatever the number of posted requests.  It runs when the compiled transport
is not built, with ``MAILRAIL_ENGINE=python``, and while recording a trace.
"""

from __future__ import annotations

import os
import time
from collections import deque
from typing import Any

import numpy as np
from mpi4py import MPI

from ..errors import FinalizedError, ReleaseError
from ..pool import SlotPool
from ..protocol import Endpoint
from . import compiled
from .base import Tuning


class PyMessage:
    """An arrived message: ``data`` is a read-only view of ``nbytes`` bytes in the receive pool.

    Valid until :meth:`MailRail.release_receive_buffer`; copy what must outlive it.
    """

    __slots__ = ("source", "nbytes", "data", "_slot", "_owner")

    def __init__(self, source: int, nbytes: int, data: np.ndarray, slot: int, owner: object) -> None:
        self.source = source
        self.nbytes = nbytes
        self.data = data
        self._slot = slot
        self._owner = owner

    def __repr__(self) -> str:
        state = "released" if self._slot < 0 else f"slot {self._slot}"
        return f"Message(source={self.source}, nbytes={self.nbytes}, {state})"


#: The class of the messages both transports hand out: the compiled one when it is built (same
#: fields, same repr); both implement :class:`~mailrail.transport.base.Message`.
MESSAGE_CLASS: type = compiled.message_type() or PyMessage

#: Send pools of abandoned transports with sends still in flight: MPI may still read them.
_abandoned_send_pools: list[SlotPool] = []


class PythonTransport:
    """Implements :class:`~mailrail.transport.base.Transport` with mpi4py (see the module doc)."""

    name = "python"

    def __init__(
        self,
        *,
        comm: MPI.Comm,
        credit_comm: MPI.Comm | None,
        send_pool: SlotPool,
        recv_pool: SlotPool,
        recv_views: list[np.ndarray],
        posted_receives: int,
        endpoint: Endpoint,
        tuning: Tuning,
        tag_ub: int,
        trace: Any = None,
    ) -> None:
        self._data = comm
        self._credit = credit_comm
        self._endpoint = endpoint
        self._tuning = tuning
        self._tag_ub = tag_ub
        self._trace = trace
        self._send_pool = send_pool
        self._send_views = send_pool.views
        self._recv_views = recv_views
        self._posted_receives = posted_receives
        self._status = MPI.Status()
        self._stopped = False
        self._closed = False
        self.held = 0
        self.held_high_water = 0
        # Send side: in flight oldest first; per slot the last (dest, nbytes) and its persistent send.
        self._inflight: deque[tuple[MPI.Request, int]] = deque()
        self._last_send: list[tuple[int, int, MPI.Prequest | None]] = [(-1, -1, None)] * send_pool.slots
        self._head_waits = 0
        # Receive side: one persistent wildcard receive per slot, posted in ring order; slots beyond
        # MAILRAIL_MAX_RECVS wait, unposted, until a posted one is taken.
        self._recv_requests: list[MPI.Prequest] = []
        self._posted: deque[int] = deque()
        self._unposted: list[int] = []
        self._credit_requests: deque[MPI.Prequest] = deque()
        self._credit_inflight: deque[MPI.Request] = deque()
        self._credit_polls = 0
        self._idle_calls = 0
        self._idle_sleep = tuning.idle_sleep_ns * 1e-9
        try:  # MPI requests exist from here: free them if a later step fails
            self._recv_requests.extend(comm.Recv_init(view, MPI.ANY_SOURCE, MPI.ANY_TAG) for view in recv_pool.views)
            for slot in range(posted_receives):
                self._post(slot)
            self._unposted = list(range(recv_pool.slots - 1, posted_receives - 1, -1))
            if credit_comm is not None:
                self._empty = np.empty(0, np.uint8)
                for _ in range(tuning.credit_receives):
                    self._credit_requests.append(credit_comm.Recv_init(self._empty, MPI.ANY_SOURCE, MPI.ANY_TAG))
                    self._credit_requests[-1].Start()
        except BaseException:
            self.cancel_receives()
            self.close()
            raise

    # -- the four per-message calls -------------------------------------------

    def reserve_send_buffer(self) -> np.ndarray | None:
        if self._stopped:
            raise FinalizedError("reserve_send_buffer() called after finalize()")
        if self._inflight and not self._send_pool.free_count:
            self.reclaim_sends()
        slot = self._endpoint.reserve()
        return None if slot is None else self._send_views[slot]

    def send(self, dest: Any, buf: Any, nbytes: Any) -> None:
        if self._stopped:
            raise FinalizedError(f"send(dest={dest!r}) called after finalize()")
        endpoint = self._endpoint
        dest, nbytes, slot = endpoint.submit(dest, buf, nbytes)
        self._idle_calls = 0  # a rank that sends is busy, not idle
        if self._trace is not None:
            self._trace.message(dest, nbytes)
        if endpoint.deferred.total:
            self._drain_deferred()
        if slot is not None:
            self._transmit(dest, slot, nbytes)

    def receive(self) -> Any:
        if self._stopped:
            raise FinalizedError("receive() called after finalize()")
        if self._inflight:
            self.reclaim_sends()
        endpoint = self._endpoint
        if self._credit is not None:
            self._credit_polls += 1
            if endpoint.deferred.total or self._credit_polls >= self._tuning.credit_poll_interval:
                self._credit_polls = 0
                self._poll_credits()
        if endpoint.deferred.total:
            for dest, slot, nbytes in endpoint.drain_ready():
                self._transmit(dest, slot, nbytes)
        posted = self._posted
        if posted:
            slot = posted[0]
            status = self._status
            if self._recv_requests[slot].Test(status):
                posted.popleft()
                source = status.Get_source()
                nbytes = status.Get_count(MPI.BYTE)
                endpoint.arrived(source, status.Get_tag(), nbytes)
                self.held = held = self.held + 1
                if held > self.held_high_water:
                    self.held_high_water = held
                if self._unposted:  # MAX_RECVS < receive slots: post a parked slot
                    self._post(self._unposted.pop())
                self._idle_calls = 0
                return MESSAGE_CLASS(source, nbytes, self._recv_views[slot][:nbytes], slot, self)
        self._idle()
        return None

    def release_receive_buffer(self, message: Any) -> None:
        if self._stopped:
            raise FinalizedError("release_receive_buffer() called after finalize()")
        if not isinstance(message, MESSAGE_CLASS) or message._owner is not self:
            raise ReleaseError(f"{message!r} is not a message received from this MailRail")
        slot = message._slot
        if slot < 0:
            raise ReleaseError(f"{message!r} was already released")
        message._slot = -1
        self.held -= 1
        if len(self._posted) < self._posted_receives:
            self._post(slot)
        else:
            self._unposted.append(slot)
        credit_return = self._endpoint.released(message.source)
        if credit_return is not None:
            self._return_credits(*credit_return)

    # -- progress, shutdown, counters -------------------------------------------

    def pending_sends(self) -> int:
        endpoint = self._endpoint
        return endpoint.send_buffers_reserved + endpoint.deferred.total + len(self._inflight)

    def reclaim_sends(self) -> int:
        inflight = self._inflight
        budget = self._tuning.send_test_window
        while inflight and budget:
            request, slot = inflight[0]
            if not request.Test():
                self._head_waits += 1
                if self._head_waits >= self._tuning.head_patience:
                    self._head_waits = 0
                    inflight.rotate(-1)
                break
            inflight.popleft()
            self._head_waits = 0
            self._endpoint.send_completed(slot)
            budget -= 1
        return len(inflight)

    def stop(self) -> None:
        self._stopped = True

    def discard_arrivals(self) -> int:
        count = 0
        posted, status = self._posted, self._status
        while posted and self._recv_requests[posted[0]].Test(status):
            slot = posted.popleft()
            self._post(slot)
            count += 1
        requests = self._credit_requests
        while requests and requests[0].Test():
            requests[0].Start()
            requests.rotate(-1)
        return count

    def cancel_receives(self) -> int:
        matched = 0
        status = MPI.Status()
        for slot in self._posted:
            request = self._recv_requests[slot]
            request.Cancel()
            request.Wait(status)
            if not status.Is_cancelled() and status.Get_source() != MPI.ANY_SOURCE:
                matched += 1
        self._posted.clear()
        for request in self._credit_requests:
            request.Cancel()
            request.Wait()
        return matched

    def close(self) -> None:
        if self._inflight:
            raise RuntimeError(f"close() with {len(self._inflight)} send(s) in flight")
        if self._posted:
            raise RuntimeError(f"close() with {len(self._posted)} receive(s) posted: cancel_receives() first")
        while self._credit_inflight:
            self._credit_inflight.popleft().Wait()
        for request in self._recv_requests:
            request.Free()
        for _, _, request in self._last_send:
            if request is not None:
                request.Free()
        for request in self._credit_requests:
            request.Free()
        self._recv_requests, self._last_send = [], []
        self._credit_requests.clear()
        self._closed = True

    def abandon(self) -> None:
        if self._closed or MPI.Is_finalized() or not MPI.Is_initialized():
            return
        self._stopped = True
        if self._inflight:  # their requests complete with the sends: keep them and the pool
            _abandoned_send_pools.append(self._send_pool)
            self._inflight.clear()
            self._last_send = [(-1, -1, None)] * len(self._last_send)
        self.cancel_receives()
        self.close()

    def counters(self) -> dict[str, int]:
        return self._endpoint.transport_counters(held_high_water=self.held_high_water)

    # -- internals ----------------------------------------------------------------

    def _post(self, slot: int) -> None:
        self._recv_requests[slot].Start()
        self._posted.append(slot)

    def _transmit(self, dest: int, slot: int, nbytes: int) -> None:
        tag = self._endpoint.tag_for(dest)
        # Streams repeat (destination, size) per slot: the second time, make the send a
        # persistent request and restart it from then on (Start costs ~0.6 us less than Isend).
        last = self._last_send[slot]
        if tag == 0 and last[0] == dest and last[1] == nbytes:
            request = last[2]
            if request is None:
                request = self._data.Send_init([self._send_views[slot], nbytes, MPI.BYTE], dest, 0)
                self._last_send[slot] = (dest, nbytes, request)
            request.Start()
        else:
            if tag == 0:  # a new stream for this slot; a piggybacking send leaves the cache alone
                if last[2] is not None:
                    last[2].Free()
                self._last_send[slot] = (dest, nbytes, None)
            request = self._data.Isend([self._send_views[slot], nbytes, MPI.BYTE], dest, tag)
        self._inflight.append((request, slot))

    def _drain_deferred(self) -> None:
        for dest, slot, nbytes in self._endpoint.drain():
            self._transmit(dest, slot, nbytes)

    def _return_credits(self, target: int, count: int) -> None:
        while count > 0:  # a return larger than the tag space leaves in pieces
            part = min(count, self._tag_ub)
            self._credit_inflight.append(self._credit.Isend(self._empty, target, part))
            count -= part
        credit_inflight = self._credit_inflight
        while credit_inflight and credit_inflight[0].Test():
            credit_inflight.popleft()

    def _poll_credits(self) -> None:
        requests = self._credit_requests
        status = self._status
        while requests[0].Test(status):
            self._endpoint.credits_arrived(status.Get_source(), status.Get_tag())
            requests[0].Start()
            requests.rotate(-1)

    def _idle(self) -> None:
        self._idle_calls += 1
        if self._idle_calls >= self._tuning.idle_spins:
            self._idle_calls = 0
            if self._idle_sleep:
                time.sleep(self._idle_sleep)
            else:
                os.sched_yield()
