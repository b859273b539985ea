"""The Python transport: mpi4py calls that move bytes for the sans-I/O :class:`~mailrail.protocol.Endpoint`.

Payloads travel on the rail's data communicator with wildcard receives; credit
messages (returns, grants, requests: see :mod:`mailrail.flow.base`) as zero-byte
messages, their meaning in the tag, on the credit communicator.
Every per-call loop is bounded: receives are polled at the head of a ring in
posting order (wildcard receives on one communicator match in that order),
sends are reclaimed a few at a time from the oldest, so a call costs O(1)
whatever the number of posted requests.  Every decision is the Endpoint's; this
module holds the MPI requests and makes the calls.  It runs when the compiled
implementation is not built, and with ``MAILRAIL_IMPLEMENTATION=python``.
"""

from __future__ import annotations

import os
import time
from collections import deque
from typing import Any

import numpy as np

from .._mpi import MPI
from ..pool import SlotPool
from ..protocol import (
    CREATE,
    ISEND_NEW,
    ISEND_TAGGED,
    NO_SLOT,
    REPLACE,
    START,
    Endpoint,
    completion_error,
    credit_receive_error,
    send_error,
)
from .base import Tuning

#: Send pools of abandoned transports with sends still in flight: MPI may still read them.
_abandoned_send_pools: list[SlotPool] = []


class PythonTransport:
    """Implements :class:`~mailrail.transport.base.Transport` with mpi4py (see the module doc).

    *mpi*: the namespace of MPI names it uses (``Status``, ``BYTE``, ``ANY_SOURCE``, ``ANY_TAG``,
    ``Exception``, ``ERR_TRUNCATE``, ``Is_initialized``, ``Is_finalized``): mpi4py's ``MPI``, or a test's
    in-memory stand-in.
    """

    name = "python"

    def __init__(
        self,
        *,
        comm: Any,
        credit_comm: Any | None,
        send_pool: SlotPool,
        recv_pool: SlotPool,
        recv_views: list[np.ndarray],
        posted_receives: int,
        endpoint: Endpoint,
        tuning: Tuning,
        mpi: Any = MPI,
    ) -> None:
        self._mpi = mpi
        self._data = comm
        self._credit = credit_comm
        self._endpoint = endpoint
        self._tuning = tuning
        self._send_pool = send_pool
        self._send_views = send_pool.views
        self._recv_views = recv_views
        self._recv_buffers = recv_pool.views  # each slot's whole buffer, which its receive was made on
        self._status = mpi.Status()
        self._closed = False
        self._idle_sleep = tuning.idle_sleep_ns * 1e-9
        # Send side: the request in flight per slot, and per slot its persistent send (the Endpoint
        # decides when one is made, started or replaced).
        self._send_request: list[Any] = [None] * send_pool.slots
        self._send_nbytes = [0] * send_pool.slots  # of the send in flight, for its error message
        self._persistent: list[Any] = [None] * send_pool.slots
        # Receive side: one persistent wildcard receive per slot; which are posted, in what order, and which
        # wait parked (MAILRAIL_MAX_RECVS) is the Endpoint's.
        if endpoint.recv_slots != recv_pool.slots or endpoint.posted_receives != posted_receives:
            raise ValueError("the Endpoint's receive slots and posted receives must be the transport's")
        self._recv_requests: list[Any] = []
        self._credit_requests: deque[Any] = deque()
        self._credit_inflight: deque[Any] = deque()
        self._empty = np.empty(0, np.uint8)
        try:  # MPI requests exist from here: free them if a later step fails
            any_source, any_tag = mpi.ANY_SOURCE, mpi.ANY_TAG
            self._recv_requests.extend(self._make_receive(slot) for slot in range(recv_pool.slots))
            while (slot := endpoint.post_parked()) != NO_SLOT:
                self.post_receive(slot)
            if credit_comm is not None:
                for _ in range(tuning.credit_receives):
                    self._credit_requests.append(credit_comm.Recv_init(self._empty, any_source, any_tag))
                    self._credit_requests[-1].Start()
        except BaseException:
            self.cancel_receives()
            self.close()
            raise

    # -- the four per-message calls -------------------------------------------

    def reserve_send_buffer(self) -> np.ndarray | None:
        endpoint = self._endpoint
        if endpoint.in_flight and not endpoint.free_slots:
            self.reclaim_sends()
        slot = endpoint.reserve()
        return None if slot == NO_SLOT else self._send_views[slot]

    def send(self, dest: Any, buf: Any, nbytes: Any) -> None:
        endpoint = self._endpoint
        dest, nbytes, slot, tag, action = endpoint.submit(dest, buf, nbytes)
        if slot != NO_SLOT:
            self.start_send(dest, nbytes, slot, tag, action, False)
        elif endpoint.credit_messages_due():  # deferred: adaptive mode asks for credit
            self.send_credit_messages()

    def receive(self) -> Any:
        return self._endpoint.receive(self)  # the Endpoint runs the step, calling this transport's I/O below

    def release_receive_buffer(self, message: Any) -> None:
        endpoint = self._endpoint
        slot = endpoint.release(message)
        if slot != NO_SLOT:
            self.post_receive(slot)
        if self._credit is not None and endpoint.credit_messages_due():
            self.send_credit_messages()

    # -- progress and shutdown ------------------------------------------------------

    def reclaim_sends(self) -> int:
        endpoint = self._endpoint
        budget = self._tuning.send_test_window
        while budget:
            slot = endpoint.oldest_in_flight()
            if slot == NO_SLOT:
                break
            try:
                done = self._send_request[slot].Test()
            except self._mpi.Exception as error:  # it completed, with an error: its slot is free again
                endpoint.oldest_completed()
                raise completion_error(slot, self._send_nbytes[slot], str(error)) from error
            if not done:
                endpoint.oldest_still_in_flight()
                break
            self._send_request[slot] = None
            endpoint.oldest_completed()
            budget -= 1
        return endpoint.in_flight

    def discard_arrivals(self) -> int:
        count = 0
        endpoint = self._endpoint
        while (slot := endpoint.head_receive()) != NO_SLOT and self.test_receive(slot) is not None:
            endpoint.head_reposted()
            self.post_receive(slot)
            count += 1
        requests = self._credit_requests
        while requests and requests[0].Test():
            requests[0].Start()
            requests.rotate(-1)
        return count

    def cancel_receives(self) -> int:
        matched = 0
        status = self._mpi.Status()
        for slot in self._endpoint.take_posted():
            request = self._recv_requests[slot]
            request.Cancel()
            request.Wait(status)
            if not status.Is_cancelled() and status.Get_source() != self._mpi.ANY_SOURCE:
                matched += 1
        for request in self._credit_requests:
            request.Cancel()
            request.Wait()
        return matched

    def close(self) -> None:
        if self._endpoint.in_flight:
            raise RuntimeError(f"close() with {self._endpoint.in_flight} send(s) in flight")
        if self._endpoint.posted_count:
            raise RuntimeError(f"close() with {self._endpoint.posted_count} receive(s) posted: cancel_receives() first")
        while self._credit_inflight:
            self._credit_inflight.popleft().Wait()
        for request in self._recv_requests:
            request.Free()
        for slot, request in enumerate(self._persistent):
            if request is not None and self._endpoint.has_persistent(slot):
                request.Free()
        for request in self._credit_requests:
            request.Free()
        self._recv_requests, self._persistent = [], []
        self._credit_requests.clear()
        self._closed = True

    def abandon(self) -> None:
        mpi = self._mpi
        if self._closed or mpi.Is_finalized() or not mpi.Is_initialized():
            return
        in_flight = self._endpoint.abandon_in_flight()
        if in_flight:  # their requests complete with the sends: keep them and the pool
            _abandoned_send_pools.append(self._send_pool)
        self.cancel_receives()
        self.close()

    # -- the I/O the Endpoint's receive step calls (mailrail.protocol.ProgressIO) ----------

    def test_receive(self, slot: int) -> tuple[int, int, int, Any] | None:
        """The head receive (*slot*), if it completed; one that completed with an error (in the return code,
        or as Open MPI may report a truncation, in the status alone) is re-posted at the back, then raised."""
        mpi, status = self._mpi, self._status
        try:
            arrived: bool = self._recv_requests[slot].Test(status)
            code = status.Get_error() if arrived else 0
        except mpi.Exception as raised:
            code = raised.Get_error_code()
        if not code:
            if not arrived:
                return None
            nbytes = status.Get_count(mpi.BYTE)
            return status.Get_source(), status.Get_tag(), nbytes, self._recv_views[slot][:nbytes]
        self._endpoint.head_reposted()
        if self._recv_requests[slot] == mpi.REQUEST_NULL:
            # Open MPI 4 frees a persistent request that completed with an error and leaves
            # MPI_REQUEST_NULL in its place (Open MPI 5 and MPICH keep it inactive): make it again.
            self._recv_requests[slot] = self._make_receive(slot)
        self.post_receive(slot)
        failure = mpi.Exception(code)
        truncated = failure.Get_error_class() == mpi.ERR_TRUNCATE
        raise self._endpoint.receive_failed(status.Get_source(), truncated, str(failure)) from failure

    def post_receive(self, slot: int) -> None:
        """Start *slot*'s receive, which the Endpoint put at the ring's back (parked again if MPI fails)."""
        try:
            self._recv_requests[slot].Start()
        except BaseException:
            self._endpoint.post_failed(slot)
            raise

    def idle(self) -> None:
        if self._idle_sleep:
            time.sleep(self._idle_sleep)
        else:
            os.sched_yield()

    # -- internals ----------------------------------------------------------------

    def _make_receive(self, slot: int) -> Any:
        """The persistent wildcard receive of receive slot *slot* (not started)."""
        return self._data.Recv_init(self._recv_buffers[slot], self._mpi.ANY_SOURCE, self._mpi.ANY_TAG)

    def start_send(self, dest: int, nbytes: int, slot: int, tag: int, action: int, deferred: bool) -> None:
        """Start *slot*'s send by the Endpoint's *action* (see :mod:`mailrail.protocol`); an MPI error gives the
        slot back to the Endpoint and raises (*deferred*: it waited for credit)."""
        try:
            buffer = [self._send_views[slot], nbytes, self._mpi.BYTE]
            if action == START:
                request = self._persistent[slot]
                request.Start()
            elif action == CREATE:
                request = self._persistent[slot] = self._data.Send_init(buffer, dest, 0)
                try:
                    request.Start()
                except BaseException:  # the Endpoint forgets the stream: free its request
                    self._persistent[slot] = None
                    request.Free()
                    raise
            else:
                if action == REPLACE:
                    self._persistent[slot].Free()
                    self._persistent[slot] = None
                assert action in (ISEND_TAGGED, ISEND_NEW, REPLACE), action
                request = self._data.Isend(buffer, dest, tag)
        except self._mpi.Exception as error:
            self._endpoint.transmit_failed(slot, nbytes, action)
            raise send_error(dest, nbytes, str(error), deferred=deferred) from error
        except BaseException:
            self._endpoint.transmit_failed(slot, nbytes, action)
            raise
        self._send_request[slot] = request
        self._send_nbytes[slot] = nbytes

    def send_credit_messages(self) -> None:
        """Send the credit messages the Endpoint has due (zero-byte, the meaning in the tag)."""
        endpoint, credit_inflight, credit = self._endpoint, self._credit_inflight, self._credit
        assert credit is not None  # credit messages exist only in the credit modes, which have the communicator
        empty = self._empty
        for _ in range(endpoint.credit_messages_due()):
            target, tag = endpoint.next_credit_message()
            credit_inflight.append(credit.Isend(empty, target, tag))
        while credit_inflight and credit_inflight[0].Test():
            credit_inflight.popleft()

    def poll_credits(self) -> None:
        requests = self._credit_requests
        status = self._status
        while True:
            try:
                if not requests[0].Test(status):
                    return
            except self._mpi.Exception as error:  # completed with an error: post it again, at the back
                requests[0].Start()
                requests.rotate(-1)
                raise credit_receive_error(str(error)) from error
            self._endpoint.credits_arrived(status.Get_source(), status.Get_tag())
            requests[0].Start()
            requests.rotate(-1)
