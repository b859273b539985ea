"""Futures (``mailrail.futures``), the compiled class and the Python one alike: states, results, remote errors,
``mailrail.wait`` over one rail or several, and what each tells the garbage collector.  Asks on rails, where the
futures come from, are in channels/test_asks.py (over both classes too)."""

from __future__ import annotations

import gc

import pytest

import mailrail
from mailrail import futures
from mailrail.errors import RemoteError

COMPILED = futures._compiled_futures()
CLASSES = [
    pytest.param(futures.PythonFuture, id="python"),
    pytest.param(
        COMPILED.Future if COMPILED else None,
        id="compiled",
        marks=pytest.mark.skipif(COMPILED is None, reason="not built"),
    ),
]


class Rail:
    """What a future waits on: settles what it is asked to wait for, in turn, and counts the waits."""

    def __init__(self, answers: dict[int, object]) -> None:
        self.answers, self.waits = answers, []

    def wait_for(self, waiting: list) -> None:
        self.waits.append(len(waiting))
        for future in waiting:
            value = self.answers[future.dest]
            future._settle(value, failed=isinstance(value, RemoteError))


@pytest.mark.parametrize("cls", CLASSES)
def test_a_future_waits_once_then_keeps_its_value(cls):
    rail = Rail({1: 42})
    future = cls(rail, 1)
    assert not future.done() and repr(future) == "<Future of rank 1: waiting>"
    assert future.result() == 42 and future.result() == 42 and future.done()
    assert rail.waits == [1] and repr(future) == "<Future of rank 1: answered>"


@pytest.mark.parametrize("cls", CLASSES)
def test_a_failed_future_raises_its_remote_error_each_time(cls):
    error = RemoteError(3, "KeyError", "'x'", "Traceback ...")
    future = cls(Rail({3: error}), 3)
    for _ in range(2):
        with pytest.raises(RemoteError) as raised:
            future.result()
        assert raised.value is error and raised.value.rank == 3
    assert future.done() and repr(future) == "<Future of rank 3: failed>"


@pytest.mark.parametrize("cls", CLASSES)
def test_wait_waits_once_per_rail_for_what_is_not_there_and_returns_results_in_order(cls, monkeypatch):
    first, second = Rail({0: "a", 1: "b"}), Rail({0: "c"})
    settled = cls(first, 1)
    settled._settle("early", failed=False)
    made = [cls(first, 0), cls(second, 0), settled, cls(first, 1)]
    assert mailrail.wait(iter(made)) == ["a", "c", "early", "b"]
    assert first.waits == [2] and second.waits == [1]  # (the settled one not waited for again)
    assert mailrail.wait(made) == ["a", "c", "early", "b"] and first.waits == [2]


@pytest.mark.parametrize("cls", CLASSES)
def test_wait_raises_the_first_failure_and_the_others_keep_their_answers(cls):
    error = RemoteError(1, "ValueError", "no", "Traceback ...")
    rail = Rail({0: 5, 1: error})
    made = [cls(rail, 0), cls(rail, 1)]
    with pytest.raises(RemoteError) as raised:
        mailrail.wait(made)
    assert raised.value is error and made[0].result() == 5


def test_wait_refuses_what_is_not_a_future_naming_it():
    for cls in [futures.PythonFuture, *([COMPILED.Future] if COMPILED else [])]:
        with pytest.raises(TypeError, match=r"^mailrail.wait\(\) takes futures of rail.ask\(\), got 'x'$"):
            mailrail.wait([cls(Rail({}), 0), "x"])


def test_the_compiled_future_is_the_one_asks_return_and_the_collector_does_not_track_it():
    if COMPILED is None:
        assert futures.Future is futures.PythonFuture
        pytest.skip("not built")
    assert futures.Future is COMPILED.Future and futures.FUTURE_TYPES == (futures.PythonFuture, COMPILED.Future)
    assert not gc.is_tracked(COMPILED.Future(Rail({}), 0))
    assert gc.is_tracked(futures.PythonFuture(Rail({}), 0))
    assert (futures.WAITING, futures.ANSWERED, futures.FAILED) == (COMPILED.WAITING, COMPILED.ANSWERED, COMPILED.FAILED)
