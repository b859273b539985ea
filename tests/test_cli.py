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
