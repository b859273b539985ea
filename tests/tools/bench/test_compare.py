"""``mailrail compare`` end to end on a small configuration: the table, compare.json, compare.png."""

from __future__ import annotations

import json
import os

import pytest

from mailrail_tools.cli import main

pytestmark = [pytest.mark.mpi, pytest.mark.slow]

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
SMALL = [
    "--cluster",
    "off",
    "--ranks",
    "4",
    "--nodes",
    "2",
    "--messages",
    "200",
    "--trials",
    "2",
    "--datagram-size",
    "1024",
]


def read_outputs(out) -> tuple[dict, bytes]:
    with open(out / "compare.json") as source:
        document = json.load(source)
    return document, (out / "compare.png").read_bytes()


def test_compare_runs_the_four_modes_side_by_side(tmp_path, clean_environment, capfd):
    out = tmp_path / "results"
    assert main(["compare", *SMALL, "--out", str(out)]) == 0
    printed = capfd.readouterr().out
    document, png = read_outputs(out)

    assert png.startswith(PNG_MAGIC) and len(png) > 10_000
    assert document["benchmark"] == "compare"
    load = document["workload"]
    assert (load["ranks"], load["nodes"], load["ranks_per_node"], load["victims"]) == (4, 2, 2, 1)
    assert load["recv_pool_slots"] == 64  # the scarce default budget, the same for every mode
    assert list(document["modes"]) == ["none", "rank", "node", "adaptive"]
    for mode, result in document["modes"].items():
        assert result["status"] == "ok"
        assert result["benchmark"] == "adversarial" and result["flow_control"] == mode
        assert result["config"]["recv_pool_slots"] == 64 and result["datagram_size"] == 1024
        assert result["nodes"] == 2
        assert result["summary"]["accounting_ok"]
        assert all(t["bytes_received"] == 3 * 200 * 1024 for t in result["trials"])
        assert os.listdir(out / "metrics" / mode)  # the time series behind the figure
    rows = {row["mode"]: row for row in document["table"]}
    assert rows["none"]["speedup vs none"] == "1.00x"
    assert rows["none"]["credit msgs"] == 0 and rows["rank"]["credit msgs"] > 0
    # Progress while it ran, then the side-by-side table.
    assert rows["adaptive"]["credit msgs"] > 0
    assert "[1/4] flow control none" in printed and "[4/4] adaptive: ok" in printed
    assert "trial 2/2" in printed
    table = printed[printed.index("[4/4] adaptive: ok") :]  # the table follows the last mode (its headers wrap)
    assert all(mode in table for mode in ("none", "rank", "node", "adaptive"))
    assert "- adaptive: " in table and " requests, " in table  # its requests and revokes, counted


def test_modes_that_the_receive_slots_cannot_back_are_refused_and_said_so(tmp_path, clean_environment, capfd):
    """One receive slot per rank on 4 ranks in 2 nodes: rank and node credits are refused before they start
    (fewer slots than sender ranks, than sending nodes); adaptive credits run, and compare still succeeds."""
    out = tmp_path / "results"
    argv = ["compare", *SMALL, "--modes", "rank,node,adaptive", "--recv-pool-slots", "1", "--out", str(out)]
    assert main(argv) == 0
    printed = capfd.readouterr().out
    document, _ = read_outputs(out)
    modes = document["modes"]
    assert [modes[m]["status"] for m in ("rank", "node", "adaptive")] == ["refused", "refused", "ok"]
    assert "rank-based flow control gets 0 credits per sender rank" in modes["rank"]["reason"]
    assert "node-based flow control gets 0 credits per sending node" in modes["node"]["reason"]
    assert modes["adaptive"]["summary"]["accounting_ok"]
    assert "[1/3] rank: refused (too few receive slots)" in printed
    assert "- node: refused before it started: node-based flow control gets 0 credits" in printed


def test_a_mode_past_the_time_limit_is_reported_not_hidden(tmp_path, clean_environment, capfd):
    out = tmp_path / "results"
    # 0.5 s cannot even start mpiexec with 4 Python ranks: every mode times out.
    assert main(["compare", *SMALL, "--modes", "none,node", "--time-limit", "0.5", "--out", str(out)]) == 1
    printed = capfd.readouterr().out
    document, png = read_outputs(out)
    assert png.startswith(PNG_MAGIC)
    for mode in ("none", "node"):
        assert document["modes"][mode]["status"] == "timeout"
        assert document["modes"][mode]["time_limit_s"] == 0.5
    assert [row["status"] for row in document["table"]] == ["timed out (> 0.5 s)"] * 2
    assert printed.count("timed out (> 0.5 s)") >= 4  # progress lines and table rows


def test_runs_repeat_the_comparison_and_show_the_run_closest_to_the_medians(tmp_path, clean_environment, capfd):
    out = tmp_path / "results"
    argv = ["compare", *SMALL, "--trials", "1", "--modes", "rank,node", "--runs", "3", "--out", str(out)]
    assert main(argv) == 0
    printed = capfd.readouterr().out
    spread = json.loads((out / "runs.json").read_text())
    document, png = read_outputs(out)
    assert png.startswith(PNG_MAGIC) and spread["runs"] == 3
    for number in (1, 2, 3):  # every run keeps its own files
        run = json.loads((out / f"run-{number}" / "compare.json").read_text())
        assert set(run["modes"]) == {"rank", "node"} and (out / f"run-{number}" / "compare.png").exists()
    shown = json.loads((out / f"run-{spread['shown_run']}" / "compare.json").read_text())
    assert document["modes"] == shown["modes"] and document["runs"] == spread
    assert png == (out / f"run-{spread['shown_run']}" / "compare.png").read_bytes()
    for mode in ("rank", "node"):
        values = spread["modes"][mode]["goodput_mbps"]
        assert len(values) == 3 and spread["modes"][mode]["min"] <= spread["modes"][mode]["median"] <= max(values)
    assert "- over 3 runs, goodput median (min-max): rank " in printed
    assert "- node vs rank over 3 runs: " in printed
