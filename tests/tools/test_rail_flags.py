"""The knob flags every benchmark shares (no MPI)."""

import argparse

import pytest

from mailrail.config import default
from mailrail_tools.cli import main
from mailrail_tools.flags import add_rail_arguments, rail_options


def parsed(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_rail_arguments(parser)
    return parser.parse_args(list(argv))


def test_a_commands_defaults_yield_to_flags_and_to_the_environment(clean_environment, monkeypatch):
    defaults = {"datagram_size": 131072, "recv_pool_slots": 64}
    assert rail_options(parsed(), defaults) == defaults
    assert rail_options(parsed("--datagram-size", "4096"), defaults) == {"datagram_size": "4096", "recv_pool_slots": 64}
    monkeypatch.setenv("MAILRAIL_RECV_POOL_SLOTS", "512")
    assert rail_options(parsed(), defaults) == {"datagram_size": 131072}
    assert rail_options(parsed("--flow-control", "node")) == {"flow_control": "node"}


LIBRARY = default("datagram_size")


def test_a_commands_help_says_the_defaults_it_runs_with(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "400")  # one line per flag's help
    for command, expected in [
        (["bench", "histogram"], f"(MAILRAIL_DATAGRAM_SIZE; default {LIBRARY})"),
        (["bench", "containers"], f"(MAILRAIL_DATAGRAM_SIZE; default {LIBRARY})"),
        (["bench", "adversarial"], f"this command's default 4096, the library's {LIBRARY}"),
        (["compare"], f"this command's default 4096, the library's {LIBRARY}"),
        (["app", "cc"], f"this command's default 131072, the library's {LIBRARY}"),
        (["app", "moe"], f"this command's default 64 tokens' records (at --hidden), the library's {LIBRARY}"),
        (["app", "wordcount"], f"(MAILRAIL_DATAGRAM_SIZE; default {LIBRARY})"),
    ]:
        with pytest.raises(SystemExit):
            main([*command, "--help"])
        text = " ".join(capsys.readouterr().out.split())
        assert expected in text, command
