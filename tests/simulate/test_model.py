"""The model: a single receiver's queue against its closed form, conservation, determinism, refusals."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mailrail.errors import ConfigError
from mailrail.flow import MODE_NAMES as MODES
from mailrail_simulate.model import IMPLEMENTATIONS, Workload, simulate
from mailrail_simulate.params import CALIBRATED, ModelParams, ParamsError, load_params

FAST = ModelParams(
    send_cpu_s=2e-6, recv_cpu_s=3e-6, credit_cpu_s=1e-6, match_per_entry_s=1e-9, unexpected_overhead_bytes=1000
)


def test_a_receiver_that_falls_behind_matches_ever_longer_queues():
    """Q messages land at once on a receiver with R posted slots (senders on its node, instant sends):
    it spends Q * recv + match * sum over the unexpected queue's lengths, (Q-R)(Q-R+1)/2, and holds
    Q-R unexpected messages at the peak."""
    senders, per_sender, slots = 7, 100, 50
    params = ModelParams(
        send_cpu_s=0.0,
        recv_cpu_s=1e-5,
        match_per_entry_s=1e-7,
        unexpected_overhead_bytes=500,
        shm_latency_s=1e-6,
        shm_Bps=1e12,
    )
    load = Workload(
        ranks=senders + 1,
        ranks_per_node=senders + 1,
        victims=1,
        messages_per_rank=per_sender,
        mode="none",
        recv_slots=slots,
    )
    result = simulate(load, params, check_invariants=True)
    queued, waiting = senders * per_sender, senders * per_sender - slots
    copy = 4096 / 1e12
    expected = 1e-6 + copy + queued * 1e-5 + 1e-7 * waiting * (waiting + 1) / 2
    assert result.runtime_s == pytest.approx(expected, rel=1e-6)
    assert result.victim_unexpected_peak_bytes == waiting * (4096 + 500)
    assert result.messages == queued


def test_credits_keep_a_receiver_from_ever_queueing_unexpected_messages():
    load = Workload(ranks=16, ranks_per_node=4, victims=1, messages_per_rank=300, mode="rank", recv_slots=64)
    result = simulate(load, FAST, check_invariants=True)
    assert result.victim_unexpected_peak_bytes == 0
    assert result.status == "ok"
    unconstrained = simulate(dataclasses.replace(load, mode="none"), FAST)
    assert unconstrained.victim_unexpected_peak_bytes > 0


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    mode=st.sampled_from(MODES),
    ranks=st.integers(2, 12),
    per_node=st.integers(1, 6),
    victims=st.integers(1, 3),
    messages=st.integers(0, 40),
    recv_slots=st.integers(1, 40),
    partners=st.integers(0, 2),
    threshold=st.integers(1, 4),
    cores=st.sampled_from([None, 1, 2]),
    eager=st.sampled_from([65536, 100]),
    seed=st.integers(0, 1000),
)
def test_every_message_arrives_once_and_every_credit_is_conserved(
    mode, ranks, per_node, victims, messages, recv_slots, partners, threshold, cores, eager, seed
):
    """Random jobs, one slot up, small and large (rendezvous) messages, shared cores or not: the model
    checks conservation itself at the end (check_invariants) and MailRail's flow control checks every
    arrival against its credits; a mode MailRail refuses for the job is reported, not simulated."""
    load = Workload(
        ranks=ranks,
        ranks_per_node=min(per_node, ranks),
        victims=min(victims, ranks),
        messages_per_rank=messages,
        mode=mode,
        datagram_size=4096,
        recv_slots=recv_slots,
        credit_threshold=threshold,
        partners=partners,
        seed=seed,
    )
    params = FAST.replace(host_cores=cores, eager_limit_bytes=eager)
    result = simulate(load, params, check_invariants=True)
    if result.status == "refused":
        assert mode in ("rank", "node") and "MAILRAIL_RECV_POOL_SLOTS" in result.detail
        return
    assert result.status == "ok"
    assert result.messages == result.payload_bytes // 4096


def test_the_same_seed_gives_the_same_result_and_another_seed_another():
    load = Workload(ranks=12, ranks_per_node=4, victims=2, messages_per_rank=200, mode="adaptive", recv_slots=8)
    params = FAST.replace(host_cores=2)
    first, again = simulate(load, params), simulate(load, params)
    assert first == again
    other = simulate(dataclasses.replace(load, seed=2), params)
    assert other != first


@pytest.mark.parametrize("mode", ["none", "rank"])
def test_every_victim_is_reached_with_fewer_messages_per_rank_than_victims(mode):
    """The victim sweep's shape: 3 messages per rank, 16 victims of 64 ranks.  The model used to send only
    to the first 3 victims; it now sends the benchmark's plan (support.incast), whose spread it reports."""
    from mailrail_tools.incast import choose_victims, destinations

    load = Workload(ranks=64, ranks_per_node=8, victims=16, messages_per_rank=3, mode=mode, recv_slots=64 * 4)
    result = simulate(load, FAST, check_invariants=True)
    assert result.status == "ok"
    assert result.victim_messages == {"min": 12, "median": 12.0, "max": 12}  # 64 x 3 / 16
    victims = choose_victims(64, 16, load.seed)
    planned = sum(list(destinations(rank, 64, victims, 3, load.seed)).count(victims[5]) for rank in range(64))
    assert planned == 12


def test_a_mode_mailrail_refuses_is_reported_with_mailrails_reason():
    load = Workload(ranks=16, ranks_per_node=4, victims=1, messages_per_rank=10, mode="node", recv_slots=3)
    result = simulate(load, FAST)
    assert result.status == "refused"
    assert "4 sending nodes" in result.detail and "adaptive" in result.detail
    adaptive = simulate(dataclasses.replace(load, mode="adaptive"), FAST, check_invariants=True)
    assert adaptive.status == "ok"


def test_a_node_past_its_memory_cap_ends_the_trial_out_of_memory():
    load = Workload(
        ranks=16,
        ranks_per_node=4,
        victims=1,
        messages_per_rank=500,
        mode="none",
        recv_slots=16,
        victim_node_memory=1 << 20,
    )
    result = simulate(load, FAST.replace(host_cores=2))
    assert result.status == "out_of_memory"
    assert "passed its 1048576 bytes" in result.detail
    assert simulate(dataclasses.replace(load, mode="node"), FAST.replace(host_cores=2)).status == "ok"
    # the machine's memory (the parameters') caps every node alike; a run's own cap wins over it
    machine = FAST.replace(host_cores=2, node_memory_bytes=1 << 20)
    assert simulate(dataclasses.replace(load, victim_node_memory=None), machine).status == "out_of_memory"
    assert simulate(dataclasses.replace(load, victim_node_memory=1 << 40), machine).status == "ok"


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"mode": "fast"}, "mode 'fast'"),
        ({"ranks": 1}, "ranks=1"),
        ({"victims": 17}, "victims=17"),
        ({"ranks_per_node": 0}, "ranks_per_node=0"),
        ({"messages_per_rank": -1}, "messages_per_rank=-1"),
    ],
)
def test_a_bad_workload_is_refused_naming_the_value(change, message):
    values = {"ranks": 16, "ranks_per_node": 4, "victims": 1, "messages_per_rank": 1, "mode": "none", **change}
    with pytest.raises(ConfigError, match=message.replace("(", r"\(")):
        Workload(**values)


@pytest.mark.parametrize(("idle_share", "stretch"), [(0.0, 1.0), (0.5, 2.5), (1.0, 4.0)])
def test_shared_cores_stretch_work_by_the_ranks_that_want_one(idle_share, stretch):
    """One core, four ranks: three send instantly and then wait while the victim receives. Each of its
    receives takes recv_cpu_s times (1 busy + 3 idle * idle_share) / 1 core."""
    params = ModelParams(
        send_cpu_s=0.0, recv_cpu_s=1e-5, shm_latency_s=1e-9, shm_Bps=1e15, host_cores=1, idle_share=idle_share
    )
    load = Workload(ranks=4, ranks_per_node=4, victims=1, messages_per_rank=100, mode="none", recv_slots=512)
    result = simulate(load, params, check_invariants=True)
    assert result.runtime_s == pytest.approx(300 * 1e-5 * stretch, rel=1e-3)


@pytest.mark.parametrize(
    ("idle_share", "by_rank", "by_node"), [(0.0, 1.0, 1.0), (0.5, 1.25, 1.5), (1.0, 2.0, 2.0), (0.2, 1.0, 1.2)]
)
def test_cores_split_by_node_first_stretch_work_by_the_ranks_of_its_node(idle_share, by_rank, by_node):
    """Two cores, two nodes of two ranks; the three senders send at once and then wait while the victim
    receives.  Shared by rank, a receive stretches by (1 busy + 3 idle * idle_share) / 2 cores; split by node
    first, the victim's node has one core (2 cores / 2 nodes), shared with its one idle mate: 1 + idle_share."""
    params = ModelParams(
        send_cpu_s=0.0,
        recv_cpu_s=1e-5,
        shm_latency_s=1e-9,
        shm_Bps=1e15,
        link_latency_s=1e-9,
        link_Bps=1e15,
        host_cores=2,
        idle_share=idle_share,
    )
    load = Workload(ranks=4, ranks_per_node=2, victims=1, messages_per_rank=100, mode="none", recv_slots=512)
    for cores_by_node, stretch in ((0, by_rank), (1, by_node)):
        result = simulate(load, params.replace(cores_by_node=cores_by_node), check_invariants=True)
        assert result.runtime_s == pytest.approx(300 * 1e-5 * stretch, rel=1e-3), cores_by_node


def test_a_core_split_other_than_by_rank_or_by_node_is_refused_naming_it():
    with pytest.raises(ParamsError, match=r"cores_by_node=2: 0 \(shared by rank\) or 1 \(by node first\)"):
        ModelParams(cores_by_node=2)


CALIBRATED_PARAMS = load_params(CALIBRATED)[0]


def test_a_trial_past_its_time_limit_is_reported_timed_out_naming_what_was_unfinished():
    load = Workload(ranks=8, ranks_per_node=2, victims=1, messages_per_rank=400, mode="none")
    whole = simulate(load, CALIBRATED_PARAMS)
    assert whole.status == "ok"
    cut = simulate(dataclasses.replace(load, time_limit_s=whole.runtime_s / 2), CALIBRATED_PARAMS)
    assert cut.status == "timeout" and cut.goodput_bps == 0
    assert cut.runtime_s == pytest.approx(whole.runtime_s / 2) and cut.messages < whole.messages
    assert "unfinished after the time limit" in cut.detail
    with pytest.raises(ConfigError, match="time_limit_s=0"):
        dataclasses.replace(load, time_limit_s=0)


TIMERS = {"retransmit_timeout_min_s": 1e-4, "retransmit_timeout_max_s": 1e-3, "retransmit_backoff": 2.0}


@pytest.mark.skipif(len(IMPLEMENTATIONS) < 2, reason="the compiled Endpoint was not built")
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(
    "setting",
    [
        {},
        # node-shared credits: more destinations queued (60-70) than a drain looks at (32): a rank does not sleep
        # while one of them has credit
        {"load": {"ranks": 80, "victims": 76, "messages_per_rank": 150, "recv_slots": 80}},
        {"load": {"partners": 2}},
        {"params": {"host_cores": 2, "idle_share": 0.5}},
        {"params": {"eager_limit_bytes": 1024}},  # rendezvous
        {"params": {"flow_window_packets": 8, "ack_interval_packets": 2, "recv_context_entries": 6, **TIMERS}},
    ],
    ids=["plain", "many-destinations", "partners", "shared-cores", "rendezvous", "loss"],
)
def test_the_compiled_endpoint_gives_the_model_the_same_result_as_the_python_one(mode, setting):
    """The model runs the compiled Endpoint and ledgers where built (a third of the time): every field of the
    result is the same as on the Python specification, event for event."""
    load = Workload(ranks=24, ranks_per_node=4, victims=2, messages_per_rank=60, mode=mode, recv_slots=64)
    load = dataclasses.replace(load, credit_threshold=2, **setting.get("load", {}))
    params = FAST.replace(**setting.get("params", {}))
    python = simulate(load, params, implementation="python")
    assert python.status == "ok"
    assert simulate(load, params, implementation="compiled") == python


def test_an_unknown_implementation_is_refused_naming_it():
    load = Workload(ranks=4, ranks_per_node=2, victims=1, messages_per_rank=1, mode="node")
    with pytest.raises(ValueError, match="implementation='fortran'"):
        simulate(load, FAST, implementation="fortran")
    with pytest.raises(ValueError, match="check_invariants"):
        simulate(load, FAST, check_invariants=True, implementation="compiled")
