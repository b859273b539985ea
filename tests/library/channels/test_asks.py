"""rail.ask (:meth:`mailrail.channels.Channels.ask`) in a mailrail.testing World, on its model and on MailRail's
real stack in each implementation and mode: answers, waiting, remote errors, asks at finalize, bad input.  The MPI
job is in test_channels_mpi.py."""

from __future__ import annotations

import threading

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import mailrail
from mailrail import channels, futures
from mailrail.errors import InvalidDestinationError, MailRailError, RemoteError, UndeliveredWarning
from mailrail.testing import World
from worlds import BACKENDS, make_world

STATE = threading.local()


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture(autouse=True, params=["compiled", "python"])
def future_class(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> type:
    """Every test over both future classes (mailrail.futures): the compiled one where built, and the Python one."""
    if request.param == "python":
        monkeypatch.setattr(channels, "Future", futures.PythonFuture)
    elif futures._compiled_futures() is None:
        pytest.skip("not built")
    return channels.Future


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


def run_in_order(origin: int, number: int) -> int:
    STATE.order.append(number)
    return number + 1


def noted(origin: int, number: int) -> None:
    STATE.order.append(number)


def calls_and_asks_in_turn(rail):
    """Calls and asks to one rank, interleaved in runs of various lengths, from both ranks: each rank's run them in
    the order they were made; a run of asks is a group in the batch."""
    STATE.order = []
    peer = 1 - rail.rank
    kinds = np.random.default_rng(rail.rank).integers(0, 3, 3000)  # 0: call; 1, 2: ask (runs of asks are longer)
    futures_made = []
    for number, kind in enumerate(kinds.tolist()):
        if kind:
            futures_made.append((number, rail.ask(peer, run_in_order, rail.rank, number)))
        else:
            rail.call(peer, noted, rail.rank, number)
    answers = [(number, future.result()) for number, future in futures_made]
    rail.barrier()
    channels_of = rail.channels
    return STATE.order, answers, channels_of.calls_sent, channels_of.calls_received, rail.finalize()


def test_calls_and_asks_to_one_rank_run_in_the_order_they_were_made(backend):
    results = make_world(backend, 2, 3, datagram_size=1024, send_pool_slots=4, recv_pool_slots=8).run(
        calls_and_asks_in_turn
    )
    for order, answers, _, _, report in results:
        assert order == list(range(3000))  # (the peer's numbers, in its order)
        assert all(answer == number + 1 for number, answer in answers) and not any(report.values())
    # every call, ask and answer counted once on each side
    assert sum(result[2] for result in results) == sum(result[3] for result in results) > 2 * 3000


def echo(text: str) -> str:
    return text[::-1]


def asks_with_long_texts(rail):
    texts = [f"{i:05d}" + chr(0x4E00 + i % 500) * (40 + i % 40) for i in range(600)]  # 126-360 bytes of UTF-8
    answers = mailrail.wait([rail.ask(1 - rail.rank, echo, text) for text in texts])
    rail.barrier()
    return answers == [text[::-1] for text in texts], rail.finalize()


def test_groups_of_asks_and_answers_larger_than_a_datagram_are_split(backend):
    for right, report in make_world(backend, 2, 1, datagram_size=512, send_pool_slots=4).run(asks_with_long_texts):
        assert right and not any(report.values())


def flattened(batch: list) -> list:
    """A batch's calls, asks and answers, one entry each, in order."""
    entries = []
    for at in range(0, len(batch), 2):
        marker, items = batch[at], batch[at + 1]
        width = channels._GROUP_WIDTHS.get(marker)
        if width is None:
            entries.append((marker, items))
        else:
            entries += [(marker, tuple(items[i : i + width])) for i in range(0, len(items), width)]
    return entries


@given(runs=st.lists(st.tuples(st.sampled_from(["call", "ask", "answer"]), st.integers(1, 6)), min_size=1, max_size=8))
def test_a_batch_in_halves_keeps_its_calls_in_order_and_counts_them(runs):
    batch, number = [], 0
    for kind, length in runs:
        if kind == "call":
            for _ in range(length):
                batch += [square, (number,)]
                number += 1
        else:
            marker, width = (channels._ask, 3) if kind == "ask" else (channels._answer, 2)
            batch += [marker, [number + i // width if i % width == 0 else "x" for i in range(length * width)]]
            number += length
    calls, items = channels._calls_and_items(batch)
    assert calls == number == len(flattened(batch))
    assert items == len(batch) + sum(len(batch[at + 1]) for at in range(0, len(batch), 2) if batch[at] is not square)
    if calls > 1:
        first, second = channels._halves(batch)
        assert flattened(first) + flattened(second) == flattened(batch)
        assert channels._calls_and_items(first)[0] >= 1 and channels._calls_and_items(second)[0] >= 1
