"""The fluid approximation against the discrete-event model, at sizes where both run (the Omni-Path set, the
paper's credits: 4 victims, 64 ranks a node, 8 credits a pair, threshold 2).

Each tolerance is what the fluid view leaves out (docs/simulate.md, "A fluid approximation"), with room for
the model's other seeds: node mode's credit round trips at 2-4 nodes, adaptive mode's lending churn."""

from __future__ import annotations

import dataclasses
import json

import pytest

from mailrail.flow import MODE_NAMES as MODES
from mailrail.flow.modes import flow_mode
from mailrail_simulate import paper
from mailrail_simulate.fluid import FluidResult, compare, fluid, relative_error
from mailrail_simulate.fluid import main as fluid_main
from mailrail_simulate.model import Result, Workload, simulate
from mailrail_simulate.params import OMNIPATH, ParamsError, load_params
from mailrail_tools.cli import main

PARAMS, _ = load_params(OMNIPATH)
#: (ranks, messages per rank): 2 and 4 nodes, whole counts (a few thousand messages per victim and mode).
SIZES = ((128, 200), (256, 100))


def _workload(ranks: int, messages: int, mode: str) -> Workload:
    return Workload(
        ranks=ranks,
        ranks_per_node=paper.RANKS_PER_NODE,
        victims=paper.VICTIMS,
        messages_per_rank=messages,
        mode=mode,
        datagram_size=paper.DATAGRAM_SIZE,
        recv_slots=paper.recv_slots(mode, ranks, paper.RANKS_PER_NODE),
        credits_per_pair=paper.CREDITS_PER_PAIR,
        credit_threshold=paper.CREDIT_THRESHOLD,
    )


def _tolerances(mode: str) -> dict[str, float]:
    """Relative tolerance per quantity: runtime, the victim's peak memory, its node's, credit messages."""
    described = flow_mode(mode)
    if not described.has_credits:  # its queue's growth and drain are what the fluid view computes
        return {"runtime_s": 0.02, "victim_peak_bytes": 0.03, "victim_node_peak_bytes": 0.02, "credit_messages": 0}
    if described.split_among == "rank":  # piggybacked credits between victims are left out: a few percent more
        return {"runtime_s": 0.04, "victim_peak_bytes": 0.01, "victim_node_peak_bytes": 0, "credit_messages": 0.05}
    if described.split_among == "node":  # a victim idles while credits return, with only 2-4 nodes' windows
        return {"runtime_s": 0.12, "victim_peak_bytes": 0.01, "victim_node_peak_bytes": 0, "credit_messages": 1e-9}
    # lent on request: requests and grants while the shares settle are left out
    return {"runtime_s": 0.08, "victim_peak_bytes": 0.01, "victim_node_peak_bytes": 0, "credit_messages": 0.4}


@pytest.fixture(scope="module")
def both() -> dict[tuple[int, str], tuple[Result, FluidResult]]:
    """Each size and mode in the model and in the fluid view: (model, fluid)."""
    loads = {(ranks, mode): _workload(ranks, messages, mode) for ranks, messages in SIZES for mode in MODES}
    return {key: (simulate(load, PARAMS), fluid(load, PARAMS)) for key, load in loads.items()}


@pytest.mark.parametrize("ranks", [ranks for ranks, _ in SIZES])
@pytest.mark.parametrize("mode", MODES)
def test_the_fluid_view_agrees_with_the_model(both, ranks, mode):
    simulated, approximated = both[ranks, mode]
    assert simulated.status == approximated.status == "ok"
    assert approximated.messages == simulated.messages
    for quantity, tolerance in _tolerances(mode).items():
        expected, got = getattr(simulated, quantity), getattr(approximated, quantity)
        if expected == 0:
            assert got == 0, f"{quantity}: the model has 0, the fluid view {got}"
            continue
        error = relative_error(got, expected)
        assert error is not None and abs(error) <= tolerance, f"{quantity}: {got} against {expected} ({error:+.1%})"


def test_its_credit_modes_queue_nothing_and_unconstrained_mode_queues_most(both):
    for ranks, _ in SIZES:
        for mode in MODES:
            _, approximated = both[ranks, mode]
            queued = approximated.victim_unexpected_peak_bytes
            assert (queued == 0) == flow_mode(mode).has_credits


@pytest.mark.parametrize("ranks, messages", SIZES)
def test_a_victim_node_runs_out_of_memory_when_the_model_says_so(both, ranks, messages):
    """With the node's memory halfway between its ranks' baselines and the peak it reaches, both views end the
    trial out of memory at about the same time."""
    unconstrained = next(mode for mode in MODES if not flow_mode(mode).has_credits)
    load = _workload(ranks, messages, unconstrained)
    baselines = paper.RANKS_PER_NODE * PARAMS.rank_baseline_bytes
    peak = both[ranks, unconstrained][0].victim_node_peak_bytes
    capped = dataclasses.replace(load, victim_node_memory=baselines + (peak - baselines) // 2)
    simulated, approximated = simulate(capped, PARAMS), fluid(capped, PARAMS)
    assert simulated.status == approximated.status == "out_of_memory"
    assert approximated.runtime_s == pytest.approx(simulated.runtime_s, rel=0.03)
    assert approximated.goodput_bps == 0


def test_a_mode_mailrail_refuses_is_refused_in_both():
    split_among_ranks = next(mode for mode in MODES if flow_mode(mode).split_among == "rank")
    load = dataclasses.replace(_workload(128, 10, split_among_ranks), recv_slots=64)  # fewer slots than senders
    assert simulate(load, PARAMS).status == fluid(load, PARAMS).status == "refused"


def test_the_whole_goodput_experiment_runs_at_every_size():
    """128 MiB a sender at 16,384 ranks, 537 million messages: unconstrained mode's victim node runs out of
    memory, the credit modes deliver every payload."""
    messages = paper.GOODPUT_BYTES_PER_RANK // paper.DATAGRAM_SIZE
    for mode in MODES:
        result = fluid(_workload(16384, messages, mode), PARAMS)
        assert result.status == ("ok" if flow_mode(mode).has_credits else "out_of_memory")
        if result.status == "ok":
            assert result.messages == 16384 * messages
            assert result.goodput_bps == pytest.approx(result.payload_bytes * 8 / result.runtime_s)


def test_a_shared_host_is_not_the_fluid_views():
    with pytest.raises(ParamsError, match="host_cores"):
        fluid(_workload(128, 10, MODES[-1]), PARAMS.replace(host_cores=2))


def _run(*argv: str) -> int:
    try:
        return main(list(argv))
    except SystemExit as exit:
        return int(exit.code or 0)


def test_paper_computes_the_goodput_experiment_at_its_whole_bytes_and_records_the_method(tmp_path):
    out = tmp_path / "paper.json"
    assert _run("simulate", "paper", "--experiments", "goodput", "--method", "fluid", "--json", str(out)) == 0
    document = json.loads(out.read_text())
    points = document["experiments"]["goodput"]["points"]
    assert document["method"] == "fluid" and "--method fluid" in document["commands"][0]
    assert len(points) == len(paper.GOODPUT_RANKS) * len(MODES)
    for point in points:
        assert point["method"] == "fluid" and not point["scaled"]
        assert point["bytes_per_rank"] == paper.GOODPUT_BYTES_PER_RANK
        assert point["runtime_s_at_bytes_asked"] == point["runtime_s"]
    lines = document["experiments"]["goodput"]["paper"]["lines"]
    assert any("in the paper" in line for line in lines)


def test_paper_refuses_what_the_fluid_view_does_not_cover(tmp_path, capsys):
    status = _run(
        "simulate", "paper", "--experiments", "stranding", "--method", "fluid", "--json", str(tmp_path / "p.json")
    )
    assert status == 2
    assert "partners" in capsys.readouterr().err


def test_the_comparison_sets_the_fluid_view_beside_a_models_run(tmp_path, capsys):
    out = tmp_path / "paper.json"
    status = _run(
        "simulate", "paper", "--experiments", "goodput", "--ranks", "512", "--modes", MODES[-1],
        "--max-messages", "20000", "--point-time-limit", "0", "--json", str(out),
    )  # fmt: skip
    assert status == 0
    rows = compare(json.loads(out.read_text()))
    assert [(row["ranks"], row["mode"]) for row in rows] == [(512, MODES[-1])]
    assert abs(rows[0]["runtime_s_error"]) < 0.1
    assert fluid_main([str(out)]) == 0
    assert "| 512 |" in capsys.readouterr().out
