"""``mailrail sweep`` end to end on a tiny configuration, and its handling of runs past the time limit."""

from __future__ import annotations

import argparse
import json

import pytest

from mailrail_tools.bench import sweep
from mailrail_tools.bench.plots import plot_sweep
from mailrail_tools.cli import main

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def sweep_args(**overrides) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    sweep.add_arguments(parser)
    args = parser.parse_args([])
    for name, value in overrides.items():
        setattr(args, name, value)
    return args


def test_study_points_double_ranks_and_victims():
    args = sweep_args(min_ranks=2, max_ranks=16, weak_victims=2)
    assert sweep.study_points("weak", args) == [(2, 2), (4, 2), (8, 2), (16, 2)]
    assert sweep.study_points("victims", sweep_args(victim_ranks=12)) == [(12, 1), (12, 2), (12, 4), (12, 8), (12, 12)]
    assert sweep.study_points("victims", sweep_args(max_ranks=8)) == [(8, 1), (8, 2), (8, 4), (8, 8)]


def test_a_run_past_the_time_limit_stays_in_the_results_and_the_plot(tmp_path):
    timed_out = {"status": "timeout", "time_limit_s": 30.0, "wall_s": 30.0, "ranks": 8}
    finished = {"status": "ok", "wall_s": 3.0, "summary": {"runtime_s_mean": 1.5, "goodput_bps_mean": 2e8}}
    points = [
        sweep.sweep_point("weak", 8, 1, "none", timed_out, 30.0),
        sweep.sweep_point("weak", 8, 1, "node", finished, 30.0),
    ]
    assert points[0]["status"] == "timeout" and "runtime_s" not in points[0]
    assert points[0]["incast_ratio"] == 7 and points[1]["goodput_bps"] == 2e8
    path = plot_sweep({"weak scaling": points}, str(tmp_path / "sweep.png"), "test")
    assert open(path, "rb").read().startswith(PNG_MAGIC)


def test_a_run_a_memory_cap_ended_records_when_in_the_results_table_and_plot(tmp_path):
    from mailrail_tools.bench.compare import note_out_of_memory, outcome_text, table_rows

    nodes = [
        {"node": 0, "oom_kills": 0, "oom_after_s": None, "peak_bytes": 2**26, "limit_bytes": None},
        {"node": 1, "oom_kills": 1, "oom_after_s": 3.25, "peak_bytes": 2**28, "limit_bytes": 2**28},
    ]
    killed = {"status": "out_of_memory", "returncode": -9, "wall_s": 3.5, "oom_nodes": [1], "cluster_nodes": nodes}
    result = note_out_of_memory(dict(killed, network_bytes=10**6))
    assert result["out_of_memory_after_s"] == 3.25 and result["out_of_memory_node"] == 1
    assert outcome_text(result) == "out of memory (node 1, cap 256 MiB) at 3.2 s"
    load = {"rank_nodes": [0, 1], "victim_ranks": [1]}
    (row,) = table_rows({"none": result}, load)
    assert row["status"] == "out of memory (node 1, cap 256 MiB) at 3.2 s" and row["victim node peak MiB"] == 256
    point = sweep.sweep_point("victims", 2, 1, "none", result, 30.0)
    assert point["status"] == "out_of_memory" and point["out_of_memory_after_s"] == 3.25
    path = plot_sweep({"victim sweep": [point]}, str(tmp_path / "sweep.png"), "test")
    assert open(path, "rb").read().startswith(PNG_MAGIC)


@pytest.mark.mpi
@pytest.mark.slow
def test_sweep_runs_end_to_end(tmp_path, clean_environment, capfd):
    out = tmp_path / "sweep"
    code = main(
        [
            "sweep",
            "--min-ranks",
            "2",
            "--max-ranks",
            "4",
            "--victim-ranks",
            "2",
            "--modes",
            "none,node",
            "--messages",
            "100",
            "--trials",
            "1",
            "--datagram-size",
            "512",
            "--out",
            str(out),
        ]
    )
    assert code == 0, capfd.readouterr().out
    with open(out / "sweep.json") as source:
        document = json.load(source)
    assert (out / "sweep.png").read_bytes().startswith(PNG_MAGIC)
    assert document["benchmark"] == "sweep"
    weak, victims = document["studies"]["weak"], document["studies"]["victims"]
    assert [(p["ranks"], p["victims"], p["mode"]) for p in weak] == [
        (2, 1, "none"),
        (2, 1, "node"),
        (4, 1, "none"),
        (4, 1, "node"),
    ]
    assert [(p["ranks"], p["victims"]) for p in victims] == [(2, 1), (2, 1), (2, 2), (2, 2)]
    for point in weak + victims:
        assert point["status"] == "ok"
        assert point["result"]["summary"]["accounting_ok"]
        assert point["runtime_s"] > 0 and point["goodput_bps"] > 0
    assert [p["incast_ratio"] for p in weak] == [1, 1, 3, 3]
    assert "weak scaling" in capfd.readouterr().out
