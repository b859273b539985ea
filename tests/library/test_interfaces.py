"""Every rail keeps the one API a program is written against: :class:`mailrail.Rail` (and
:class:`mailrail.DatagramRail`), satisfied by :class:`~mailrail.rail.MailRail` and by :mod:`mailrail.testing`'s
rails alike.  A public method added to one rail and not to the protocol (or a signature that drifts) fails here,
so a program unit-tested in a World runs unchanged under mpiexec."""

from __future__ import annotations

import inspect
from typing import Any

import numpy as np
import pytest

from mailrail import DatagramRail, Rail
from mailrail.containers import CountingSet
from mailrail.rail import MailRail
from mailrail.testing import World
from mailrail.testing import world as testing_world

RAILS = [MailRail, testing_world.Rail, testing_world.TransportRail]

#: The protocol's data attributes: set on each instance, so checked on instances.
ATTRIBUTES = ("rank", "size", "datagram_size", "send_pool_slots")


def members(protocol: type) -> set[str]:
    """The methods and properties a protocol declares, its bases' included (not its data attributes)."""
    names: set[str] = set()
    for klass in protocol.__mro__:
        if klass in (object,) or klass.__module__ == "typing":
            continue
        names |= {
            name for name, value in vars(klass).items() if not name.startswith("_") and callable_or_property(value)
        }
    return names


def callable_or_property(value: Any) -> bool:
    return isinstance(value, property) or inspect.isfunction(value)


def shape(function: Any) -> list[tuple[str, Any, Any]]:
    """A signature without its annotations: the names, kinds and defaults a caller relies on."""
    return [(p.name, p.kind, p.default) for p in inspect.signature(function).parameters.values()]


def test_the_protocols_declare_the_application_api():
    assert members(DatagramRail) == {
        "comm",
        "reserve_send_buffer",
        "send",
        "receive",
        "release_receive_buffer",
        "pending_sends",
        "barrier",
        "finalize",
        "stats",
    }
    assert members(Rail) == members(DatagramRail) | {"channels", "call", "ask"}


@pytest.mark.parametrize("rail_class", RAILS, ids=lambda c: f"{c.__module__}.{c.__qualname__}")
def test_a_rail_has_exactly_the_protocols_public_methods(rail_class):
    public = {name for name in dir(rail_class) if not name.startswith("_")}
    assert public == members(Rail), f"{rail_class.__qualname__}: add {public - members(Rail)} to the protocol"


@pytest.mark.parametrize("rail_class", RAILS, ids=lambda c: f"{c.__module__}.{c.__qualname__}")
@pytest.mark.parametrize("name", sorted(members(Rail) | {"__enter__", "__exit__"}))
def test_a_rail_s_methods_take_what_the_protocol_s_take(rail_class, name):
    declared = getattr(Rail, name)
    offered = getattr(rail_class, name)
    if isinstance(declared, property):
        assert isinstance(offered, property), f"{rail_class.__qualname__}.{name} is no property"
    else:
        assert shape(offered) == shape(declared), f"{rail_class.__qualname__}.{name}"


@pytest.mark.parametrize("implementation", [None, "python"])
def test_the_testing_rails_are_rails(implementation):
    def program(rail: Rail) -> list[bool]:
        return [isinstance(rail, Rail), isinstance(rail, DatagramRail), *(hasattr(rail, a) for a in ATTRIBUTES)]

    for outcome in World(2, seed=1, implementation=implementation).run(program):
        assert all(outcome)


def test_mailrail_is_a_rail_that_containers_take():
    from mailrail._mpi import MPI

    with MailRail(MPI.COMM_SELF, datagram_size=256, send_pool_slots=4, recv_pool_slots=4) as rail:
        assert isinstance(rail, Rail) and isinstance(rail, DatagramRail)
        assert all(hasattr(rail, attribute) for attribute in ATTRIBUTES)
        counts = CountingSet(rail, np.uint64)
        counts.add(np.array([3, 3, 5], dtype=np.uint64))
        assert counts.total() == 3
