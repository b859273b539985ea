"""The in-memory MPI against MPI's semantics, on both faces: what the transports running over it rely on."""

from __future__ import annotations

import ctypes

import numpy as np
import pytest

from mailrail._mpi import MPI
from mailrail.testing.mpi import (
    ANY_SOURCE,
    ANY_TAG,
    BYTE,
    ERR_TRUNCATE,
    REQUEST_NULL,
    STATUS_LAYOUT,
    STATUS_SIZE,
    FakeStatus,
    InMemoryMPI,
    WouldBlock,
)
from mailrail.testing.stack import DATA


def array(*values: int) -> np.ndarray:
    return np.array(values, dtype=np.uint8)


def test_wildcard_receives_match_in_posting_order_and_unexpected_messages_in_arrival_order():
    with InMemoryMPI(3) as world:
        receiver, first, second = (world.comm(rank, DATA) for rank in range(3))
        buffers = [np.zeros(4, np.uint8) for _ in range(3)]
        requests = [receiver.Recv_init(b, ANY_SOURCE, ANY_TAG) for b in buffers[:2]]
        for request in requests:
            request.Start()
        second.Isend(array(2, 2), 0, 5)
        first.Isend(array(1), 0, 6)
        first.Isend(array(3, 3, 3), 0, 7)
        assert world.deliver_all() == 3  # oldest first: the second rank's, then the first's two
        status = FakeStatus()
        assert requests[0].Test(status) and (status.Get_source(), status.Get_tag(), status.Get_count(BYTE)) == (2, 5, 2)
        assert requests[1].Test(status) and (status.Get_source(), status.Get_tag()) == (1, 6)
        assert world.unexpected(0, DATA) == 1
        late = receiver.Recv_init(buffers[2], 1, ANY_TAG)
        late.Start()  # matches the unexpected message at once
        assert late.Test(status) and status.Get_tag() == 7 and bytes(buffers[2][:3]) == b"\3\3\3"
        for request in (*requests, late):
            request.Free()


def test_one_channel_never_overtakes_but_channels_do():
    with InMemoryMPI(3) as world:
        a, b = world.comm(1, DATA), world.comm(2, DATA)
        for number in range(3):
            a.Isend(array(number), 0, number)
        b.Isend(array(9), 0, 9)
        assert world.channels() == [(1, 0, 0), (2, 0, 0)]
        order = [world.deliver(1).tag]  # the second channel first: rank 2's message overtakes rank 1's
        order += [world.deliver(0).tag for _ in range(3)]
        assert order == [9, 0, 1, 2]
        assert world.deliver() is None
        receiver = world.comm(0, DATA)
        world.receive_unexpected(0, DATA)
        assert world.unexpected(0, DATA) == 0 and receiver.Get_size() == 3


def test_communicators_are_separate_contexts():
    with InMemoryMPI(2) as world:
        request = world.comm(1, "other").Recv_init(np.zeros(1, np.uint8))
        request.Start()
        world.comm(0, DATA).Isend(array(1), 1, 0)
        world.deliver_all()
        assert not request.Test() and world.unexpected(1, DATA) == 1
        request.Cancel()
        request.Wait()
        request.Free()
        world.receive_unexpected(1, DATA)


def test_persistent_requests_are_inactive_after_completion_and_report_the_empty_status():
    with InMemoryMPI(2) as world:
        buffer = np.zeros(2, np.uint8)
        receive = world.comm(1, DATA).Recv_init(buffer)
        send = world.comm(0, DATA).Send_init([array(4, 5), 2, BYTE], 1, 3)
        assert receive.Test()  # inactive: complete at once, empty status
        receive.Start()
        send.Start()
        assert send.Test()  # eager: complete once buffered
        assert not receive.Test()
        world.deliver_all()
        status = FakeStatus()
        assert receive.Test(status) and status.Get_count(BYTE) == 2 and bytes(buffer) == b"\4\5"
        assert receive.Test(status) and (status.Get_source(), status.Get_tag(), status.Get_count()) == (
            ANY_SOURCE,
            ANY_TAG,
            0,
        )
        receive.Start()
        with pytest.raises(MPI.Exception):  # started twice
            receive.Start()
        assert world.misuse == [f"Start on {receive!r}"]
        world.misuse.clear()
        receive.Cancel()
        receive.Wait()
        receive.Free()
        send.Free()


def test_a_longer_message_truncates_with_an_error_and_fills_the_buffer():
    with InMemoryMPI(2) as world:
        buffer = np.zeros(3, np.uint8)
        receive = world.comm(1, DATA).Recv_init(buffer)
        receive.Start()
        world.comm(0, DATA).Isend(array(1, 2, 3, 4, 5), 1, 0)
        world.deliver_all()
        status = FakeStatus()
        with pytest.raises(MPI.Exception) as raised:
            receive.Test(status)
        assert raised.value.Get_error_class() == ERR_TRUNCATE
        assert (status.Get_error(), status.Get_count(BYTE), bytes(buffer)) == (ERR_TRUNCATE, 3, b"\1\2\3")
        assert receive.Test()  # inactive now
        receive.Free()


def test_cancel_completes_an_unmatched_receive_only():
    with InMemoryMPI(2) as world:
        comm = world.comm(1, DATA)
        unmatched, matched = comm.Recv_init(np.zeros(1, np.uint8)), comm.Recv_init(np.zeros(1, np.uint8))
        matched.Start()
        world.comm(0, DATA).Isend(array(7), 1, 0)
        world.deliver_all()
        unmatched.Start()
        status = FakeStatus()
        for request, cancelled, source in ((unmatched, True, ANY_SOURCE), (matched, False, 0)):
            request.Cancel()
            request.Wait(status)
            assert (status.Is_cancelled(), status.Get_source()) == (cancelled, source)
            request.Free()
        assert world.posted(1) == 0


def test_rendezvous_sends_complete_when_matched_and_read_the_buffer_then():
    with InMemoryMPI(2, eager_limit=1) as world:
        source = array(1, 1)
        send = world.comm(0, DATA).Isend(source, 1, 0)
        small = world.comm(0, DATA).Isend(array(9), 1, 1)  # within the eager limit
        assert small.Test() and not send.Test()
        source[:] = 2  # MPI reads a rendezvous send's buffer when it moves
        world.deliver_all()
        assert not send.Test()  # arrived, unmatched: still in flight
        buffer = np.zeros(2, np.uint8)
        receive = world.comm(1, DATA).Recv_init(buffer, ANY_SOURCE, 0)
        receive.Start()
        assert send.Test() and receive.Test() and bytes(buffer) == b"\2\2"
        never = world.comm(1, DATA).Recv_init(np.zeros(1, np.uint8), 0, 5)
        never.Start()
        with pytest.raises(WouldBlock):  # no message has tag 5
            never.Wait()
        world.misuse.clear()
        never.Cancel()
        never.Wait()
        for request in (never, receive):
            request.Free()
        world.receive_unexpected(1, DATA)


def test_credit_bound_bookkeeping_counts_messages_until_their_buffer_is_reposted():
    with InMemoryMPI(2) as world:
        receive = world.comm(1, DATA).Recv_init(np.zeros(1, np.uint8))
        for _ in range(2):
            world.comm(0, DATA).Isend(array(1), 1, 0)
        key = (1, world.context(DATA))
        assert world.occupancy[key] == world.occupancy_high_water[key] == 2
        receive.Start()
        world.deliver_all()
        assert receive.Test() and world.occupancy[key] == 2  # one in the buffer, one unexpected
        receive.Start()  # re-posted: the first is gone, the second matched into the buffer
        assert world.occupancy[key] == 1 and world.unexpected_high_water[key] == 1
        receive.Test()
        receive.Free()
        assert world.occupancy[key] == 0


def test_leaving_the_world_with_misuse_recorded_fails():
    with pytest.raises(AssertionError, match="erroneous MPI use"):
        with InMemoryMPI(1) as world:
            with pytest.raises(MPI.Exception):
                world.comm(0, DATA).Isend(array(1), 3, 0)  # no rank 3


# -- the C face -----------------------------------------------------------------------------------


class CFace:
    """The fake's C functions called through ctypes, as the compiled transport calls them."""

    def __init__(self, world: InMemoryMPI) -> None:
        library = world.library()
        pointer, integer, handle = ctypes.c_void_p, ctypes.c_int, ctypes.c_ssize_t
        sends = (pointer, integer, handle, integer, integer, handle, pointer)
        prototypes = {
            "MPI_Test": (pointer, pointer, pointer),
            "MPI_Start": (pointer,),
            "MPI_Get_count": (pointer, handle, pointer),
            "MPI_Isend": sends,
            "MPI_Send_init": sends,
            "MPI_Recv_init": sends,
            "MPI_Request_free": (pointer,),
            "MPI_Cancel": (pointer,),
            "MPI_Wait": (pointer, pointer),
            "MPI_Test_cancelled": (pointer, pointer),
        }
        for name, argtypes in prototypes.items():
            function = ctypes.CFUNCTYPE(ctypes.c_int, *argtypes)(library.functions[name])
            setattr(self, name[4:].lower(), function)
        self.library = library
        self.status = ctypes.create_string_buffer(STATUS_SIZE)

    def field(self, name: str) -> int:
        kind = ctypes.c_int64 if name == "count" else ctypes.c_int32
        return kind.from_buffer(self.status, STATUS_LAYOUT[name]).value


def test_the_c_face_moves_bytes_and_fills_its_status_layout():
    with InMemoryMPI(2) as world:
        c = CFace(world)
        assert (c.library.any_source, c.library.byte, c.library.source_offset) == (
            ANY_SOURCE,
            BYTE,
            STATUS_LAYOUT["source"],
        )
        data0, data1 = world.comm(0, DATA).handle, world.comm(1, DATA).handle
        target = np.zeros(8, np.uint8)
        receive, send = ctypes.c_int64(), ctypes.c_int64()
        assert c.recv_init(target.ctypes.data, 8, BYTE, ANY_SOURCE, ANY_TAG, data1, ctypes.byref(receive)) == 0
        assert c.start(ctypes.byref(receive)) == 0
        source = array(1, 2, 3, 4, 5)
        assert c.isend(source.ctypes.data, 5, BYTE, 1, 42, data0, ctypes.byref(send)) == 0
        flag, count = ctypes.c_int(), ctypes.c_int()
        assert c.test(ctypes.byref(send), ctypes.byref(flag), c.status) == 0 and flag.value == 1
        assert send.value == REQUEST_NULL  # a one-off request completed away
        assert c.test(ctypes.byref(receive), ctypes.byref(flag), c.status) == 0 and flag.value == 0
        world.deliver_all()
        assert c.test(ctypes.byref(receive), ctypes.byref(flag), c.status) == 0 and flag.value == 1
        assert c.get_count(c.status, BYTE, ctypes.byref(count)) == 0 and count.value == 5
        assert (c.field("source"), c.field("tag"), c.field("error")) == (0, 42, 0)
        assert bytes(target[:5]) == bytes(source) and receive.value != REQUEST_NULL  # persistent: inactive
        assert c.start(ctypes.byref(receive)) == 0
        assert c.cancel(ctypes.byref(receive)) == 0 and c.wait(ctypes.byref(receive), c.status) == 0
        assert c.test_cancelled(c.status, ctypes.byref(flag)) == 0 and flag.value == 1
        assert c.request_free(ctypes.byref(receive)) == 0 and receive.value == REQUEST_NULL
        assert world.live_requests() == 0


def test_the_c_face_refuses_erroneous_calls_with_mpi_error_codes():
    with InMemoryMPI(2) as world:
        c = CFace(world)
        request, stale = ctypes.c_int64(), ctypes.c_int64(12345)
        data = world.comm(0, DATA).handle
        assert c.isend(None, 0, BYTE, 5, 0, data, ctypes.byref(request)) == MPI.ERR_RANK
        assert c.isend(None, 0, BYTE + 1, 1, 0, data, ctypes.byref(request)) == MPI.ERR_TYPE
        assert c.isend(None, 0, BYTE, 1, 0, data + 1, ctypes.byref(request)) == MPI.ERR_COMM
        assert c.start(ctypes.byref(stale)) == MPI.ERR_REQUEST
        receive = ctypes.c_int64()
        assert c.recv_init(None, 0, BYTE, ANY_SOURCE, ANY_TAG, data, ctypes.byref(receive)) == 0
        assert c.start(ctypes.byref(receive)) == 0
        assert c.wait(ctypes.byref(receive), c.status) != 0  # nothing will ever match it: a deadlock
        assert c.request_free(ctypes.byref(receive)) == MPI.ERR_REQUEST  # posted: MPI may write into it
        assert len(world.misuse) == 6 and not world.callback_errors
        world.misuse.clear()
        c.cancel(ctypes.byref(receive))
        c.wait(ctypes.byref(receive), c.status)
        c.request_free(ctypes.byref(receive))
