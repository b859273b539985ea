"""The rails' record of collective calls and rank 0's judge of them (mailrail.collectives: no MPI here)."""

from __future__ import annotations

import os
import sys

import pytest

from mailrail import collectives
from mailrail.collectives import BARRIER, WITH_BLOCK_END, Call, CollectiveCalls, Judge, call_site, collective
from mailrail.errors import MailRailError


def here() -> int:
    """The line of the caller."""
    return sys._getframe(1).f_lineno


def test_a_call_travels_as_bytes_and_back():
    call = Call(70_000, BARRIER, "CountingSet.barrier()", "dir/wc.py:12")
    assert Call.decode(bytearray(call.encode())) == call
    assert call.described == "CountingSet.barrier() at dir/wc.py:12"


def test_only_the_outermost_entry_is_a_call_and_its_site_is_the_program_s_line():
    calls = CollectiveCalls()
    line = here() + 1
    outer = calls.enter("CountingSet.total()")
    assert outer == Call(1, "CountingSet.total()", "CountingSet.total()", f"{os.path.relpath(__file__)}:{line}")
    assert calls.enter("barrier()", BARRIER) is None  # what total() runs inside is part of it
    assert calls.enter("Channels.allreduce_sum()") is None
    calls.leave()
    calls.leave()
    assert calls.inside and calls.current is outer
    calls.leave()
    assert not calls.inside
    again = calls.enter("barrier()", BARRIER)
    assert again is not None and (again.number, again.key, again.name) == (2, BARRIER, "barrier()")


class _Rail:
    """What the decorator needs of a rail: its channels' handler check and the enter/leave pair (its frames count
    as MailRail's, see the fixture)."""

    def __init__(self) -> None:
        self._calls = CollectiveCalls()
        self.entered: list[Call] = []
        self.channels = self
        self.in_handler = False

    def check_collective(self, what: str) -> None:
        if self.in_handler:
            raise MailRailError(f"{what} called from inside a handler")

    def _enter_collective(self, name: str, key: str | None = None) -> None:
        call = self._calls.enter(name, key)
        if call is not None:
            self.entered.append(call)

    def _leave_collective(self) -> None:
        self._calls.leave()


class Sketch:
    kind = "Sketch"

    @collective
    def __init__(self, rail: _Rail) -> None:
        self.rail = rail
        self.barrier()

    @collective
    def barrier(self) -> None:
        pass

    @collective
    def total(self) -> int:
        self.barrier()
        return 3


@pytest.fixture
def rail_frames_are_mailrail_s(monkeypatch):
    """The sites skip _Rail's frames, as they skip a real rail's."""
    monkeypatch.setitem(collectives._internal_code, _Rail._enter_collective.__code__, True)


def test_a_decorated_method_is_one_call_named_as_written_with_its_barrier_inside(rail_frames_are_mailrail_s):
    rail = _Rail()
    line = here() + 1
    sketch = Sketch(rail)
    assert sketch.total() == 3
    sketch.barrier()
    site = os.path.relpath(__file__)
    assert [(call.name, call.key) for call in rail.entered] == [
        ("Sketch()", "Sketch()"),
        ("Sketch.total()", "Sketch.total()"),
        ("Sketch.barrier()", BARRIER),
    ]
    assert [call.site for call in rail.entered] == [f"{site}:{line}", f"{site}:{line + 1}", f"{site}:{line + 2}"]
    assert not rail._calls.inside


def test_a_constructor_may_take_its_rail_by_keyword():
    rail = _Rail()
    Sketch(rail=rail)
    assert [call.name for call in rail.entered] == ["Sketch()"]


def test_a_collective_from_a_handler_is_refused_before_it_is_entered():
    rail = _Rail()
    sketch = Sketch(rail)
    rail.in_handler = True
    with pytest.raises(MailRailError, match=r"Sketch.total\(\) called from inside a handler"):
        sketch.total()
    assert rail._calls.number == 1 and not rail._calls.inside


def test_the_site_of_a_call_from_outside_the_working_directory_is_its_whole_path(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert call_site() == f"{__file__}:{here()}"


def _call(number: int, name: str, rank_line: int = 1, key: str | None = None) -> Call:
    return Call(number, key or name, name, f"wc.py:{rank_line}")


def test_the_judge_names_each_group_of_ranks_and_their_call_once_they_differ():
    judge = Judge(4)
    for rank in range(4):
        judge.note(rank, _call(1, "CountingSet()", 5))
    assert judge.complete(1) and judge.verdict is None
    judge.settle(1)
    judge.note(0, _call(2, "CountingSet.total()", 12))
    judge.note(2, _call(2, "CountingSet.total()", 12))
    assert judge.verdict is None and judge.missing(2) == [1, 3]
    judge.note(1, _call(2, "finalize()", 7))
    assert judge.mismatch == 2
    assert judge.verdict == (
        "ranks called different collectives (collective #2 of this rail): ranks 0, 2 called CountingSet.total() at "
        "wc.py:12; rank 1 called finalize() at wc.py:7; rank 3 has not come yet. Every rank calls the rail's "
        "collectives (barrier(), finalize(), the containers' collectives and constructors) in the same order"
    )
    judge.note(3, _call(2, "finalize()", 7))  # the wording takes the calls that came since
    assert "rank 0, 2 called" not in judge.verdict and "ranks 1, 3 called finalize() at wc.py:7." in judge.verdict


def test_every_spelling_of_a_barrier_agrees_and_ranks_ahead_are_kept():
    judge = Judge(3)
    judge.note(1, _call(1, "barrier()", 3, BARRIER))
    judge.note(1, _call(2, "Map.size()", 4))  # rank 1 is one call ahead of the others: kept until they come
    judge.note(0, _call(1, "CountingSet.barrier()", 3, BARRIER))
    judge.note(2, _call(1, "Coalescer.barrier()", 3, BARRIER))
    assert judge.verdict is None and judge.complete(1)
    judge.settle(1)
    assert judge.calls(2) == {1: _call(2, "Map.size()", 4)}
    judge.note(0, _call(2, "Map.get()", 9))
    assert judge.mismatch == 2
    assert "rank 0 called Map.get() at wc.py:9; rank 1 called Map.size() at wc.py:4" in str(judge.verdict)


def test_the_judge_says_where_awaited_ranks_were_last():
    judge = Judge(3)
    judge.note(0, _call(1, "CountingSet()", 5))
    judge.note(1, _call(1, "CountingSet()", 5))
    judge.note(0, _call(2, "CountingSet.total()", 12))
    assert judge.missing(2) == [1, 2]
    assert judge.whereabouts([1, 2]) == (
        "rank 1 last entered collective #1, CountingSet() at wc.py:5; rank 2 has entered no collective of this rail yet"
    )


def test_the_site_of_finalize_at_the_end_of_a_with_block_names_the_block():
    assert WITH_BLOCK_END.format("wc.py:3") == "the end of the `with` block opened at wc.py:3"
