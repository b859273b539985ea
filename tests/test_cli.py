"""The mailrail command: every registered command builds its parser; errors name the command."""

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
