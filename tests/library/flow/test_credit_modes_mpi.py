"""Rank-, node-based and adaptive flow control under a real mpiexec: exactly once, invariants, sharing,
stalls."""

import pytest

from helpers import assert_credit_requests_accounted, assert_exactly_once, mpirun, run_program

pytestmark = pytest.mark.mpi


def env(mode: str, **knobs) -> dict[str, str]:
    variables = {"MAILRAIL_FLOW_CONTROL": mode}
    variables.update({"MAILRAIL_" + k.upper(): str(v) for k, v in knobs.items()})
    return variables


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["rank", "node"])
@pytest.mark.parametrize("ranks", [16, 32])
def test_incast_with_one_credit_per_pair(mode, ranks):
    """Incast 15:1 and 31:1, one credit per pair, tiny send pools: slow, but nothing lost."""
    knobs = dict(credits_per_pair=1, send_pool_slots=2, recv_pool_slots=64)
    if mode == "node":
        knobs["ranks_per_node"] = 4
    result = mpirun(
        ranks, "traffic.py", "--pattern", "incast", "--max-messages", "60", env=env(mode, **knobs), timeout=240
    )
    assert_exactly_once(result)
    victim = result["stats"][result["victims"][0]]
    assert victim["credit_window_high_water"] <= 64
    assert sum(s["deferred_sends"] for s in result["stats"]) > 0  # credits really ran out
    assert victim["credit_messages_sent"] > 0


@pytest.mark.smoke
@pytest.mark.parametrize("transport", ["compiled", "python"])
@pytest.mark.parametrize("piggyback", ["on", "off"])
def test_rank_mode_uniform_traffic_with_and_without_piggybacking(piggyback, transport):
    result = mpirun(
        8,
        "traffic.py",
        "--pattern",
        "uniform",
        "--max-messages",
        "300",
        env=env("rank", recv_pool_slots=64, piggyback=piggyback, send_pool_slots=4, implementation=transport),
    )
    assert_exactly_once(result, transport)
    piggybacked = sum(s["credits_piggybacked"] for s in result["stats"])
    assert (piggybacked > 0) == (piggyback == "on")


@pytest.mark.slow
@pytest.mark.parametrize(
    "ranks_per_node, transport",
    [(2, "compiled"), (4, "compiled"), (4, "python"), pytest.param(8, "compiled", marks=pytest.mark.smoke)],
)
def test_node_mode_with_virtual_nodes(ranks_per_node, transport):
    result = mpirun(
        16,
        "traffic.py",
        "--pattern",
        "uniform",
        "--max-messages",
        "150",
        env=env("node", ranks_per_node=ranks_per_node, recv_pool_slots=16, send_pool_slots=4, implementation=transport),
    )
    assert_exactly_once(result, transport)
    stats = result["stats"]
    assert {s["nodes"] for s in stats} == {16 // ranks_per_node}
    assert {s["credits_per_pair"] for s in stats} == {16 // (16 // ranks_per_node)}


@pytest.mark.parametrize(
    "mode, knobs",
    [
        ("rank", dict(recv_pool_slots=32)),  # 4 credits per pair at 8 ranks
        ("node", dict(recv_pool_slots=32, ranks_per_node=2)),  # 8 credits per node
        ("adaptive", dict(recv_pool_slots=32, ranks_per_node=2)),  # leases of 4, up to all 32 slots
    ],
)
def test_unreturned_messages_never_exceed_receive_slots(mode, knobs):
    """The victim holds what arrives (filling the credit window) and checks, on every arrival,
    that no sender exceeded its credits; its peak of arrived-but-unreturned messages stays
    within its receive slots, and the window really filled."""
    result = mpirun(
        8, "traffic.py", "--pattern", "incast", "--max-messages", "200", "--hold-seconds", "0.1", env=env(mode, **knobs)
    )
    assert_exactly_once(result)
    victim = result["stats"][result["victims"][0]]
    assert victim["held_high_water"] <= 32
    assert victim["credit_window_high_water"] <= 32
    assert victim["credit_window_high_water"] > 32 // 2  # the test pushed the window, it was not idle


def test_node_neighbours_use_the_credits_a_quiet_rank_freed():
    result = mpirun(4, "node_share.py")
    credits = result["credits"]
    assert result["pool_after_rank2"][2] == 0 or result["pool_after_rank2"][3] == 0
    assert result["peak_from"][2] <= credits
    # Rank 3 alone held the node's whole pool at the victim, credits rank 2 had consumed included.
    assert result["peak_from"][3] == credits
    # Rank 2 sent once and went quiet, yet credit returns reached the node pool through it.
    stats = result["stats"]
    assert stats[2]["messages_sent"] == credits and stats[3]["messages_sent"] == 200
    assert stats[0]["messages_received"] == credits + 200


@pytest.mark.smoke
def test_credit_starvation_raises_a_diagnostic_not_a_hang():
    result = mpirun(2, "stall.py")
    error = result["error"]
    assert error is not None
    assert "made no progress" in error and "destination 0: 2 queued, 0 credit(s) available" in error
    assert result["received_by_0"] == 3  # and nothing was lost once rank 0 came back


@pytest.mark.smoke
@pytest.mark.parametrize("pattern", ["incast", "uniform"])
def test_node_mode_on_the_real_shared_memory_node(pattern):
    """Without MAILRAIL_RANKS_PER_NODE the node is COMM_TYPE_SHARED: here, all ranks in one node,
    whose rank-to-node map lives once in shared memory."""
    result = mpirun(
        8,
        "traffic.py",
        "--pattern",
        pattern,
        "--max-messages",
        "200",
        env=env("node", recv_pool_slots=16, send_pool_slots=4),
    )
    assert_exactly_once(result)
    stats = result["stats"]
    assert {s["nodes"] for s in stats} == {1}
    assert {s["credits_per_pair"] for s in stats} == {16}
    assert {s["credit_state_bytes"] for s in stats} == {2 * 1 * 8}  # O(nodes) private state
    assert {s["shared_credit_bytes"] for s in stats} == {8 * 8 + 8 * 4}  # pool + map, once per node


def test_node_mode_with_portable_mpi_atomics():
    """The no-compiler path: MPI Fetch_and_op on the shared window instead of CPU atomics (Python path)."""
    result = mpirun(
        8,
        "traffic.py",
        "--pattern",
        "incast",
        "--max-messages",
        "150",
        env=env("node", recv_pool_slots=16, send_pool_slots=4, ranks_per_node=4, atomics="mpi"),
    )
    assert_exactly_once(result, implementation="python")
    assert {s["atomics"] for s in result["stats"]} == {"mpi"}
    assert sum(s["deferred_sends"] for s in result["stats"]) > 0


@pytest.mark.smoke
@pytest.mark.parametrize("transport", ["compiled", "python"])
@pytest.mark.parametrize("pattern", ["incast", "uniform"])
def test_adaptive_mode_with_fewer_receive_slots_than_sending_nodes(pattern, transport):
    """Eight nodes of one rank, three receive slots per rank: rank and node modes are refused here (fewer
    slots than senders); adaptive credits lend the three slots around, and nothing is lost."""
    knobs = dict(recv_pool_slots=3, send_pool_slots=4, ranks_per_node=1, implementation=transport)
    result = mpirun(8, "traffic.py", "--pattern", pattern, "--max-messages", "150", env=env("adaptive", **knobs))
    assert_exactly_once(result, transport)
    stats = result["stats"]
    assert {s["nodes"] for s in stats} == {8} and {s["credits_per_pair"] for s in stats} == {1}
    assert max(s["credit_window_high_water"] for s in stats) <= 3
    assert max(s["held_high_water"] for s in stats) <= 3
    assert_credit_requests_accounted(stats, nodes=8)
    assert max(s["waiting_high_water"] for s in stats) > 1  # nodes really queued for the slots


@pytest.mark.parametrize("mode", ["rank", "node"])
def test_the_static_modes_refuse_that_job_and_name_adaptive_mode(mode):
    knobs = dict(recv_pool_slots=3, send_pool_slots=4, ranks_per_node=1)
    refused = run_program(8, "traffic.py", "--max-messages", "1", env=env(mode, **knobs))
    assert refused.returncode != 0
    assert f"{mode}-based flow control gets 0 credits per" in refused.stderr
    assert "use flow_control='adaptive'" in refused.stderr


def test_adaptive_mode_with_portable_mpi_atomics():
    """The no-compiler path: MPI atomics on the node's pool, tokens and demand (Python transport); four slots
    for four nodes with leases of one, so the slots are asked for again and again."""
    result = mpirun(
        8,
        "traffic.py",
        "--pattern",
        "incast",
        "--max-messages",
        "150",
        env=env("adaptive", recv_pool_slots=4, send_pool_slots=4, ranks_per_node=2, atomics="mpi"),
    )
    assert_exactly_once(result, implementation="python")
    stats = result["stats"]
    assert {s["atomics"] for s in stats} == {"mpi"}
    assert {s["shared_credit_bytes"] for s in stats} == {3 * 8 * 8}  # pool, tokens, demand: 8 B per rank each
    victim = stats[result["victims"][0]]
    assert victim["credit_requests_received"] > 4 and victim["credit_window_high_water"] <= 4


@pytest.mark.parametrize("pattern", ["uniform", "incast", "hotspot", "sparse"])
@pytest.mark.parametrize(
    "ranks, ranks_per_node",
    [(8, 2), (8, None), pytest.param(16, 4, marks=pytest.mark.slow)],
    ids=["8-ranks-4-virtual-nodes", "8-ranks-real-node", "16-ranks-4-virtual-nodes"],
)
def test_adaptive_mode_delivers_exactly_once_with_one_receive_slot(ranks, ranks_per_node, pattern):
    """One receive slot per rank, every pattern: the slot is lent around, never overrun, nothing lost."""
    knobs = dict(recv_pool_slots=1, send_pool_slots=4)
    if ranks_per_node is not None:
        knobs["ranks_per_node"] = ranks_per_node
    result = mpirun(ranks, "traffic.py", "--pattern", pattern, "--max-messages", "60", env=env("adaptive", **knobs))
    assert_exactly_once(result)
    stats = result["stats"]
    assert {s["nodes"] for s in stats} == {ranks // ranks_per_node if ranks_per_node else 1}
    assert max(s["credit_window_high_water"] for s in stats) <= 1 and max(s["held_high_water"] for s in stats) <= 1
    assert max(s["leases_high_water"] for s in stats) >= 1
