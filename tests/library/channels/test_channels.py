"""Channels (:mod:`mailrail.channels`) in a mailrail.testing World, on its model and on MailRail's real stack:
record streams and calls made from calls all arrive, replies filled in send buffers and in pairs arrive exactly
once, work after a handler runs after it.  Their MPI jobs are in test_channels_mpi.py."""

from __future__ import annotations

import functools
import threading

import numpy as np
import pytest

import mailrail
from mailrail.errors import InvalidDestinationError, MessageSizeError, UndeliveredWarning
from mailrail.testing import World
from worlds import BACKENDS, make_world


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


#: A call's rank-local state: a MailRail process has one rank, so a module global is its rank's; in a World the
#: ranks are threads of one process, and a threading.local() is what keeps them apart (and works on MPI too).
STATE = threading.local()


def visit(ttl: int, path: tuple[int, ...]) -> None:
    """A call that calls on: it runs on the rank it was sent to, and forwards itself *ttl* more times."""
    rail = STATE.rail
    STATE.visits.append(path + (rail.rank,))
    if ttl:
        rail.call((rail.rank + ttl) % rail.size, visit, ttl - 1, path + (rail.rank,))


def channels_and_calls(rail, keys_per_rank: int):
    STATE.rail, STATE.visits = rail, []
    received = []
    channel = rail.channels.open(np.uint64, lambda source, records: received.extend(records.tolist()))
    keys = np.arange(keys_per_rank, dtype=np.uint64) + np.uint64(1000 * rail.rank)
    channel.send(keys % np.uint64(rail.size), keys)
    rail.call((rail.rank + 1) % rail.size, visit, 3, ())
    rail.barrier()  # delegated to the channels: flushes, dispatches, waits for calls made by calls
    return sorted(received), STATE.visits, rail.finalize()


@pytest.mark.parametrize("seed", [0, 5])
def test_channel_records_and_calls_made_from_calls_all_arrive(seed, backend):
    size, per_rank = 3, 700  # 700 records of 8 bytes: several 512-byte datagrams per destination
    results = make_world(backend, size, seed, datagram_size=512, send_pool_slots=2, recv_pool_slots=2).run(
        channels_and_calls, per_rank
    )
    everything = sorted(key for keys, _, _ in results for key in keys)
    assert everything == sorted(1000 * r + i for r in range(size) for i in range(per_rank))
    for rank, (keys, _, report) in enumerate(results):
        assert all(key % size == rank for key in keys) and not any(report.values())
    visits = sorted(path for _, paths, _ in results for path in paths)
    assert len(visits) == 4 * size  # each rank's call ran, then called on three times
    assert {len(path) for path in visits} == {1, 2, 3, 4}


def requests_answered_by_fill(rail, asks_per_rank: int):
    """Each rank asks every rank for values; the owners answer from their handlers with fill_to (records
    written in send buffers while spare ones last, the rest through arrays), as Array.gather does."""
    reply_dtype = np.dtype([("position", np.int64), ("value", np.float64, (3,))])
    answers = np.full((asks_per_rank, 3), -1.0)
    replies = rail.channels.open(reply_dtype, lambda source, got: answers.__setitem__(got["position"], got["value"]))

    def answer(source, asked):
        positions = asked.copy()  # the handler's view of the receive buffer: fill reads it before returning

        def fill(view, start, stop):
            view["position"] = positions[start:stop]
            view["value"] = (positions[start:stop, None] + np.arange(3) + 10.0 * rail.rank).astype(np.float64)

        replies.fill_to(source, len(asked), fill)

    requests = rail.channels.open(np.int64, answer)
    positions = np.arange(asks_per_rank, dtype=np.int64)
    requests.send(positions % rail.size, positions)
    replies.fill_to((rail.rank + 1) % rail.size, 0, lambda view, start, stop: None)  # nothing to send
    rail.barrier()
    return answers, rail.finalize()


@pytest.mark.parametrize("seed, send_slots", [(0, 2), (1, 8), (2, 64)])
def test_replies_filled_in_send_buffers_arrive_exactly_once(seed, send_slots):
    size, asks = 3, 500  # 500 requests: several whole reply datagrams per owner, and partial ones
    results = World(size, seed, datagram_size=1024, send_pool_slots=send_slots, recv_pool_slots=4).run(
        requests_answered_by_fill, asks
    )
    for answers, report in results:
        positions = np.arange(asks)
        expected = positions[:, None] + np.arange(3) + 10.0 * (positions % size)[:, None]
        assert np.array_equal(answers, expected) and not any(report.values())


def requests_answered_in_pairs(rail, asks_per_rank: int, deferred: bool):
    """Each rank asks every rank (itself too) for values; the owners answer with fill_pair_to: positions in
    one channel's segment, values in the next one's, of the same datagram (from inside the request handler,
    or deferred until it returns).  The positions handler must run right before the values handler."""
    value_dtype = np.dtype([("value", np.float64, (3,))])
    answers = np.full((asks_per_rank, 3), -1.0)
    pending = []
    order = []

    def on_positions(source, positions):
        assert not pending, "two position segments in a row"
        pending.append(positions.copy())
        order.append("positions")

    def on_values(source, values):
        positions = pending.pop()
        assert len(positions) == len(values)
        assert (answers[positions] == -1.0).all(), "a value arrived twice"
        answers[positions] = values["value"]
        order.append("values")

    heads = rail.channels.open(np.int64, on_positions)
    bodies = rail.channels.open(value_dtype, on_values)

    def answer(source, positions):
        def fill(head, body, start, stop):
            head[:] = positions[start:stop]
            body["value"] = (positions[start:stop, None] + np.arange(3) + 10.0 * rail.rank).astype(np.float64)

        rail.channels.fill_pair_to(source, len(positions), heads, bodies, fill)

    def on_request(source, asked):
        if deferred:  # copies: the request's receive buffer is released once this handler returns
            rail.channels.after_handler(functools.partial(answer, source, asked.copy()), 2 * len(asked))
        else:
            answer(source, asked)

    requests = rail.channels.open(np.int64, on_request)
    positions = np.arange(asks_per_rank, dtype=np.int64)
    requests.send(positions % rail.size, positions)
    rail.channels.fill_pair_to((rail.rank + 1) % rail.size, 0, heads, bodies, lambda *views: None)  # nothing to send
    rail.barrier()
    return answers, order, rail.finalize()


@pytest.mark.parametrize("deferred", [False, True])
@pytest.mark.parametrize("seed, send_slots", [(0, 2), (1, 8), (2, 64)])
def test_paired_replies_arrive_exactly_once_positions_before_values(seed, send_slots, deferred, backend):
    size, asks = 3, 500  # 500 requests: several whole reply datagrams of 31 pairs per owner, and partial ones
    world = make_world(backend, size, seed, datagram_size=1024, send_pool_slots=send_slots, recv_pool_slots=4)
    for answers, order, report in world.run(requests_answered_in_pairs, asks, deferred):
        positions = np.arange(asks)
        expected = positions[:, None] + np.arange(3) + 10.0 * (positions % size)[:, None]
        assert np.array_equal(answers, expected) and not any(report.values())
        assert order == ["positions", "values"] * (len(order) // 2)


def test_a_pair_too_large_for_a_datagram_is_refused_naming_both_sizes():
    def program(rail):
        small = rail.channels.open(np.int64, lambda source, records: None)
        large = rail.channels.open(np.dtype((np.void, 100)), lambda source, records: None)
        with pytest.raises(MessageSizeError, match=r"\(8 bytes\) and one of .*\(100 bytes\).*128-byte datagram"):
            rail.channels.fill_pair_to((rail.rank + 1) % rail.size, 1, small, large, lambda *views: None)
        with pytest.raises(InvalidDestinationError, match="destination 2 is out of range"):
            rail.channels.fill_pair_to(2, 1, small, small, lambda *views: None)
        rail.barrier()
        return rail.finalize()

    for report in World(2, 0, datagram_size=128).run(program):
        assert not any(report.values())


def test_deferred_work_runs_after_the_handler_and_at_once_outside_handlers():
    def program(rail):
        events = []

        def handler(source, records):
            value = int(records[0])
            rail.channels.after_handler(lambda: events.append(("deferred", value)))
            events.append(("handler", value))

        channel = rail.channels.open(np.int64, handler)
        rail.channels.after_handler(lambda: events.append(("outside", rail.rank)))
        assert events == [("outside", rail.rank)]
        channel.send_to(rail.rank, np.array([7], dtype=np.int64))  # to itself: handled at once
        rail.barrier()
        return events, rail.finalize()

    for rank, (events, report) in enumerate(World(2, 0).run(program)):
        assert events == [("outside", rank), ("handler", 7), ("deferred", 7)] and not any(report.values())


# -- calls in batches -----------------------------------------------------------------------------------------------


def note(number: int, payload: object) -> None:
    """A call that records its number on the rank it runs on."""
    STATE.seen.append(number)


def calls_of_every_kind(rail, calls: int):
    """Calls to the next rank with small arguments (which wait in that rank's batch) interleaved with calls whose
    arguments go on their own (a numpy array, a long string)."""
    STATE.rail, STATE.seen = rail, []
    dest = (rail.rank + 1) % rail.size
    for number in range(calls):
        if number % 7 == 3:
            rail.call(dest, note, number, np.full(3, number))
        elif number % 11 == 5:
            rail.call(dest, note, number, "x" * 300)
        else:
            rail.call(dest, note, number, "w")
    sent = rail.channels.calls_sent
    rail.barrier()
    return STATE.seen, sent, rail.finalize()


@pytest.mark.parametrize("seed", [0, 3])
def test_calls_to_a_rank_run_once_each_and_in_the_order_they_were_made(seed, backend):
    """Batches split to fit 512-byte datagrams, calls sent on their own between them: every call runs once, and the
    calls of one rank to another run in the order they were made."""
    size, calls = 3, 1500
    results = make_world(backend, size, seed, datagram_size=512, send_pool_slots=4, recv_pool_slots=4).run(
        calls_of_every_kind, calls
    )
    for seen, sent, report in results:
        assert seen == list(range(calls)) and sent == calls
        assert not any(report.values())


def calls_left_waiting(rail):
    rail.call((rail.rank + 1) % rail.size, note, 1, "w")  # waits in its batch: no flush, no barrier
    return rail.finalize()


def test_calls_waiting_in_a_batch_at_finalize_are_reported_as_staged():
    with pytest.warns(UndeliveredWarning, match="1 record.s. and call.s. left staged"):
        reports = World(2, 0).run(calls_left_waiting)
    assert [report["staged"] for report in reports] == [1, 1]


def test_a_batch_naming_a_function_the_receiver_lacks_raises_naming_the_rank_and_the_fix():
    import pickle
    import sys
    import types

    module = types.ModuleType("mailrail_test_vanishing")
    exec("def vanishing(number):\n    pass\n", module.__dict__)
    sys.modules[module.__name__] = module
    try:
        batch = pickle.dumps([module.vanishing, (1,)], 5)  # as the sender pickles a batch
        del module.vanishing  # the receiver's module lacks it

        def receive(rail):
            rail.channels._run_calls(1, memoryview(batch))

        with pytest.raises(AttributeError, match=r"rank 0 received calls of a function it cannot find .*top level"):
            World(1, 0).run(receive)
    finally:
        del sys.modules[module.__name__]


def received_large(number: int, payload: object) -> None:
    STATE.seen.append((number, _checksum(payload)))


def _checksum(payload: object) -> float:
    if isinstance(payload, np.ndarray):
        return float(payload.sum())
    if isinstance(payload, bytes):
        return float(sum(payload))
    return float(sum(payload["values"]))


def large_payload(number: int, rank: int) -> object:
    kind = number % 3
    if kind == 0:
        return np.arange(1000 + 37 * number, dtype=np.float64) + rank
    if kind == 1:
        return bytes([(number + rank) % 256]) * (700 + 211 * number)
    return {"values": list(range(number * 50 + rank))}


def large_calls(rail, calls: int):
    """Calls larger than a 512-byte datagram (in pieces) between small ones, to the next rank; and asks whose
    answers are larger than a datagram."""
    STATE.rail, STATE.seen = rail, []
    dest = (rail.rank + 1) % rail.size
    for number in range(calls):
        rail.call(dest, received_large, number, large_payload(number, rail.rank))
        rail.call(dest, note_large, number)
    answers = mailrail.wait([rail.ask(dest, doubled_range, 500 + number) for number in range(5)])
    rail.barrier()
    return STATE.seen, [float(answer.sum()) for answer in answers], rail.finalize()


def note_large(number: int) -> None:
    STATE.seen.append((number, None))


def doubled_range(length: int) -> np.ndarray:
    return 2 * np.arange(length, dtype=np.float64)


@pytest.mark.parametrize("seed", [0, 2])
def test_calls_and_answers_larger_than_a_datagram_arrive_whole_once_and_in_order(seed, backend):
    size, calls = 3, 24
    results = make_world(backend, size, seed, datagram_size=512, send_pool_slots=4, recv_pool_slots=8).run(
        large_calls, calls
    )
    for rank, (seen, answers, report) in enumerate(results):
        sender = (rank - 1) % size
        expected = []
        for number in range(calls):
            expected += [(number, _checksum(large_payload(number, sender))), (number, None)]
        assert seen == expected
        assert answers == [float(2 * np.arange(500 + number).sum()) for number in range(5)]
        assert not any(report.values())


# -- calls sent after a collective ------------------------------------------------------------------------------------


def defined_later(origin: int, left: int) -> None:
    """A call made by a rank that had left *left* barriers: it must not run before this rank has left as many (a
    function a script defines after a barrier exists only then)."""
    if STATE.left < left:
        STATE.early.append((origin, left, STATE.left))
    STATE.ran += 1


def calls_after_a_barrier(rail, rounds: int):
    STATE.rail, STATE.left, STATE.early, STATE.ran = rail, 0, [], 0
    for _ in range(rounds):
        rail.barrier()
        STATE.left += 1
        for dest in range(rail.size):
            if dest != rail.rank:
                rail.call(dest, defined_later, rail.rank, STATE.left)
                rail.call(dest, defined_later, np.array([rail.rank]), np.int16(STATE.left))  # pickled alone
    rail.barrier()
    STATE.left += 1
    return STATE.early, STATE.ran, rail.finalize()


@pytest.mark.parametrize("seed", range(6))
def test_a_call_sent_after_a_barrier_waits_until_its_rank_has_left_the_barrier(seed, backend):
    """A rank that leaves a barrier first and calls on another rank still in it: the call runs once that rank has
    returned to its program (issue 52: a function it defines after the barrier did not exist yet)."""
    size, rounds = 4, 3
    for early, ran, report in make_world(backend, size, seed).run(calls_after_a_barrier, rounds):
        assert early == [] and ran == 2 * rounds * (size - 1)
        assert not any(report.values())
