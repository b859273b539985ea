"""``mailrail simulate``: its four commands end to end on small jobs, and their refusals of bad input."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from mailrail.flow import MODE_NAMES
from mailrail_simulate.calibrate import WINDOWS
from mailrail_simulate.params import CALIBRATED, OMNIPATH, ParamsError, load_params
from mailrail_simulate.runs import read_runs
from mailrail_tools.cli import main

FIXTURE = Path(__file__).parent / "fixtures" / "shared-memory-8"
REQUIRED = {"ranks", "mode", "runtime_s", "goodput_bps", "victim_peak_bytes", "credit_messages", "wall_s"}


def run(*argv: str) -> int:
    try:
        return main(list(argv))
    except SystemExit as exit:
        return int(exit.code or 0)


def test_adversarial_writes_every_point_with_its_figures_and_a_figure(tmp_path, capsys):
    out, png = tmp_path / "sim.json", tmp_path / "sim.png"
    status = run(
        "simulate", "adversarial", "--ranks", "8,12", "--ranks-per-node", "4", "--victims", "1",
        "--bytes-per-rank", "409600", "--recv-slots", "16", "--json", str(out), "--png", str(png),
    )  # fmt: skip
    assert status == 0
    document = json.loads(out.read_text())
    points = document["points"]
    assert [(p["ranks"], p["mode"]) for p in points] == [(r, m) for r in (8, 12) for m in MODE_NAMES]
    for point in points:
        assert REQUIRED <= set(point)
        assert point["status"] == "ok" and point["goodput_bps"] > 0 and not point["scaled"]
    credit = {p["mode"]: p["credit_messages"] for p in points if p["ranks"] == 12}
    assert credit["none"] == 0 < credit["node"] < credit["rank"]
    assert png.stat().st_size > 10_000
    printed = capsys.readouterr()
    table = [line for line in printed.out.splitlines() if not line.startswith("wrote")]
    assert "goodput Gb/s" in printed.out and all(len(line) <= 100 for line in table)
    assert "[8/8] 12 ranks" in printed.err  # progress


def test_a_projection_needs_no_command_line_and_is_what_the_command_writes(tmp_path):
    """`project` takes the workload as parameters: the points `simulate adversarial` writes are its points,
    field for field but the wall time."""
    from mailrail_simulate.projection import project

    out = tmp_path / "sim.json"
    status = run(
        "simulate", "adversarial", "--ranks", "8", "--ranks-per-node", "4", "--victims", "1", "--modes", "node,none",
        "--bytes-per-rank", "204800", "--credits-per-pair", "4", "--json", str(out),
    )  # fmt: skip
    assert status == 0
    params, _ = load_params(CALIBRATED)
    points = project(params, [(8, 1)], ["node", "none"], 204800, ranks_per_node=4, credits_per_pair=4)
    written = json.loads(out.read_text())["points"]
    assert [{**p, "wall_s": 0} for p in written] == [{**p, "wall_s": 0} for p in json.loads(json.dumps(points))]


def test_adversarial_scales_bytes_down_to_its_message_budget_and_says_so(tmp_path, capsys):
    out = tmp_path / "sim.json"
    assert (
        run("simulate", "adversarial", "--ranks", "64", "--modes", "node", "--max-messages", "640", "--json", str(out))
        == 0
    )
    (point,) = json.loads(out.read_text())["points"]
    assert (
        point["scaled"] and point["bytes_per_rank"] == 10 * 4096 and point["bytes_per_rank_asked"] == int(12.8 * 2**20)
    )
    assert point["runtime_s_at_bytes_asked"] == pytest.approx(point["runtime_s"] * 3277 / 10)
    assert "scaled down" in capsys.readouterr().out


def test_calibrate_fits_a_recorded_run_and_validate_predicts_it(tmp_path):
    params_file = tmp_path / "fitted.json"
    status = run(
        "simulate", "calibrate", "--runs", str(FIXTURE), "--out", str(params_file),
        "--fit-messages", "400", "--max-evaluations", "6",
    )  # fmt: skip
    assert status == 0
    params, document = load_params(str(params_file))
    assert document["runs"] == ["shared-memory-8/compare.json"]
    assert document["date"] and document["fit"]["cases"]
    assert document["fit"]["cpu"]["rms_log_error"] <= document["fit"]["cpu"]["start_rms_log_error"]
    assert params.host_cores == os.cpu_count() and params.send_cpu_s > 0 and params.rank_baseline_bytes > 0
    report = tmp_path / "validation.json"
    assert run("simulate", "validate", "--params", str(params_file), "--runs", str(FIXTURE), "--json", str(report)) == 0
    validation = json.loads(report.read_text())
    assert len(validation["cases"]) == 4
    assert validation["max_abs_error"] >= validation["median_abs_error"] >= 0
    for case in validation["cases"]:
        assert case["outcome_agrees"] and case["goodput_error"] is not None and case["memory_error"] is not None


def test_paper_projects_an_experiment_beside_the_papers_numbers(tmp_path, capsys):
    out = tmp_path / "paper.json"
    status = run(
        "simulate", "paper", "--experiments", "stranding", "--modes", "none,rank,node", "--max-messages", "4096",
        "--json", str(out),
    )  # fmt: skip
    assert status == 0
    experiment = json.loads(out.read_text())["experiments"]["stranding"]
    assert {p["mode"] for p in experiment["points"]} == {"none", "rank", "node"}
    assert any("the paper" in line for line in experiment["paper"]["lines"])
    assert "rank runtime over none" in capsys.readouterr().out


def test_paper_runs_only_the_job_sizes_asked(tmp_path):
    out = tmp_path / "paper.json"
    status = run(
        "simulate", "paper", "--experiments", "table1,stranding", "--ranks", "512", "--modes", "node",
        "--max-messages", "2048", "--json", str(out),
    )  # fmt: skip
    assert status == 0
    experiments = json.loads(out.read_text())["experiments"]
    assert list(experiments) == ["table1"]  # stranding has no 512-rank point
    assert [(p["ranks"], p["mode"]) for p in experiments["table1"]["points"]] == [(512, "node")]


def test_runs_of_separate_job_sizes_combine_into_one_comparison(tmp_path, capsys):
    parts = []
    for ranks in (512, 1024):
        parts.append(tmp_path / f"t{ranks}.json")
        common = ["--experiments", "table1", "--modes", "none,node", "--max-messages", "4096"]
        assert run("simulate", "paper", *common, "--ranks", str(ranks), "--json", str(parts[-1])) == 0
    first = json.loads(parts[0].read_text())
    assert first["commands"] == [
        "mailrail simulate paper --experiments table1 --ranks 512 --modes none,node --params omnipath "
        "--max-messages 4096 --point-time-limit 480 --json t512.json"
    ]
    out = tmp_path / "paper.json"
    assert run("simulate", "paper", "--combine", str(parts[1]), str(parts[0]), "--json", str(out)) == 0
    combined = json.loads(out.read_text())
    table = combined["experiments"]["table1"]
    assert [(p["ranks"], p["mode"]) for p in table["points"]] == [
        (512, "none"),
        (512, "node"),
        (1024, "none"),
        (1024, "node"),
    ]
    rows = {row["ranks"]: row for row in table["paper"]["rows"]}
    assert rows[512]["model_node_s"] and rows[1024]["model_node_s"] and rows[2048]["model_node_s"] is None
    assert len(combined["commands"]) == 2
    assert "speedup over none" in capsys.readouterr().out
    # the same point twice, or another parameter set, is refused naming it
    assert run("simulate", "paper", "--combine", str(parts[0]), str(parts[0]), "--json", str(out)) == 2
    assert "table1 has these points twice" in capsys.readouterr().err
    other = tmp_path / "other.json"
    common = ["--experiments", "table1", "--ranks", "2048", "--modes", "node", "--max-messages", "4096"]
    assert run("simulate", "paper", *common, "--set", "ingest_cpu_s=1e-6", "--json", str(other)) == 0
    assert run("simulate", "paper", "--combine", str(parts[0]), str(other), "--json", str(out)) == 2
    assert "other parameters" in capsys.readouterr().err


def test_the_shipped_parameter_sets_load_and_omnipath_inherits_the_calibration():
    calibrated, document = load_params(CALIBRATED)
    assert document["date"] and document["runs"] and calibrated.host_cores
    omnipath, provenance = load_params(OMNIPATH)
    assert omnipath.host_cores is None and omnipath.link_Bps == 12.5e9
    assert omnipath.recv_cpu_s == calibrated.recv_cpu_s  # endpoint costs are ours, never the paper's
    assert set(provenance["sources"]) <= set(omnipath.as_dict())
    # every constant of loss and its recovery names its source, or says it is assumed
    loss = {name for name in omnipath.as_dict() if name.startswith(("recv_context", "retransmit", "flow_", "ack_"))}
    assert loss | {"ingest_cpu_s", "copy_Bps", "congestion_control", "node_memory_bytes"} <= set(provenance["sources"])
    assert omnipath.recv_context_entries == 2048 and omnipath.retransmit_timeout_min_s == 0.16


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ('{"params": {"recv_cpu_s": -1}}', "recv_cpu_s=-1: must be >= 0"),
        ('{"params": {"speed": 1}}', "unknown parameter(s) speed"),
        ('{"params": {"link_Bps": "fast"}}', "link_Bps='fast': a finite number"),
        ('{"params": {"host_cores": 0}}', "host_cores=0"),
        ("[1, 2]", "a parameter file is an object with a 'params' object"),
        ("{", "is not JSON"),
    ],
)
def test_a_bad_parameter_file_is_refused_naming_the_value(tmp_path, capsys, content, message):
    path = tmp_path / "params.json"
    path.write_text(content)
    with pytest.raises(ParamsError, match=None) as refused:
        load_params(str(path))
    assert message in str(refused.value)
    assert (
        run("simulate", "adversarial", "--ranks", "8", "--params", str(path), "--json", str(tmp_path / "x.json")) == 2
    )
    error = capsys.readouterr().err.strip()
    assert message in error and len(error.splitlines()) == 1


def test_runs_that_are_not_results_are_refused(tmp_path, capsys):
    assert run("simulate", "calibrate", "--runs", str(tmp_path / "nothing"), "--out", str(tmp_path / "p.json")) == 2
    assert "no such file or directory" in capsys.readouterr().err
    (tmp_path / "compare.json").write_text('{"benchmark": "stream"}')
    assert run("simulate", "validate", "--runs", str(tmp_path), "--json", str(tmp_path / "v.json")) == 2
    assert "not a compare or sweep result" in capsys.readouterr().err


def test_a_point_is_scaled_down_to_fit_its_time_limit(tmp_path):
    """A pilot run measures what a message costs: with 50 ms for a point of 8,000 messages (less than all of
    them take), the point models fewer messages per rank, says so, and scales its runtime back."""
    out = tmp_path / "sim.json"
    argv = ["simulate", "adversarial", "--ranks", "8", "--ranks-per-node", "4", "--victims", "1", "--modes", "none"]
    argv += ["--bytes-per-rank", str(1000 * 4096), "--point-time-limit", "0.05", "--json", str(out)]
    assert run(*argv) == 0
    (point,) = json.loads(out.read_text())["points"]
    assert point["scaled"] and point["bytes_per_rank"] < 1000 * 4096
    assert point["runtime_s_at_bytes_asked"] > point["runtime_s"]


def test_the_model_and_its_flags_default_to_the_incasts_knobs():
    """One owner of a knob's default (config.py, and the incast's own datagrams and pools in incast.py): the model,
    its projections and `simulate`'s flags read it, never restate it."""
    import dataclasses
    import inspect

    from mailrail.config import Config, default
    from mailrail_simulate.model import Workload
    from mailrail_simulate.projection import project, recv_slots_for
    from mailrail_tools.cli import build_parser
    from mailrail_tools.incast import RAIL

    knobs = dataclasses.replace(Config(), **RAIL)
    assert RAIL["datagram_size"] == 4096  # the paper's
    load = Workload(ranks=2, ranks_per_node=1, victims=1, messages_per_rank=1, mode="none")
    assert (load.datagram_size, load.recv_slots, load.send_slots, load.credit_threshold, load.piggyback) == (
        knobs.datagram_size,
        knobs.recv_pool_slots,
        knobs.send_pool_slots,
        knobs.credit_threshold,
        knobs.piggyback,
    )
    argv = ["simulate", "adversarial"]
    flags = build_parser(argv).parse_args(["--ranks", "8", "--json", "x.json"])
    assert (flags.datagram_size, flags.send_slots, flags.credit_threshold) == (
        knobs.datagram_size,
        knobs.send_pool_slots,
        knobs.credit_threshold,
    )
    assert (flags.recv_slots, flags.credits_per_pair) == (None, None)
    assert recv_slots_for("rank", 8, flags.ranks_per_node) == knobs.recv_pool_slots
    defaults = {name: p.default for name, p in inspect.signature(project).parameters.items()}
    assert (defaults["datagram_size"], defaults["send_slots"], defaults["credit_threshold"]) == (
        knobs.datagram_size,
        knobs.send_pool_slots,
        knobs.credit_threshold,
    )
    with pytest.raises(KeyError, match="no knob named 'recv_slots'"):
        default("recv_slots")


def test_set_changes_one_parameter_and_the_json_says_which(tmp_path, capsys):
    """A loss-bounding change to the calibrated set: a one-entry receive context loses packets, which the
    points count and the table shows."""
    out = tmp_path / "sim.json"
    status = run(
        "simulate", "adversarial", "--ranks", "8", "--ranks-per-node", "4", "--victims", "1", "--modes", "none",
        "--bytes-per-rank", "204800", "--json", str(out),
        "--set", "recv_context_entries=1", "--set", "flow_window_packets=8",
        "--set", "retransmit_timeout_min_s=0.01", "--set", "retransmit_timeout_max_s=0.04",
    )  # fmt: skip
    assert status == 0
    document = json.loads(out.read_text())
    assert document["params"]["recv_context_entries"] == 1 and document["params_set"][0] == "recv_context_entries=1"
    (point,) = document["points"]
    assert point["status"] == "ok" and point["dropped_packets"] > 0
    assert point["retransmitted_fraction"] == point["retransmitted_packets"] / point["messages"] > 0
    assert "resent" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ("recv_context_entries", "NAME=VALUE"),
        ("no_such=1", "unknown parameter(s) no_such"),
        ("recv_context_entries=8", "flow_window_packets and retransmit_timeout_min_s"),
        ("link_Bps=fast", "NAME=VALUE with a JSON value"),
    ],
)
def test_a_bad_set_is_refused_naming_it(tmp_path, capsys, change, message):
    status = run("simulate", "adversarial", "--ranks", "8", "--json", str(tmp_path / "x.json"), "--set", change)
    assert status == 2
    assert message in capsys.readouterr().err


def test_a_scaled_point_whose_victim_node_would_outgrow_its_memory_says_so(tmp_path):
    """Scaled to a tenth, an unconstrained victim's node holds a tenth of its unexpected messages: the point
    finishes, but says that at the bytes asked the node's memory would have run out."""
    out = tmp_path / "sim.json"
    common = ["--ranks", "16", "--ranks-per-node", "4", "--victims", "1", "--bytes-per-rank", "4096000",
              "--max-messages", "1600", "--set", "rank_baseline_bytes=0", "--json", str(out)]  # fmt: skip
    assert run("simulate", "adversarial", "--modes", "none,node", *common, "--set", "node_memory_bytes=8000000") == 0
    none, node = json.loads(out.read_text())["points"]
    assert none["scaled"] and none["status"] == "ok" and none["status_at_bytes_asked"] == "out_of_memory"
    assert 0 < none["victim_node_peak_bytes"] < 8_000_000 < none["victim_node_peak_bytes"] * 10
    assert node["status_at_bytes_asked"] == "ok"


def test_a_scaled_point_agrees_with_the_whole_one_on_what_scaling_keeps(tmp_path):
    """64 ranks on 8 nodes, every message (1,200 a rank) against a quarter of them scaled back: goodput and the
    runtime at the bytes asked agree within 1% (node, rank, none), the credit modes' victim memory exactly and
    their credit messages within 3%; unconstrained victim memory grows a little faster than linearly (the
    scaled point's projection is low by under 10%).  Adaptive credits are not claimed: their start-up
    (leases being handed out) is a larger share of a shorter run."""
    points = {}
    for name, budget in (("whole", 76_800), ("scaled", 19_200)):
        out = tmp_path / f"{name}.json"
        status = run(
            "simulate", "adversarial", "--ranks", "64", "--ranks-per-node", "8", "--victims", "2",
            "--modes", "none,rank,node", "--params", "omnipath", "--credits-per-pair", "8", "--credit-threshold", "2",
            "--bytes-per-rank", str(1200 * 4096), "--max-messages", str(budget), "--point-time-limit", "0",
            "--json", str(out),
        )  # fmt: skip
        assert status == 0
        points[name] = {p["mode"]: p for p in json.loads(out.read_text())["points"]}
    for mode in ("none", "rank", "node"):
        whole, scaled = points["whole"][mode], points["scaled"][mode]
        assert not whole["scaled"] and scaled["scaled"]
        assert scaled["goodput_bps"] == pytest.approx(whole["goodput_bps"], rel=0.01)
        assert scaled["runtime_s_at_bytes_asked"] == pytest.approx(whole["runtime_s"], rel=0.01)
        memory = scaled["victim_peak_bytes_at_bytes_asked"]
        if mode == "none":
            assert 0.9 * whole["victim_peak_bytes"] < memory <= whole["victim_peak_bytes"]
        else:
            assert memory == whole["victim_peak_bytes"]
            assert scaled["credit_messages_at_bytes_asked"] == pytest.approx(whole["credit_messages"], rel=0.03)


def test_a_point_out_of_memory_at_the_bytes_asked_has_no_goodput_to_compare():
    from mailrail_simulate.paper_comparison import compare_with_paper

    def point(ranks, mode, goodput, status="ok"):
        return {"ranks": ranks, "mode": mode, "goodput_bps": goodput, "status": "ok", "status_at_bytes_asked": status}

    points = [point(512, "none", 30e9), point(16384, "none", 30e9, "out_of_memory")]
    points += [point(512, "node", 22e9), point(16384, "node", 11e9)]
    comparison = compare_with_paper("goodput", points)
    rows = {row["mode"]: row for row in comparison["rows"]}
    assert rows["none"]["model_fall"] is None and rows["node"]["model_fall"] == pytest.approx(0.5)
    (none,) = [line for line in comparison["lines"] if line.startswith("none")]
    assert "n/a" in none and "out of memory or unfinished at 16384 ranks" in none


# a shallow-queue run cut to 200 messages a rank, recorded with offload packets on the links (its unconstrained
# mode timed out): a run's shape, whatever it measured
LOSSY_FIXTURE = Path(__file__).parent / "fixtures" / "lossy-16kb"


def test_a_lossy_run_is_read_with_its_queue_its_trials_time_and_tcps_resent_segments():
    cases = {case.workload.mode: case for case in read_runs([str(LOSSY_FIXTURE)])}
    document = json.loads((LOSSY_FIXTURE / "compare.json").read_text())
    rank = cases["rank"]
    # tc's 16 KiB limit and the token bucket's burst at 500 Mb/s (64 KiB and a packet: more than 1 ms of it)
    assert rank.workload.link_queue_bytes == 16384 + 64 * 1024 + 1500
    assert rank.workload.time_limit_s == 120 / 2  # the mode's limit, shared by its 2 trials
    nodes = document["modes"]["rank"]["cluster_nodes"]
    assert rank.retransmitted_per_packet == pytest.approx(
        sum(n["tcp_retrans_segs"] for n in nodes) / sum(n["tcp_out_segs"] for n in nodes)
    )
    assert cases["none"].status == "timeout" and cases["none"].goodput_bps is None


def test_fit_window_chooses_a_lossy_sets_window_on_runs_and_validate_reports_each_quantity_per_mode(tmp_path, capsys):
    out = tmp_path / "tcp.json"
    assert run("simulate", "fit-window", "--runs", str(LOSSY_FIXTURE), "--out", str(out)) == 0
    params, document = load_params(str(out))
    scores = document["fit"]["windows"]
    assert [s["window"] for s in scores] == list(WINDOWS) and params.flow_window_packets in WINDOWS
    best = max(s["outcomes_agree"] for s in scores)
    assert next(s for s in scores if s["window"] == params.flow_window_packets)["outcomes_agree"] == best
    assert document["sources"]["retransmit_timeout_min_s"] and params.drop_tail and params.selective_recovery
    assert "chose flow_window_packets=" in capsys.readouterr().out
    report = tmp_path / "validation.json"
    assert run("simulate", "validate", "--params", str(out), "--runs", str(LOSSY_FIXTURE), "--json", str(report)) == 0
    validation = json.loads(report.read_text())
    by_mode = validation["by_mode"]
    assert set(by_mode) == set(MODE_NAMES) and all(entry["cases"] == 1 for entry in by_mode.values())
    for entry in by_mode.values():  # each quantity apart: nothing pooled over modes
        assert set(entry) == {"goodput", "victim_memory", "retransmitted_per_packet", "outcomes_agree", "cases"}
    for case in validation["cases"]:
        assert case["measured_retransmitted_per_packet"] > 0  # TCP sent segments again in every mode of the run
        assert case["predicted_retransmitted_per_packet"] is not None
        assert case["retransmitted_difference"] == pytest.approx(
            case["predicted_retransmitted_per_packet"] - case["measured_retransmitted_per_packet"]
        )
        assert case["outcome_agrees"] == (case["measured_status"] == case["predicted_status"])
    assert "resent |difference|" in capsys.readouterr().out
