"""``bench adversarial`` under a real mpiexec: exact accounting in every mode, JSON schema, metrics files."""

from __future__ import annotations

from collections import Counter

import pytest

from helpers import MPI_TIMEOUT, assert_credit_requests_accounted
from mailrail.flow import MODE_NAMES
from mailrail_tools.bench.jobs import run_adversarial
from mailrail_tools.bench.metrics import FIELDS, read_metrics

pytestmark = pytest.mark.mpi

RANKS = 6
TRIALS = 2
#: Scarce on purpose: one credit per rank pair (rank mode), two per node pair (node mode: 3 nodes
#: of 2 ranks), and 4 send buffers, so credits run out and sends wait.
SCARCE = ["--recv-pool-slots", "6", "--send-pool-slots", "4", "--ranks-per-node", "2"]

TOP_LEVEL = {
    "benchmark",
    "flow_control",
    "ranks",
    "nodes",
    "victims",
    "datagram_size",
    "messages_per_rank",
    "receive_work_us",
    "trials",
    "ranks_detail",
    "config",
}
TRIAL_FIELDS = {"runtime_s", "goodput_bps", "bytes_received", "messages_received", "incast_ratio", "victim_messages"}
DETAIL_FIELDS = {
    "rank",
    "peak_rss_bytes",
    "credit_messages",
    "deferred_high_water",
    "credit_messages_sent",
    "credit_messages_received",
    "reserve_failures",
    "credit_state_bytes",
    "rss_growth_bytes",
    "internode_bytes_sent",
}


def adversarial(tmp_path, mode: str, victims: int, *amount: str) -> tuple[dict, str]:
    metrics = str(tmp_path / "metrics")
    document = run_adversarial(
        RANKS,
        [
            "--flow-control",
            mode,
            "--victims",
            str(victims),
            "--trials",
            str(TRIALS),
            "--seed",
            "5",
            "--datagram-size",
            "1024",
            "--metrics",
            metrics,
            "--metrics-interval",
            "0.01",
            *SCARCE,
            *amount,
        ],
        str(tmp_path / "result.json"),
        time_limit=MPI_TIMEOUT,
    )
    assert document["status"] == "ok", document
    return document, metrics


@pytest.mark.parametrize("mode", list(MODE_NAMES))
@pytest.mark.parametrize(
    "victims, amount, per_sender_bytes",
    [
        (1, ("--messages", "150"), 150 * 1024),
        (3, ("--bytes-per-rank", "100000"), 100000),  # 97 full messages and one of 672 bytes
        (RANKS, ("--messages", "60"), 60 * 1024),  # every rank is a victim: no incast, all to all
    ],
    ids=["1-victim", "3-victims", "all-victims"],
)
def test_victims_receive_exactly_what_was_sent_to_them(
    tmp_path, clean_environment, mode, victims, amount, per_sender_bytes
):
    document, metrics = adversarial(tmp_path, mode, victims, *amount)
    senders = RANKS - 1 if victims == 1 else RANKS

    assert document["flow_control"] == mode and document["ranks"] == RANKS and document["nodes"] == 3
    assert document["victims"] == victims and len(document["victim_ranks"]) == victims
    assert len(document["trials"]) == TRIALS
    for trial in document["trials"]:
        assert trial["bytes_received"] == trial["bytes_sent"] == senders * per_sender_bytes
        assert trial["messages_received"] == trial["messages_sent"] == senders * document["messages_per_rank"]
        assert trial["stragglers"] == 0
        assert trial["incast_ratio"] == senders / victims
        spread = trial["victim_messages"]  # every victim reached, within one message of the others
        assert spread["min"] >= 1 and spread["max"] - spread["min"] <= 1
        assert spread["min"] * victims <= trial["messages_received"] <= spread["max"] * victims
        assert trial["runtime_s"] > 0 and trial["goodput_bps"] > 0
    assert document["summary"]["accounting_ok"]

    # The transport's own counters agree, over all trials, and nothing was left undelivered.
    detail = document["ranks_detail"]
    assert [d["rank"] for d in detail] == list(range(RANKS))
    assert (
        sum(d["bytes_sent"] for d in detail)
        == sum(d["bytes_received"] for d in detail)
        == TRIALS * senders * per_sender_bytes
    )
    for d in detail:
        # finalize()'s report: every kind it counts (reserved-but-unsent buffers too) is zero
        assert {"deferred", "unreleased", "unreceived", "reserved"} <= set(d["undelivered"])
        assert not any(d["undelivered"].values()), d["undelivered"]
        assert d["victim"] == (d["rank"] in document["victim_ranks"])
        if not d["victim"]:
            assert d["messages_received"] == 0
    if mode == "none":
        assert document["summary"]["credit_messages"] == 0
    else:
        assert document["summary"]["credit_messages"] > 0
        # Credits bound what can arrive at a rank unreturned by its receive slots.
        assert max(d["credit_window_high_water"] for d in detail) <= 6
    # Only adaptive credits are asked for, and then by every node with senders (a node asks once for all of
    # its ranks: nodes of two ranks here); requests reached receivers.
    asked = Counter()
    for d in detail:
        if d["messages_sent"]:
            asked[d["rank"] // 2] += d["credit_requests_sent"]
    if mode == "adaptive":
        assert all(asked.values())
        assert_credit_requests_accounted(detail, nodes=RANKS // 2)
    else:
        assert not any(asked.values()) and not any(d["credit_requests_received"] for d in detail)

    assert_metrics_match_totals(document, metrics)


def assert_metrics_match_totals(document: dict, metrics: str) -> None:
    """Every rank's file parses; each trial's last sample holds the rank's totals for that trial."""
    for d in document["ranks_detail"]:
        samples = read_metrics(metrics, d["rank"])
        assert samples and all(set(s) == set(FIELDS) for s in samples)
        for trial in range(TRIALS):
            rows = [s for s in samples if s["trial"] == trial]
            assert rows, (d["rank"], trial)
            assert [s["elapsed_s"] for s in rows] == sorted(s["elapsed_s"] for s in rows)
            final = rows[-1]
            # The plan is the same in every trial, so each trial is 1/TRIALS of the run's totals.
            assert final["messages_sent"] * TRIALS == d["messages_sent"]
            assert final["bytes_sent"] * TRIALS == d["bytes_sent"]
            assert final["messages_received"] * TRIALS == d["messages_received"]
            assert final["bytes_received"] * TRIALS == d["bytes_received"]
            assert final["send_pct"] == final["recv_pct"] == 100.0
    for trial, totals in enumerate(document["trials"]):
        finals = [
            [s for s in read_metrics(metrics, d["rank"]) if s["trial"] == trial][-1] for d in document["ranks_detail"]
        ]
        assert sum(f["bytes_received"] for f in finals) == totals["bytes_received"]
        assert sum(f["messages_received"] for f in finals) == totals["messages_received"]


@pytest.mark.smoke
def test_json_document_has_the_documented_fields(tmp_path, clean_environment):
    document, _ = adversarial(tmp_path, "node", 2, "--messages", "40")
    assert TOP_LEVEL <= set(document)
    assert document["benchmark"] == "adversarial"
    assert all(TRIAL_FIELDS <= set(t) for t in document["trials"])
    assert all(DETAIL_FIELDS <= set(d) for d in document["ranks_detail"])
    assert document["config"]["flow_control"] == "node" and document["config"]["recv_pool_slots"] == 6
    assert document["messages_per_rank"] == 40 and document["datagram_size"] == 1024


@pytest.mark.parametrize(
    "args, message",
    [
        (["--victims", "3"], "argument --victims: must be an integer in 1..2 (the ranks), got '3'"),
        (["--receive-work-us", "-5"], "argument --receive-work-us: must be a number in 0..1e+06, got '-5'"),
    ],
)
def test_bad_arguments_exit_with_a_message(tmp_path, clean_environment, args, message):
    result = run_adversarial(2, args, str(tmp_path / "bad.json"), time_limit=MPI_TIMEOUT)
    assert result["status"] == "failed" and result["returncode"] == 2
    assert message in result["output_tail"]


def test_a_victim_that_works_on_each_message_still_gets_all_of_them(tmp_path, clean_environment):
    document, _ = adversarial(tmp_path, "node", 1, "--messages", "50", "--receive-work-us", "200")
    assert document["receive_work_us"] == 200 and document["summary"]["accounting_ok"]


@pytest.mark.parametrize("mode", ["rank", "adaptive"])
def test_partners_spread_each_rank_over_the_victim_and_its_own_partner(tmp_path, clean_environment, mode):
    """--partners 1: every rank sends half to the victim, half to one partner of its own (most pairs never
    talk); every receiver gets exactly what was sent to it."""
    document, _ = adversarial(tmp_path, mode, 1, "--messages", "100", "--partners", "1")
    assert document["partners"] == 1 and document["summary"]["accounting_ok"]
    detail = document["ranks_detail"]
    assert all(d["messages_sent"] == TRIALS * 100 for d in detail)  # the victim sends to its partner too
    receivers = [d for d in detail if d["messages_received"]]
    assert 2 <= len(receivers) < RANKS  # the victim and some partners; a pair that never talks is the rule
    assert sum(d["messages_received"] for d in detail) == TRIALS * 100 * RANKS


@pytest.mark.smoke
def test_interleaved_modes_share_one_job_and_each_delivers_exactly_once(tmp_path, clean_environment):
    """--interleave: a rail per mode in one job, their trials taking turns; each mode's accounting, trials and
    ratio to the first mode are in the document."""
    modes = list(MODE_NAMES)
    document = run_adversarial(
        RANKS,
        ["--interleave", ",".join(modes), "--trials", str(TRIALS), "--messages", "80", "--datagram-size", "1024"]
        + SCARCE,
        str(tmp_path / "interleaved.json"),
        time_limit=MPI_TIMEOUT,
    )
    assert document["status"] == "ok", document
    assert document["benchmark"] == "adversarial-interleaved" and document["flow_controls"] == modes
    senders = RANKS - 1
    for mode in modes:
        entry = document["modes"][mode]
        assert entry["summary"]["accounting_ok"]
        assert len(entry["trials"]) == TRIALS
        for trial in entry["trials"]:
            assert trial["messages_received"] == trial["messages_sent"] == senders * 80
    assert {config["flow_control"] for config in document["config"].values()} == set(modes)
    assert set(document["ratios"]) == {f"{mode}/{modes[0]}" for mode in modes[1:]}
    assert all(len(ratio["per_trial"]) == TRIALS for ratio in document["ratios"].values())
    assert document["modes"][modes[0]]["summary"]["credit_messages"] == 0  # unconstrained: none
    assert all(document["modes"][mode]["summary"]["credit_messages"] > 0 for mode in modes[1:])


@pytest.mark.parametrize(
    "args, message",
    [
        (["--interleave", "node,bogus"], "argument --interleave: each must be one of none,rank,node,adaptive"),
        (["--interleave", "rank,node", "--metrics", "m"], "--interleave and --metrics"),
        (
            ["--interleave", "none,rank", "--recv-pool-slots", "2", "--ranks-per-node", "1"],
            "--interleave none,rank: rank-based flow control gets 0 credits per sender rank",
        ),
    ],
)
def test_bad_interleaving_exits_with_a_message(tmp_path, clean_environment, args, message):
    result = run_adversarial(4, args, str(tmp_path / "bad.json"), time_limit=MPI_TIMEOUT)
    assert result["status"] == "failed" and result["returncode"] == 2
    assert message in result["output_tail"]
