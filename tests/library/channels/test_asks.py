"""rail.ask (:meth:`mailrail.channels.Channels.ask`) in a mailrail.testing World, on its model and on MailRail's
real stack in each implementation and mode: answers, waiting, remote errors, asks at finalize, bad input.  The MPI
job is in test_channels_mpi.py."""

from __future__ import annotations

import threading

import numpy as np
import pytest

import mailrail
from mailrail.errors import InvalidDestinationError, MailRailError, RemoteError, UndeliveredWarning
from mailrail.testing import World
from worlds import BACKENDS, make_world

STATE = threading.local()


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def square(number: int) -> int:
    return number * number


def doubled(values: np.ndarray) -> np.ndarray:
    return values * 2


def refuse(number: int) -> None:
    raise ValueError(f"no answer for {number}")


def asks_of_every_kind(rail, asks: int):
    """Asks to every rank (this one too), small ones batched and ones with a numpy array on their own; half waited
    for with mailrail.wait, half completed by the barrier."""
    numbers = [(rail.rank * 100_000 + i, i % rail.size) for i in range(asks)]
    futures = [rail.ask(dest, square, number) for number, dest in numbers]
    arrays = [rail.ask(dest, doubled, np.arange(3) + number) for number, dest in numbers[:50]]
    answers = mailrail.wait(futures[: asks // 2])
    rail.barrier()
    assert all(future.done() for future in futures + arrays)
    rest = [future.result() for future in futures[asks // 2 :]]
    return answers + rest, [future.result().tolist() for future in arrays], rail.finalize()


@pytest.mark.parametrize("seed", [0, 4])
def test_every_ask_is_answered_once_by_wait_or_by_the_barrier(seed, backend):
    size, asks = 3, 2000
    results = make_world(backend, size, seed, datagram_size=1024, send_pool_slots=4, recv_pool_slots=8).run(
        asks_of_every_kind, asks
    )
    for rank, (answers, arrays, report) in enumerate(results):
        assert answers == [(rank * 100_000 + i) ** 2 for i in range(asks)]
        assert arrays == [[2 * (rank * 100_000 + i + k) for k in range(3)] for i in range(50)]
        assert not any(report.values())


def asks_that_fail(rail):
    future = rail.ask((rail.rank + 1) % rail.size, refuse, rail.rank)
    with pytest.raises(RemoteError) as raised:
        future.result()
    after = rail.ask((rail.rank + 1) % rail.size, square, 7).result()  # the job goes on
    rail.barrier()
    return str(raised.value), raised.value.rank, raised.value.kind, after, rail.finalize()


def test_an_exception_on_the_answering_rank_is_raised_by_result_with_its_rank_and_traceback(backend):
    for rank, (message, where, kind, after, report) in enumerate(make_world(backend, 2).run(asks_that_fail)):
        assert where == (rank + 1) % 2 and kind == "ValueError" and after == 49
        assert message.startswith(f"rank {where} raised ValueError: no answer for {rank}")
        assert f"the traceback on rank {where}" in message and "in refuse" in message
        assert not any(report.values())


def waits_inside_a_handler(number: int) -> None:
    rail = STATE.rail
    rail.ask(0, square, number).result()


def asks_from_a_call(rail):
    STATE.rail = rail
    if rail.rank == 0:
        rail.call(1, waits_inside_a_handler, 3)
    rail.barrier()


def test_waiting_for_an_answer_inside_a_handler_is_refused_saying_why():
    with pytest.raises(MailRailError, match="inside a handler: answers arrive while this rank's handlers run"):
        World(2, 0).run(asks_from_a_call)


def asks_inside_handlers(number: int) -> None:
    """An ask made inside a handler (allowed): its answer arrives for the barrier to complete."""
    STATE.inner.append(STATE.rail.ask(0, square, number))


def asks_left_unanswered(rail):
    rail.ask((rail.rank + 1) % rail.size, square, 2)  # never waited for, no barrier
    return rail.finalize()


def test_asks_never_answered_at_finalize_are_reported():
    with pytest.warns(UndeliveredWarning, match="1 ask.s. never answered"):
        reports = World(2, 0).run(asks_left_unanswered)
    assert [report["unanswered"] for report in reports] == [1, 1]


def asks_made_inside_calls(rail):
    STATE.rail, STATE.inner = rail, []
    rail.call((rail.rank + 1) % rail.size, asks_inside_handlers, rail.rank + 10)
    rail.barrier()
    return [future.result() for future in STATE.inner], rail.finalize()


def test_asks_made_inside_handlers_are_completed_by_the_barrier(backend):
    for rank, (answers, report) in enumerate(make_world(backend, 2).run(asks_made_inside_calls)):
        assert answers == [((rank + 1) % 2 + 10) ** 2] and not any(report.values())


def bad_asks(rail):
    import threading as locks

    outcomes = {}
    for case, attempt in {
        "dest": lambda: rail.ask(5, square, 1),
        "lambda": lambda: rail.ask(0, lambda: 1),
        "unpicklable": lambda: rail.ask(0, square, locks.Lock()),
        "not_futures": lambda: mailrail.wait([3]),
    }.items():
        try:
            attempt()
        except Exception as error:
            outcomes[case] = (type(error), str(error))
    rail.barrier()
    return outcomes, rail.finalize()


def test_bad_asks_are_refused_before_anything_is_sent():
    (outcomes, report), _ = World(2, 0).run(bad_asks)
    assert outcomes["dest"][0] is InvalidDestinationError and "5" in outcomes["dest"][1]
    assert outcomes["lambda"][0] is TypeError and "lambda" in outcomes["lambda"][1]
    assert outcomes["unpicklable"][0] is TypeError and outcomes["unpicklable"][1].startswith("rail.ask(")
    assert "argument 0 (lock" in outcomes["unpicklable"][1]
    assert outcomes["not_futures"] == (TypeError, "mailrail.wait() takes futures of rail.ask(), got 3")
    assert not any(report.values())
