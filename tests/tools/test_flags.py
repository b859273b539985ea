"""Range-checked flag types (mailrail_tools.flags): out of range is one argparse line, exit 2 (no MPI)."""

import argparse

import pytest

from mailrail_tools.flags import float_in, int_in


def parser_with(flag: str, kind) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="mailrail bench x")
    parser.add_argument(flag, type=kind)
    return parser


def usage_error(parser: argparse.ArgumentParser, argv: list[str], capsys) -> str:
    with pytest.raises(SystemExit) as exit_:
        parser.parse_args(argv)
    assert exit_.value.code == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert lines[0].startswith("usage:")
    return lines[-1]


def test_int_in_accepts_its_inclusive_bounds():
    parse = int_in(1, 40)
    assert (parse("1"), parse("40"), parse(" 7 ")) == (1, 40, 7)
    assert int_in(0)("12345678901234567890") == 12345678901234567890


@pytest.mark.parametrize("text", ["0", "41", "99", "-3", "1.5", "1e3", "x", ""])
def test_int_in_refuses_in_one_line_naming_flag_range_and_value(text, capsys):
    message = usage_error(parser_with("--log2-table", int_in(1, 40)), ["--log2-table", text], capsys)
    assert message == f"mailrail bench x: error: argument --log2-table: must be an integer in 1..40, got {text!r}"


def test_int_in_without_upper_bound(capsys):
    assert int_in(1)("1000000000000") == 10**12
    message = usage_error(parser_with("--trials", int_in(1)), ["--trials", "0"], capsys)
    assert message.endswith("argument --trials: must be an integer >= 1, got '0'")


def test_float_in_accepts_its_inclusive_bounds():
    parse = float_in(0.0, 1.0)
    assert (parse("0"), parse("1"), parse("0.25"), parse("1e-3")) == (0.0, 1.0, 0.25, 0.001)


@pytest.mark.parametrize("text", ["-0.1", "1.01", "nan", "inf", "-inf", "x"])
def test_float_in_refuses_out_of_range_and_non_finite(text, capsys):
    message = usage_error(parser_with("--skew", float_in(0, 1)), [f"--skew={text}"], capsys)
    assert message.endswith(f"argument --skew: must be a number in 0..1, got {text!r}")


def test_float_in_without_upper_bound_still_refuses_infinity(capsys):
    assert float_in(0)("1e300") == 1e300
    message = usage_error(parser_with("--timeout", float_in(0.001)), ["--timeout", "inf"], capsys)
    assert message.endswith("argument --timeout: must be a number >= 0.001, got 'inf'")


def test_an_empty_range_is_a_programming_error():
    with pytest.raises(ValueError, match="empty range 5..4"):
        int_in(5, 4)
    with pytest.raises(ValueError, match="empty range"):
        float_in(1.0, 0.5)


# -- every benchmark's, application's and trace tool's flags (the commands as the CLI parses them) ------

#: A command line with one flag out of range, and the line argparse must print for it.
OUT_OF_RANGE = [
    (["bench", "histogram", "--log2-table", "99"], "argument --log2-table: must be an integer in 1..40, got '99'"),
    (["bench", "histogram", "--inserts", "0"], "argument --inserts: must be an integer in 1..1099511627776, got '0'"),
    (["bench", "histogram", "--trials", "0"], "argument --trials: must be an integer in 1..100000, got '0'"),
    (["bench", "histogram", "--seed", "-1"], "argument --seed: must be an integer in 0..9223372036854775807"),
    (["bench", "histogram", "--modes", "none,credit"], "argument --modes: each must be one of none,rank,node,adaptive"),
    (["bench", "histogram", "--datagram-size", "0"], "argument --datagram-size: must be in 1..2147483647, got 0"),
    (["bench", "histogram", "--recv-pool-slots", "1e9"], "argument --recv-pool-slots: must be an integer"),
    (["bench", "histogram", "--idle-sleep-us", "9e15"], "argument --idle-sleep-us: must be a number in 0.."),
    (["bench", "adversarial", "--victims", "0"], "argument --victims: must be an integer in 1..2147483647, got '0'"),
    (["bench", "adversarial", "--messages", "-1"], "argument --messages: must be an integer in 0..2147483647"),
    (["bench", "adversarial", "--bytes-per-rank", "2e3"], "argument --bytes-per-rank: must be an integer in 0.."),
    (["bench", "adversarial", "--metrics-interval", "0"], "argument --metrics-interval: must be a number in 0.001"),
    (["bench", "adversarial", "--receive-work-us", "inf"], "argument --receive-work-us: must be a number in 0..1e+06"),
    (["bench", "adversarial", "--flow-control", "credit"], "argument --flow-control: must be one of none, rank, node"),
    (["bench", "stream", "--sizes", "8,0"], "argument --sizes: each value must be an integer in 1..2147483647"),
    (["bench", "stream", "--messages", "0"], "argument --messages: must be an integer in 1..2147483647, got '0'"),
    (["bench", "stream", "--repeats", "0"], "argument --repeats: must be an integer in 1..1000, got '0'"),
    (["bench", "stream", "--max-recvs-compare", "64,x"], "argument --max-recvs-compare: each value must be"),
    (["bench", "atomics", "--counters", "0"], "argument --counters: must be an integer in 1..1048576, got '0'"),
    (["bench", "atomics", "--ops", "many"], "argument --ops: must be an integer in 1..1099511627776, got 'many'"),
]


def command_usage_error(argv: list[str], capsys) -> str:
    """The one line ``mailrail ARGV`` prints as it exits with status 2."""
    from mailrail_tools.cli import main

    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.splitlines()
    assert len(lines) == 1, captured.err
    return lines[0]


@pytest.mark.parametrize(("argv", "expected"), OUT_OF_RANGE, ids=[" ".join(a) for a, _ in OUT_OF_RANGE])
def test_a_benchmark_flag_out_of_range_is_one_line_and_writes_nothing(argv, expected, tmp_path, capsys):
    result = tmp_path / "result.json"
    line = command_usage_error([*argv, "--json", str(result)], capsys)
    command = " ".join(argv[:2])
    assert line.startswith(f"mailrail {command}: error: {expected}")
    assert line.endswith(f"(see mailrail {command} --help)")
    assert not result.exists()


def test_options_that_disagree_are_one_line_before_mpi(clean_environment, tmp_path, capsys):
    from mailrail_tools.cli import main

    result = tmp_path / "result.json"
    argv = ["bench", "histogram", "--max-recvs", "100", "--recv-pool-slots", "10", "--json", str(result)]
    assert main(argv) == 2
    assert capsys.readouterr().err == (
        "mailrail bench histogram: error: MAILRAIL_MAX_RECVS=100 exceeds MAILRAIL_RECV_POOL_SLOTS=10: "
        "every posted receive needs its own slot\n"
    )
    assert not result.exists()


def test_flags_are_checked_without_initializing_mpi():
    """Parsing (and failing) must not start MPI: a job's ranks stop before any MPI work."""
    import subprocess
    import sys

    code = (
        "import sys\n"
        "from mailrail_tools.cli import main\n"
        "for argv in " + repr([argv for argv, _ in OUT_OF_RANGE]) + ":\n"
        "    try:\n"
        "        main(argv)\n"
        "    except SystemExit as exit_:\n"
        "        assert exit_.code == 2, (argv, exit_.code)\n"
        "    else:\n"
        "        raise AssertionError(argv)\n"
        "assert 'mpi4py.MPI' not in sys.modules, 'MPI was imported'\n"
    )
    completed = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert completed.returncode == 0, completed.stderr[-3000:]
    assert "Traceback" not in completed.stderr


def error_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if ": error: " in line]


@pytest.mark.mpi
@pytest.mark.smoke
@pytest.mark.parametrize(
    ("argv", "expected", "lines"),
    [
        # refused as argv is parsed, before MPI: each rank says it in one line (nothing to wait on)
        (["bench", "histogram", "--log2-table", "99"], "argument --log2-table: must be an integer in 1..40", (1, 2)),
        # checked once the job's size is known, every rank alike, before any rail: rank 0 says it once
        (
            ["bench", "adversarial", "--victims", "3"],
            "argument --victims: must be an integer in 1..2 (the ranks)",
            (1,),
        ),
        (["bench", "histogram", "--log2-table", "40"], "--log2-table 40 and --inserts 4194304 need", (1,)),
    ],
    ids=["parse", "against-the-ranks", "memory"],
)
def test_under_mpiexec_every_rank_ends_with_one_line(argv, expected, lines, tmp_path):
    from helpers import mailrail_job

    result = tmp_path / "result.json"
    completed = mailrail_job(2, *argv, "--json", result, timeout=60)  # a hang fails the test at 60 s
    assert completed.returncode == 2, completed.stderr[-3000:]
    errors = error_lines(completed.stderr)
    assert len(errors) in lines and len(set(errors)) == 1, completed.stderr[-3000:]
    assert errors[0].startswith(f"mailrail {argv[0]} {argv[1]}: error: ") and expected in errors[0]
    assert "Traceback" not in completed.stderr
    assert not result.exists()
