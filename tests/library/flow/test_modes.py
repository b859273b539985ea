"""The table of flow-control modes: every entry through every path that builds from it.

The rail's own paths take every mode from the table too: the fake-MPI transport tests, the model's and the
plan's tests, and the real ``mpiexec`` job below, all parametrized over :data:`MODE_NAMES`, so a new entry
is run everywhere without a test being edited.
"""

from __future__ import annotations

import numpy as np
import pytest

from helpers import assert_exactly_once, mpirun
from mailrail.config import FLOW_CONTROL_MODES
from mailrail.errors import ConfigError
from mailrail.flow import MODE_NAMES, MODES, FlowParts, NodeLayout, flow_mode, memory_plan
from mailrail.flow.modes import FULL
from mailrail.flow.node import LocalCounters
from mailrail.transport.compiled import unavailable_reason

RANKS, PER_NODE = 8, 4
IMPLEMENTATIONS = ["python", "compiled"]


def test_the_knob_offers_exactly_the_table():
    assert FLOW_CONTROL_MODES == MODE_NAMES == tuple(MODES)
    assert MODE_NAMES[0] == "none" and not MODES["none"].has_credits


def test_an_unknown_mode_is_refused_naming_the_valid_ones():
    with pytest.raises(ConfigError, match=r"no flow-control mode 'credit': one of none, rank, node, adaptive"):
        flow_mode("credit")


def _strategy(mode_name: str, implementation: str, recv_slots: int = 64):
    """*mode_name*'s strategy for rank 0 of a job of RANKS ranks in nodes of PER_NODE, as the rail builds it."""
    if implementation == "compiled" and unavailable_reason() is not None:
        pytest.skip(unavailable_reason())
    mode = flow_mode(mode_name)
    nodes = RANKS // PER_NODE
    budget = mode.budget(recv_slots=recv_slots, ranks=RANKS, nodes=nodes, credit_threshold=2)
    parts = FlowParts(ranks=RANKS, budget=budget, recv_slots=recv_slots, piggyback=True, max_tag=32767)
    if mode.uses_node_memory:
        node_map = np.arange(RANKS, dtype=np.int32) // PER_NODE
        counters = mode.make_node_counters(budget, lambda name, initial: LocalCounters(RANKS, initial))
        layout = NodeLayout(nodes, lambda rank: rank // PER_NODE, int(node_map.ctypes.data))
        parts = FlowParts(
            ranks=RANKS,
            budget=budget,
            recv_slots=recv_slots,
            max_tag=32767,
            layout=layout,
            counters=counters,
            owner=(*counters.values(), node_map),
        )
    return mode, budget, mode.strategy(implementation, parts)


@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
@pytest.mark.parametrize("mode_name", MODE_NAMES)
def test_each_entry_builds_its_strategy_in_both_implementations(mode_name, implementation):
    mode, budget, flow = _strategy(mode_name, implementation)
    assert flow.name == mode_name
    assert flow.has_credits == mode.has_credits == (budget is not None)
    if mode.has_credits:
        assert flow.credits_per_pair == budget.credits_per_pair
        for dest in range(RANKS):  # a node pool starts as its counters' initial value says
            expected = budget.credits_per_pair if mode.split_among else 0
            assert flow.available(dest) == expected
    flow.detach()


@pytest.mark.parametrize("mode_name", MODE_NAMES)
def test_the_plan_counts_the_state_the_strategy_holds(mode_name):
    """memory_plan's figures are the strategy's own: the whole private state of rank and node modes, adaptive
    mode's node-shared counters (its private state grows with the leases, the plan is its worst case)."""
    mode, _, flow = _strategy(mode_name, "python")
    plan = memory_plan(
        mode_name,
        ranks=RANKS,
        ranks_per_node=PER_NODE,
        recv_slots=64,
        send_slots=16,
        datagram_size=4096,
        real_nodes=False,
    )
    assert plan.refused is None
    assert plan.shared_bytes_per_node == flow.shared_state_bytes()
    if mode.split_among is not None or not mode.has_credits:
        assert plan.credit_bytes == flow.credit_state_bytes()
    else:
        assert plan.credit_bytes >= flow.credit_state_bytes()
    real = memory_plan(
        mode_name, ranks=RANKS, ranks_per_node=PER_NODE, recv_slots=64, send_slots=16, datagram_size=4096
    )
    assert real.shared_bytes_per_node - plan.shared_bytes_per_node == (4 * RANKS if mode.uses_node_memory else 0)


@pytest.mark.parametrize("mode_name", MODE_NAMES)
def test_least_receive_slots_is_where_the_budget_stops_refusing(mode_name):
    mode = flow_mode(mode_name)
    nodes = RANKS // PER_NODE
    least = mode.least_recv_slots(RANKS, nodes)
    mode.budget(recv_slots=least, ranks=RANKS, nodes=nodes, credit_threshold=2)  # runs
    if least > 1:
        with pytest.raises(ConfigError, match="gets 0 credits"):
            mode.budget(recv_slots=least - 1, ranks=RANKS, nodes=nodes, credit_threshold=2)


def test_node_counters_start_as_the_table_says():
    node = flow_mode("node")
    budget = node.budget(recv_slots=64, ranks=RANKS, nodes=2, credit_threshold=2)
    assert dict(node.node_counters) == {"pool": FULL}
    assert node.initial("pool", budget) == 32
    with pytest.raises(ValueError, match="credits per pair"):
        node.initial("pool", None)
    adaptive = flow_mode("adaptive")
    made = adaptive.make_node_counters(None, lambda name, initial: (name, initial))
    assert made == {"pool": ("pool", 0), "tokens": ("tokens", 1), "demand": ("demand", 0)}
    assert node.budget_needs_nodes() and not adaptive.budget_needs_nodes()


def test_a_strategy_of_an_unknown_implementation_is_refused():
    with pytest.raises(ValueError, match="no implementation 'fortran'"):
        flow_mode("none").strategy("fortran", FlowParts(ranks=1))


@pytest.mark.parametrize("mode_name", MODE_NAMES)
def test_a_credit_that_went_missing_is_caught_at_rest(mode_name):
    """check_at_rest, as the model and the cluster simulation use it: a strategy at rest passes; the same
    strategy with one credit gone fails, naming it."""
    mode, budget, receiver = _strategy(mode_name, "python")
    if mode.uses_node_memory:
        _, _, holder = _strategy(mode_name, "python")  # its own node's pool: the fresh one
        holders = {0: receiver, 1: holder}
    else:
        holders = {sender: receiver for sender in range(1, RANKS)}  # rank 0's table holds credits for dest 1
    dest = 1
    mode.check_at_rest(receiver, dest, holders, budget, 64)
    if not mode.has_credits:
        return
    if not mode.split_among:  # adaptive: a pool holding a credit no lease granted
        holders[0].pool.add(dest, 1)
        with pytest.raises(AssertionError, match=r"node 0 -> 1: pool 1, lease 0"):
            mode.check_at_rest(receiver, dest, holders, budget, 64)
        return
    assert receiver.try_acquire(dest)  # a credit taken, and no message for it anywhere
    with pytest.raises(AssertionError, match=rf"-> {dest}: {budget.credits_per_pair - 1} credits"):
        mode.check_at_rest(receiver, dest, holders, budget, 64)


@pytest.mark.mpi
@pytest.mark.parametrize("transport", ["compiled", "python"])
@pytest.mark.parametrize("mode_name", MODE_NAMES)
def test_every_mode_moves_an_incast_exactly_once_under_mpiexec(mode_name, transport):
    """The rail builds each table entry under a real mpiexec, on both transports, in virtual nodes of 2."""
    variables = {
        "MAILRAIL_FLOW_CONTROL": mode_name,
        "MAILRAIL_IMPLEMENTATION": transport,
        "MAILRAIL_RANKS_PER_NODE": "2",
        "MAILRAIL_RECV_POOL_SLOTS": "8",
        "MAILRAIL_SEND_POOL_SLOTS": "4",
    }
    result = mpirun(4, "traffic.py", "--pattern", "incast", "--max-messages", "200", env=variables)
    assert_exactly_once(result, transport)
    stats = result["stats"]
    assert {s["flow_control"] for s in stats} == {mode_name}
    assert (sum(s["credit_messages_sent"] for s in stats) > 0) == flow_mode(mode_name).has_credits
