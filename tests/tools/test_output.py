"""The printed tables fit a terminal's 100 columns: headers and text wrap, numbers stay whole, columns
left out are named; the real tables of compare and sweep with the data of real runs."""

from __future__ import annotations

import pytest

from mailrail_tools.bench import sweep
from mailrail_tools.bench.compare import note_out_of_memory, results_table, table_rows
from mailrail_tools.output import TABLE_WIDTH, format_table


def widest_line(table: str) -> int:
    return max(len(line) for line in table.splitlines())


def test_a_table_that_fits_is_one_line_a_row():
    assert format_table(["atomics", "ranks", "us/op"], [("cpu", 2, 0.0123), ("mpi", 2, 1.5)]).splitlines() == [
        "atomics  ranks  us/op",
        "---------------------",
        "    cpu      2   0.01",
        "    mpi      2   1.50",
    ]


def test_floats_read_as_numbers_at_every_size():
    rows = [("rate", 1_163_421.7), ("huge", 2.5e19), ("tiny", 0.00042), ("negative", -3_000_000.0)]
    assert format_table(["what", "value"], rows).splitlines()[2:] == [
        "    rate   1,163,422",
        "    huge     2.5e+19",
        "    tiny     0.00042",
        "negative  -3,000,000",
    ]


def test_a_wide_table_wraps_headers_and_text_and_keeps_numbers_whole():
    headers = ["mode", "status", *(f"measure number {i} in MiB" for i in range(6))]
    rows = [["node", "out of memory (node 1, cap 384 MiB) at 12.3 s", *([123456.789] * 6)]]
    table = format_table(headers, rows)
    assert widest_line(table) <= TABLE_WIDTH
    assert table.count("123,456.79") == 6  # no number broken across lines, none left out
    assert "left out" not in table
    words = table.split()
    assert all(word in words for word in "out of memory (node 1, cap 384 MiB) at 12.3 s".split())


def test_columns_that_cannot_fit_are_left_out_and_named_those_asked_first():
    headers = ["name", *(f"column{i:02d}" for i in range(12))]
    rows = [["first", *range(12)]]
    table = format_table(headers, rows, drop_first=["column03"])
    lines = table.splitlines()
    assert widest_line(table) <= TABLE_WIDTH
    assert lines[0].split() == ["name", "column00", "column01", "column02", *(f"column{i:02d}" for i in range(4, 10))]
    assert lines[-1] == "(left out to fit 100 columns: column03, column10, column11; the JSON output has every column)"


def cluster_run(status: str = "ok", **summary: float) -> dict:
    """A result of one mode of compare on a 4-node virtual cluster, as run_adversarial returns it."""
    nodes = [
        {"node": n, "oom_kills": 0, "oom_after_s": None, "peak_bytes": 300 * 2**20, "limit_bytes": 384 * 2**20}
        for n in range(4)
    ]
    result = {"status": status, "returncode": 0, "wall_s": 41.5, "cluster_nodes": nodes, "network_bytes": 8.4e9}
    if status == "ok":
        result["summary"] = {
            "runtime_s_mean": 12.345,
            "goodput_bps_mean": 7.21e9,
            "peak_victim_rss_bytes": 96.5 * 2**20,
            "victim_rss_growth_bytes": 12.25 * 2**20,
            "peak_sender_rss_bytes": 88.0 * 2**20,
            "credit_messages": 1_234_567,
            "deferred_high_water": 4_096,
            "internode_payload_bytes": 8.1e9,
            **summary,
        }
        result["trials"] = [{"runtime_s": 12.345, "goodput_bps": 7.21e9}]  # what the table's medians are of
    if status == "out_of_memory":
        nodes[1].update(oom_kills=3, oom_after_s=8.75, peak_bytes=384 * 2**20)
        result.update(oom_nodes=[1], returncode=-9)
    return note_out_of_memory(result)


def test_compare_s_table_on_a_cluster_fits_and_names_what_it_leaves_out():
    results = {
        "none": cluster_run("out_of_memory"),
        "rank": cluster_run(),
        "node": cluster_run(credit_messages=308_641),
        "adaptive": cluster_run("timeout") | {"time_limit_s": 600.0},
    }
    load = {"rank_nodes": [0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3], "victim_ranks": [4]}
    table = results_table(table_rows(results, load))
    assert widest_line(table) <= TABLE_WIDTH, table
    assert "1,234,567" in table and "308,641" in table and "7,210.00" in table  # credit msgs, goodput
    assert "peak" in table.split() and "384.00" in table  # the victim node's peak: the result
    assert "1.04" in table  # network bytes per payload byte
    note = " ".join(table.split("(left out to fit 100 columns: ")[1].split())
    assert note == "sender RSS MiB, deferred peak, network MB; the JSON output has every column)"
    assert "speedup vs none" not in table  # unconstrained mode did not finish: nothing to compare with


def test_sweep_s_table_fits_with_every_column():
    points = [
        sweep.sweep_point("victims", 16, victims, mode, cluster_run(status), 600.0) | {"nodes": 4}
        for victims in (1, 2, 4, 8)
        for mode, status in (("none", "out_of_memory"), ("rank", "ok"), ("node", "ok"), ("adaptive", "ok"))
    ]
    table = sweep.study_table(points)
    assert widest_line(table) <= TABLE_WIDTH, table
    assert "left out" not in table
    assert table.count("7,210.00") == 12
    words = table.split()  # the status wraps where the column ends
    assert words.count("memory") == words.count("384") == words.count("8.8") == 4


def test_a_failed_fault_s_row_wraps_its_error_under_the_exit_column():
    from mailrail_tools.bench.faults import error_row

    error = "the job did not end within 30 s of the fault: mpiexec still running with 4 ranks alive (pids 1234, 1235)"
    first, *rest = error_row("rank-sigkill", error).splitlines()
    assert rest and max(len(line) for line in (first, *rest)) <= TABLE_WIDTH
    assert first.split()[:3] == ["rank-sigkill", "-", "-"] and first[35:].startswith("the job did not end")
    assert all(line[:35] == " " * 35 for line in rest)
    assert " ".join([first[35:], *(line[35:] for line in rest)]) == error


@pytest.mark.parametrize("width", [60, 80])
def test_the_width_is_a_parameter(width):
    headers = ["name", *(f"a long header {i}" for i in range(6))]
    assert widest_line(format_table(headers, [["x", *range(6)]], width=width)) <= width
