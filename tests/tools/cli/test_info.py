"""``mailrail info``: the plan per mode (no MPI) from the sizing code, its usage errors, the report of this MPI."""

from __future__ import annotations

import json

import pytest

from helpers import ROOT, assert_succeeded, mailrail
from mailrail.config import FLOW_CONTROL_MODES, default
from mailrail.flow import memory_plan
from mailrail_tools.cli import main
from mailrail_tools.cli.info import COLUMNS
from mailrail_tools.jobs.which_mpi import mpi_origin

REQUIRED = {"refused": bool, "reason": (str, type(None)), "credits_per_pair": int}
REQUIRED_BYTES = ("recv_bytes_per_rank", "credit_state_bytes_per_rank")
SLOTS, SIZE = default("recv_pool_slots"), default("datagram_size")


def plan(capsys, tmp_path, *flags: str) -> tuple[dict, str]:
    path = tmp_path / "plan.json"
    assert main(["info", "--plan", *flags, "--json", str(path)]) == 0
    return json.loads(path.read_text()), capsys.readouterr().out


def test_the_plan_of_a_4096_rank_job_refuses_rank_mode_and_says_what_to_change(capsys, tmp_path):
    document, out = plan(capsys, tmp_path, "--ranks", "4096", "--ranks-per-node", "64")
    modes = document["modes"]
    assert set(modes) == set(FLOW_CONTROL_MODES)
    for entry in modes.values():
        for key, kind in REQUIRED.items():
            assert isinstance(entry[key], kind), (key, entry)
        for key in REQUIRED_BYTES:
            assert type(entry[key]) is int, (key, entry)
    # the default receive slots (fewer than 4096) for 4096 sender ranks: 0 credits each
    assert modes["rank"]["refused"] and "at least 4096" in modes["rank"]["reason"]
    assert "flow_control='node'" in modes["rank"]["reason"]
    assert modes["rank"]["credits_per_pair"] == 0
    assert modes["node"] == {**modes["node"], "refused": False, "reason": None, "credits_per_pair": SLOTS // 64}
    assert modes["adaptive"]["credits_per_pair"] == SLOTS // 8  # the lease
    assert not modes["none"]["refused"] and modes["none"]["credits_per_pair"] == 0
    assert all(entry["recv_bytes_per_rank"] == SLOTS * SIZE for entry in modes.values())
    assert "rank: rank-based flow control gets 0 credits per sender rank" in out
    assert max(len(line) for line in out.splitlines()) <= COLUMNS


def test_the_plan_is_memory_plan_over_the_validated_knobs(capsys, tmp_path):
    flags = ["--ranks", "100", "--ranks-per-node", "8", "--recv-pool-slots", "200", "--datagram-size", "1024"]
    document, _ = plan(capsys, tmp_path, *flags, "--send-pool-slots", "16", "--credit-threshold", "4")
    assert document["job"]["nodes"] == 13
    for mode, entry in document["modes"].items():
        expected = memory_plan(
            mode, ranks=100, ranks_per_node=8, recv_slots=200, send_slots=16, datagram_size=1024, credit_threshold=4
        )
        assert entry["refused"] == (expected.refused is not None)
        assert entry["reason"] == expected.refused
        assert entry["credits_per_pair"] == (expected.credits_per_pair or 0)
        assert entry["recv_bytes_per_rank"] == 200 * 1024 and entry["send_bytes_per_rank"] == 16 * 1024
        assert entry["credit_state_bytes_per_rank"] == expected.credit_bytes + expected.shared_bytes_per_rank
        assert entry["total_bytes_per_rank"] == expected.total_bytes_per_rank
    assert document["modes"]["rank"]["credits_per_pair"] == 2  # 200 slots // 100 ranks
    assert document["modes"]["node"]["credits_per_pair"] == 15  # 200 // 13 nodes


def test_an_explicit_credits_per_pair_that_does_not_fit_refuses_the_static_modes(capsys, tmp_path):
    document, _ = plan(capsys, tmp_path, "--ranks", "16", "--ranks-per-node", "4", "--credits-per-pair", "64")
    modes = document["modes"]
    assert modes["rank"]["refused"] and "MAILRAIL_CREDITS_PER_PAIR=64 x 16 sender ranks" in modes["rank"]["reason"]
    assert (
        not modes["node"]["refused"] and modes["node"]["credits_per_pair"] == 64
    )  # 64 x 4 nodes <= the default receive slots
    assert modes["adaptive"]["credits_per_pair"] == 64


@pytest.mark.parametrize(
    ("flags", "named"),
    [
        (["--ranks", "0", "--ranks-per-node", "4"], "argument --ranks: must be an integer >= 1, got '0'"),
        (["--ranks", "8", "--ranks-per-node", "16"], "--ranks-per-node 16 exceeds --ranks 8"),
        (["--ranks", "8", "--ranks-per-node", "4", "--recv-pool-slots", "-1"], "--recv-pool-slots: must be in 1.."),
        (["--ranks", "8", "--ranks-per-node", "0"], "--ranks-per-node: must be in 1.."),
        (["--ranks", "8"], "--plan needs --ranks-per-node"),
        (["--ranks-per-node", "8"], "--plan needs --ranks N"),
        (["--ranks", "8", "--ranks-per-node", "4", "--max-recvs", "3"], "unrecognized arguments: --max-recvs"),
    ],
)
def test_a_bad_plan_is_a_one_line_usage_error_naming_the_value(flags, named, capsys, monkeypatch):
    for variable in ("MAILRAIL_RANKS_PER_NODE", "MAILRAIL_RECV_POOL_SLOTS"):
        monkeypatch.delenv(variable, raising=False)
    try:
        status = main(["info", "--plan", *flags])
    except SystemExit as exit_:
        status = exit_.code
    assert status == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("mailrail info: error: "), err
    assert named in err


def test_ranks_without_plan_is_a_usage_error(capsys):
    assert main(["info", "--ranks", "8"]) == 2
    assert "add --plan" in capsys.readouterr().err


@pytest.mark.smoke
def test_info_reports_the_mpi_mpi4py_loads_and_the_librarys_own_choices(tmp_path):
    """A lone process (MPI started only for the node count and TAG_UB); compared with the library's answers."""
    path = tmp_path / "info.json"
    completed = mailrail(
        "info", "--json", str(path), env={"MAILRAIL_ATOMICS": "mpi", "MAILRAIL_IMPLEMENTATION": "python"}
    )
    assert_succeeded(completed)
    report = json.loads(path.read_text())
    found = mpi_origin()
    assert report["mpi"]["library_path"] == found.library_path
    assert report["mpi"]["flavor"] == found.flavor
    assert report["mpi4py"]["wheel"] == found.wheel
    assert report["implementation"] == {"name": "python", "reason": "MAILRAIL_IMPLEMENTATION=python"}
    assert report["atomics"] == {"configured": "mpi", "used": "mpi"}
    assert report["nodes"]["count"] == 1 and report["nodes"]["ranks"] == 1
    assert report["tag_ub"] >= 32767  # the standard's least
    assert max(len(line) for line in completed.stdout.splitlines()) <= COLUMNS
    assert f"MPI library       {found.library.split(',')[0]}" in completed.stdout


def test_the_cluster_pages_plan_is_what_the_command_prints(capsys, monkeypatch):
    """docs/running-on-a-cluster.md shows real output: the plan it prints must be today's."""
    for variable in ("MAILRAIL_RECV_POOL_SLOTS", "MAILRAIL_SEND_POOL_SLOTS", "MAILRAIL_DATAGRAM_SIZE"):
        monkeypatch.delenv(variable, raising=False)
    page = (ROOT / "docs" / "running-on-a-cluster.md").read_text()
    command = "$ mailrail info --plan --ranks 4096 --ranks-per-node 64\n"
    shown = page[page.index(command) + len(command) :].split("```")[0]
    assert main(command.split()[2:]) == 0
    assert capsys.readouterr().out == shown
