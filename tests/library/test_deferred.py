"""DeferredSends: per-destination FIFO queues, in ready-set mode and polling mode."""

from __future__ import annotations

import pytest

from mailrail.deferred import DeferredSends

BOTH_MODES = pytest.mark.parametrize("poll_window", [None, 4], ids=["ready-set", "polling"])


def drain_all(deferred: DeferredSends, dest: int) -> list[tuple[int, int]]:
    items = []
    while deferred.has_queue(dest):
        items.append(deferred.pop(dest))
    return items


# -- common behaviour --------------------------------------------------------------


@BOTH_MODES
def test_empty(poll_window):
    deferred = DeferredSends(poll_window=poll_window)
    assert len(deferred) == 0
    assert deferred.total == 0
    assert not deferred.has_queue(0)
    assert deferred.queued_for(0) == 0
    assert deferred.destinations() == []
    assert list(deferred.candidates()) == []


@BOTH_MODES
def test_fifo_per_destination(poll_window):
    deferred = DeferredSends(poll_window=poll_window)
    deferred.push(1, 10, 100)
    deferred.push(2, 20, 200)
    deferred.push(1, 11, 101)
    deferred.push(2, 21, 201)
    deferred.push(1, 12, 102)
    assert deferred.queued_for(1) == 3
    assert deferred.queued_for(2) == 2
    assert len(deferred) == 5
    assert drain_all(deferred, 1) == [(10, 100), (11, 101), (12, 102)]
    assert drain_all(deferred, 2) == [(20, 200), (21, 201)]
    assert len(deferred) == 0


@BOTH_MODES
def test_emptied_destination_disappears(poll_window):
    deferred = DeferredSends(poll_window=poll_window)
    deferred.push(3, 0, 8)
    assert deferred.has_queue(3)
    assert deferred.destinations() == [3]
    deferred.pop(3)
    assert not deferred.has_queue(3)
    assert deferred.queued_for(3) == 0
    assert deferred.destinations() == []


@BOTH_MODES
def test_high_water_mark_and_deferred_count(poll_window):
    deferred = DeferredSends(poll_window=poll_window)
    for slot in range(3):
        deferred.push(0, slot, 1)
    deferred.pop(0)
    deferred.pop(0)
    deferred.push(1, 5, 1)
    assert deferred.total == 2
    assert deferred.high_water == 3
    assert deferred.deferred_count == 4
    for slot in range(6, 9):
        deferred.push(1, slot, 1)
    assert deferred.high_water == 5


@BOTH_MODES
def test_clear_drops_everything_and_reports_it(poll_window):
    deferred = DeferredSends(poll_window=poll_window)
    deferred.push(1, 10, 100)
    deferred.push(2, 20, 200)
    deferred.push(1, 11, 101)
    deferred.mark_ready(1)
    dropped = deferred.clear()
    assert sorted(dropped) == [(1, 10, 100), (1, 11, 101), (2, 20, 200)]
    assert [d for d in dropped if d[0] == 1] == [(1, 10, 100), (1, 11, 101)]  # FIFO kept
    assert len(deferred) == 0
    assert deferred.destinations() == []
    assert list(deferred.candidates()) == []
    # Usable afterwards.
    deferred.push(2, 30, 300)
    deferred.mark_ready(2)
    assert list(deferred.candidates()) == [2]
    assert deferred.pop(2) == (30, 300)


# -- ready-set (exact credit events) mode -------------------------------------------


def test_ready_mode_only_marked_destinations_are_candidates():
    deferred = DeferredSends()
    deferred.push(1, 0, 1)
    deferred.push(2, 1, 1)
    deferred.push(3, 2, 1)
    assert list(deferred.candidates()) == []
    deferred.mark_ready(3)
    deferred.mark_ready(1)
    assert list(deferred.candidates()) == [3, 1]


def test_ready_mode_mark_ready_ignores_destinations_without_queue():
    deferred = DeferredSends()
    deferred.mark_ready(5)
    deferred.push(1, 0, 1)
    assert list(deferred.candidates()) == []
    deferred.push(5, 1, 1)  # queued after the mark: the old mark must not count
    assert list(deferred.candidates()) == []


def test_ready_mode_candidates_yields_each_destination_once_per_call():
    deferred = DeferredSends()
    deferred.push(1, 0, 1)
    deferred.push(1, 1, 1)
    deferred.push(2, 2, 1)
    for _ in range(3):
        deferred.mark_ready(1)
    deferred.mark_ready(2)
    deferred.mark_ready(1)
    assert list(deferred.candidates()) == [1, 2]
    assert list(deferred.candidates()) == []  # marks are consumed


def test_ready_mode_mark_during_iteration_counts_for_the_next_call():
    deferred = DeferredSends()
    deferred.push(1, 0, 1)
    deferred.push(1, 1, 1)
    deferred.mark_ready(1)
    seen = []
    for dest in deferred.candidates():
        seen.append(dest)
        deferred.pop(dest)
        deferred.mark_ready(dest)  # still has a queue: worth another look next time
    assert seen == [1]
    assert list(deferred.candidates()) == [1]


def test_ready_mode_emptied_destination_loses_its_mark():
    deferred = DeferredSends()
    deferred.push(1, 0, 1)
    deferred.mark_ready(1)
    deferred.pop(1)
    assert list(deferred.candidates()) == []


def test_ready_mode_requeue_after_empty_needs_a_new_mark():
    deferred = DeferredSends()
    deferred.push(4, 0, 1)
    deferred.mark_ready(4)
    deferred.pop(4)
    deferred.push(4, 1, 2)
    assert list(deferred.candidates()) == []
    deferred.mark_ready(4)
    assert list(deferred.candidates()) == [4]
    assert deferred.pop(4) == (1, 2)


# -- polling (silent credit changes) mode -------------------------------------------


def test_polling_mode_visits_queued_destinations_without_marks():
    deferred = DeferredSends(poll_window=8)
    deferred.push(1, 0, 1)
    deferred.push(2, 1, 1)
    assert sorted(deferred.candidates()) == [1, 2]


def test_polling_mode_candidates_yields_each_destination_once_per_call():
    deferred = DeferredSends(poll_window=10)
    for slot in range(5):
        deferred.push(7, slot, 1)
    deferred.push(8, 9, 1)
    visited = list(deferred.candidates())
    assert sorted(visited) == [7, 8]


def test_polling_window_bounds_and_rotates_the_visits():
    deferred = DeferredSends(poll_window=2)
    for dest in range(5):
        deferred.push(dest, dest, 1)
    first = list(deferred.candidates())
    second = list(deferred.candidates())
    third = list(deferred.candidates())
    assert len(first) == len(second) == 2
    assert len(third) == 2
    # Rotation: every queued destination is visited within ceil(5/2) calls.
    assert set(first + second + third) == {0, 1, 2, 3, 4}
    assert first == [0, 1] and second == [2, 3] and third == [4, 0]


def test_polling_mode_mark_ready_is_harmless():
    deferred = DeferredSends(poll_window=3)
    deferred.push(1, 0, 1)
    deferred.mark_ready(1)
    deferred.mark_ready(9)
    assert list(deferred.candidates()) == [1]


def test_polling_mode_drops_emptied_destinations_lazily():
    deferred = DeferredSends(poll_window=10)
    deferred.push(1, 0, 1)
    deferred.push(2, 1, 1)
    deferred.pop(1)  # emptied: still in the rotation until the next visit
    assert list(deferred.candidates()) == [2]
    assert list(deferred._rotation) == [2]
    assert deferred._in_rotation == {2}


def test_polling_mode_requeue_after_empty_is_visited_exactly_once():
    deferred = DeferredSends(poll_window=10)
    deferred.push(1, 0, 1)
    deferred.pop(1)
    deferred.push(1, 1, 2)  # re-queued before the lazy removal happened
    deferred.push(1, 2, 3)
    assert list(deferred.candidates()) == [1]
    assert list(deferred._rotation).count(1) == 1
    assert deferred.pop(1) == (1, 2)
    assert deferred.pop(1) == (2, 3)


def test_polling_mode_requeue_after_lazy_removal_is_visited_again():
    deferred = DeferredSends(poll_window=10)
    deferred.push(1, 0, 1)
    deferred.pop(1)
    assert list(deferred.candidates()) == []  # lazy removal happens here
    deferred.push(1, 1, 2)
    assert list(deferred.candidates()) == [1]
