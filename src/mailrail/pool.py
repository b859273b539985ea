"""Preallocated buffer pools: one slab per pool, handed out as fixed-size slots.

No MPI here.  A pool owns a single numpy slab allocated once; each slot is a
view created once at start-up, so handing a slot out costs no allocation.  Which
slots are free is the Endpoint's to know (:mod:`mailrail.protocol`): a pool is
memory and the map from a buffer back to its slot.
"""

from __future__ import annotations

import numpy as np

from .errors import BufferOwnershipError


class SlotPool:
    """``slots`` buffers of ``slot_size`` bytes carved from one contiguous slab."""

    __slots__ = ("slot_size", "slots", "slab", "views", "slot_by_id", "_base")

    def __init__(self, slots: int, slot_size: int) -> None:
        if slots < 1 or slot_size < 1:
            raise ValueError(f"a pool needs slots >= 1 and slot_size >= 1, got {slots} x {slot_size}")
        self.slots = slots
        self.slot_size = slot_size
        self.slab = np.zeros(slots * slot_size, dtype=np.uint8)
        self._base = self.slab.__array_interface__["data"][0]
        self.views = [self.slab[i * slot_size : (i + 1) * slot_size] for i in range(slots)]
        #: ``id(view) -> slot`` of the handed-out views (the compiled Endpoint looks slots up here too).
        self.slot_by_id = {id(v): i for i, v in enumerate(self.views)}

    def slot_of(self, buf: object) -> int | None:
        """The slot whose buffer is *buf* (the view handed out, or a contiguous view starting at a slot).

        Returns None when *buf* is not a slot of this pool; raises
        :class:`~mailrail.errors.BufferOwnershipError` for a non-contiguous view of a slot (``buf[::2]``):
        MPI would send the slot's first bytes, not the view's.
        """
        slot = self.slot_by_id.get(id(buf))
        if slot is not None and self.views[slot] is buf:
            return slot
        if not isinstance(buf, np.ndarray):
            return None
        offset = buf.__array_interface__["data"][0] - self._base
        if offset < 0 or offset % self.slot_size or offset >= self.slots * self.slot_size:
            return None
        if not buf.flags.c_contiguous:
            raise BufferOwnershipError(
                f"the buffer passed to send() is a non-contiguous view (strides {buf.strides}, shape {buf.shape}): "
                f"send the reserved buffer itself or a prefix slice buf[:n], with the payload written contiguously"
            )
        return int(offset // self.slot_size)

    @property
    def nbytes(self) -> int:
        return self.slab.nbytes
