"""``mailrail compare`` and ``mailrail sweep``: a flag out of range is a one-line usage error (exit 2),
found before a virtual cluster is built or a result file is touched."""

from __future__ import annotations

import pytest

from mailrail_tools.cli import main
from mailrail_tools.cluster.virtual import VirtualCluster


@pytest.fixture
def no_cluster(monkeypatch):
    """Building a cluster fails the test: every check must come first."""

    def refuse(self):
        raise AssertionError("a cluster was built before the flags were checked")

    monkeypatch.setattr(VirtualCluster, "up", refuse)


def exit_status(argv: list[str]) -> int:
    try:
        return main(argv)
    except SystemExit as stop:  # argparse's own errors
        return int(stop.code)


COMPARE = [
    (["--trials", "0"], "argument --trials: must be an integer in 1.."),
    (["--messages", "-5"], "argument --messages: must be an integer in 0.."),
    (["--bytes-per-rank", "-1"], "argument --bytes-per-rank"),
    (["-n", "1"], "argument -n/--ranks: must be an integer in 2.."),
    (["--nodes", "0"], "argument --nodes: must be an integer in 1..250"),
    (["--victims", "0"], "argument --victims: must be an integer in 1.."),
    (["-n", "4", "--victims", "5"], "--victims and --nodes may not exceed --ranks 4 (got 5, 4)"),
    (["-n", "4", "--nodes", "8"], "--victims and --nodes may not exceed --ranks 4 (got 1, 8)"),
    (["--time-limit", "0"], "argument --time-limit: must be a number in 0.1..1e+06, got '0'"),
    (["--time-limit", "nan"], "argument --time-limit"),
    (["--metrics-interval", "0"], "argument --metrics-interval"),
    (["--modes", "none,fast"], "argument --modes: each must be one of none,rank,node,adaptive"),
    (["--node-slots", "0"], "argument --node-slots: must be an integer in 1.."),
    (["--datagram-size", "0"], "argument --datagram-size"),
]

SWEEP = [
    (["--trials", "0"], "argument --trials"),
    (["--min-ranks", "1"], "argument --min-ranks: must be an integer in 2.."),
    (["--min-ranks", "8", "--max-ranks", "4"], "--min-ranks 8 exceeds --max-ranks 4"),
    (["--weak-victims", "0"], "argument --weak-victims"),
    (["--weak-victims", "32"], "--weak-victims 32 exceeds --max-ranks 16"),
    (["--victim-ranks", "1"], "argument --victim-ranks: must be an integer in 2.."),
    (["--node-ranks", "0"], "argument --node-ranks"),
    (["--time-limit", "-1"], "argument --time-limit"),
    (["--studies", "strong"], "argument --studies: each must be one of weak,victims"),
    (["--cluster", "2", "--ranks-per-node", "2"], "--ranks-per-node makes virtual nodes on one host"),
]


@pytest.mark.parametrize("command, flags, message", [("compare", *c) for c in COMPARE] + [("sweep", *c) for c in SWEEP])
def test_a_flag_out_of_range_is_one_line_before_anything_is_built(
    command, flags, message, tmp_path, capsys, no_cluster, clean_environment
):
    out = tmp_path / "results"
    assert exit_status([command, "--cluster", "2", *flags, "--out", str(out)]) == 2
    printed = capsys.readouterr()
    lines = [line for line in printed.err.splitlines() if line.strip()]
    assert len(lines) == 1 and message in lines[0], printed.err
    assert lines[0].startswith(f"mailrail {command}: error: ") and not printed.out
    assert not out.exists()
