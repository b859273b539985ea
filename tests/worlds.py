"""Worlds for tests: a mailrail.testing World on its model or on MailRail's real stack in each implementation and
flow-control mode (the backends the channel and world tests run on)."""

from __future__ import annotations

import pytest

from mailrail.flow import MODE_NAMES, flow_mode
from mailrail.testing import World
from mailrail.testing.stack import IMPLEMENTATIONS, unavailable

#: What moves a World's messages: its model, or MailRail's real stack in an implementation and flow-control mode.
BACKENDS = ("model", *(f"{implementation}/{mode}" for implementation in IMPLEMENTATIONS for mode in MODE_NAMES))


def make_world(backend: str, size: int = 2, seed: int = 0, **knobs) -> World:
    """A World on *backend*; in an implementation, with at least the receive slots the mode needs for *size* ranks
    (a test's tiny pools are the model's; the real credit modes refuse fewer, as MailRail does)."""
    if backend == "model":
        return World(size, seed, **knobs)
    implementation, mode = backend.split("/")
    reason = unavailable(implementation)
    if reason is not None:
        pytest.skip(reason)
    # Two credits per sender at least: with one, a handler that holds its message while it forwards others
    # (as hops() does) waits for the credit its own message holds, a deadlock on MPI as here.
    least = flow_mode(mode).least_recv_slots(ranks=size, nodes=1)
    knobs["recv_pool_slots"] = max(knobs.get("recv_pool_slots", 64), 2 * least)
    return World(size, seed, implementation=implementation, flow_control=mode, **knobs)
