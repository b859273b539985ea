"""SlotPool: fixed-size slots carved from one preallocated slab (which are free is the Endpoint's to know)."""

from __future__ import annotations

import numpy as np
import pytest

from mailrail.pool import SlotPool


def test_geometry():
    pool = SlotPool(4, 16)
    assert pool.slots == 4
    assert pool.slot_size == 16
    assert pool.nbytes == 64
    assert len(pool.views) == 4
    assert all(v.nbytes == 16 and v.dtype == np.uint8 for v in pool.views)


@pytest.mark.parametrize("slots, slot_size", [(0, 8), (4, 0), (-1, 8), (4, -8)])
def test_empty_pool_is_rejected(slots, slot_size):
    with pytest.raises(ValueError):
        SlotPool(slots, slot_size)


def test_views_are_disjoint_and_cover_the_slab():
    pool = SlotPool(5, 7)
    for i, view in enumerate(pool.views):
        view[:] = i + 1
    for i, view in enumerate(pool.views):
        assert np.all(view == i + 1)
    assert pool.slab.tolist() == [i + 1 for i in range(5) for _ in range(7)]
    for i in range(5):
        for j in range(i + 1, 5):
            assert not np.shares_memory(pool.views[i], pool.views[j])


def test_single_slab_allocation_shared_by_all_views():
    pool = SlotPool(4, 32)
    assert pool.slab.nbytes == 4 * 32
    for view in pool.views:
        assert view.base is pool.slab
        assert np.shares_memory(view, pool.slab)


def test_slot_by_id_maps_each_handed_out_view_to_its_slot():
    """The compiled Endpoint's fast path finds a reserved view's slot by its id (then checks identity)."""
    pool = SlotPool(3, 8)
    assert pool.slot_by_id == {id(view): slot for slot, view in enumerate(pool.views)}
    assert len(pool.slot_by_id) == 3


def test_slot_of_the_handed_out_view():
    pool = SlotPool(4, 16)
    for i, view in enumerate(pool.views):
        assert pool.slot_of(view) == i


def test_slot_of_a_numpy_view_starting_at_a_slot_boundary():
    pool = SlotPool(4, 16)
    assert pool.slot_of(pool.slab[32:48]) == 2
    assert pool.slot_of(pool.slab[48:52]) == 3  # shorter than a slot, still at its start
    assert pool.slot_of(pool.views[1][:4]) == 1  # a slice of the slot view
    assert pool.slot_of(pool.views[1].view(np.uint32)) == 1  # another dtype, same memory


def test_slot_of_misaligned_view_is_none():
    pool = SlotPool(4, 16)
    assert pool.slot_of(pool.slab[1:17]) is None
    assert pool.slot_of(pool.views[2][3:]) is None


def test_slot_of_foreign_array_is_none():
    pool = SlotPool(4, 16)
    other = SlotPool(4, 16)
    assert pool.slot_of(np.zeros(16, dtype=np.uint8)) is None
    assert pool.slot_of(pool.views[0].copy()) is None
    assert pool.slot_of(other.views[0]) is None
    assert other.slot_of(pool.views[3]) is None


@pytest.mark.parametrize("not_an_array", [None, 0, b"\0" * 16, bytearray(16), "slot", [0] * 16])
def test_slot_of_non_array_is_none(not_an_array):
    assert SlotPool(4, 16).slot_of(not_an_array) is None


def test_slot_of_memoryview_of_a_slot_is_none():
    pool = SlotPool(2, 8)
    assert pool.slot_of(memoryview(pool.views[0])) is None
