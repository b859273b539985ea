"""The applications' user errors: a flag out of range, a missing optional dependency: one line, exit 2."""

import sys

import pytest

from mailrail_tools.cli import main

OUT_OF_RANGE = [
    (["app", "cc", "--scale", "32"], "argument --scale: must be an integer in 1..31, got '32'"),
    (["app", "cc", "--edge-factor", "0"], "argument --edge-factor: must be an integer in 1..65536, got '0'"),
    (["app", "cc", "--trials", "0"], "argument --trials: must be an integer in 1..100000, got '0'"),
    (
        ["app", "cc", "--modes", "rank,fast"],
        "argument --modes: each must be one of none,rank,node,adaptive, got 'rank,fast'",
    ),
    (["app", "moe", "--tokens", "0"], "argument --tokens: must be an integer in 1..4294967295, got '0'"),
    (["app", "moe", "--hidden", "2000000"], "argument --hidden: must be an integer in 1..1048576, got '2000000'"),
    (["app", "moe", "--experts", "65537"], "argument --experts: must be an integer in 1..65536, got '65537'"),
    (["app", "moe", "--top-k", "0"], "argument --top-k: must be an integer in 1..256, got '0'"),
    (["app", "moe", "--skew", "nan"], "argument --skew: must be a number in 0..100, got 'nan'"),
    (["app", "moe", "--seed", "x"], "argument --seed: must be an integer in 0..9223372036854775807, got 'x'"),
    (["app", "moe", "--send-pool-slots", "0"], "argument --send-pool-slots: must be in 1..2147483647, got 0"),
]


@pytest.mark.parametrize(("argv", "expected"), OUT_OF_RANGE, ids=[" ".join(a) for a, _ in OUT_OF_RANGE])
def test_an_app_flag_out_of_range_is_one_line_and_writes_nothing(argv, expected, tmp_path, capsys):
    result = tmp_path / "result.json"
    with pytest.raises(SystemExit) as exit_:
        main([*argv, "--json", str(result)])
    assert exit_.value.code == 2
    command = " ".join(argv[:2])
    assert capsys.readouterr().err == f"mailrail {command}: error: {expected} (see mailrail {command} --help)\n"
    assert not result.exists()


def hide(monkeypatch, *names: str) -> None:
    """Make every import of *names* (and their submodules) raise ImportError, as if not installed."""
    for name in [n for n in sys.modules if any(n == top or n.startswith(top + ".") for top in names)]:
        monkeypatch.delitem(sys.modules, name)
    for name in names:
        monkeypatch.setitem(sys.modules, name, None)


def test_app_cc_without_scipy_says_what_to_install(monkeypatch, tmp_path, capsys):
    hide(monkeypatch, "scipy")
    result = tmp_path / "result.json"
    assert main(["app", "cc", "--scale", "4", "--json", str(result)]) == 2
    assert capsys.readouterr().err == "mailrail app cc: error: app cc needs scipy: pip install 'mailrail[apps]'\n"
    assert not result.exists()


@pytest.mark.mpi
def test_app_cc_without_scipy_ends_every_rank(tmp_path):
    """Rank 0 alone uses scipy; every rank checks for it, so none is left waiting in a collective."""
    from helpers import run_program

    result = tmp_path / "result.json"
    completed = run_program(
        2, "mailrail_without_module.py", "scipy", "--", "app", "cc", "--scale", "4", "--json", str(result), timeout=60
    )
    assert completed.returncode == 2, completed.stderr[-3000:]
    errors = [line for line in completed.stderr.splitlines() if ": error: " in line]
    # before MPI: each rank says it (one line each), none waits for another
    assert 1 <= len(errors) <= 2, completed.stderr
    assert set(errors) == {"mailrail app cc: error: app cc needs scipy: pip install 'mailrail[apps]'"}
    assert "Traceback" not in completed.stderr and not result.exists()


@pytest.mark.mpi
def test_top_k_above_the_experts_is_one_line_for_the_job(tmp_path):
    from helpers import mailrail_job

    result = tmp_path / "result.json"
    completed = mailrail_job(2, "app", "moe", "--top-k", "9", "--json", result, timeout=60)  # 8 experts at 2 ranks
    assert completed.returncode == 2, completed.stderr[-3000:]
    errors = [line for line in completed.stderr.splitlines() if ": error: " in line]
    assert errors == ["mailrail app moe: error: argument --top-k: must be an integer in 1..8 (the experts), got '9'"]
    assert "Traceback" not in completed.stderr and not result.exists()
