"""The programs the documentation shows run and are right: examples/ and the README's example."""

from __future__ import annotations

import re
import sys

import pytest

from helpers import ROOT, mailrail

pytestmark = pytest.mark.mpi


def run(ranks: int, *argv: str, env: dict[str, str] | None = None):
    completed = mailrail("run", "-n", str(ranks), "--", sys.executable, *argv, timeout=180, env=env)
    assert completed.returncode == 0, completed.stdout[-3000:] + completed.stderr[-3000:]
    return completed.stdout


@pytest.mark.parametrize("ranks", [1, 2, 4])
@pytest.mark.parametrize("mode", ["none", "rank", "node", "adaptive"])
def test_the_tutorial_program_finds_every_level(ranks, mode):
    out = run(
        ranks,
        str(ROOT / "examples" / "bfs_levels.py"),
        "--vertices",
        "3000",
        "--degree",
        "3",
        env={"MAILRAIL_FLOW_CONTROL": mode, "MAILRAIL_RANKS_PER_NODE": "2"},
    )
    assert re.search(r"\d+ of 3000 vertices reached, \d+ levels; verified", out), out


@pytest.mark.smoke
def test_the_first_program_greets_every_rank():
    out = run(3, str(ROOT / "examples" / "first_program.py"))
    for rank in range(3):
        assert f"rank {rank}: 3 greetings, the first from 'hello from 0'" in out


def test_the_readme_example_delivers_each_rank_its_message_run_as_the_readme_says(tmp_path):
    readme = (ROOT / "README.md").read_text()
    code = re.search(r"```python\n(.*?)```", readme, re.S).group(1)
    assert len(code.splitlines()) <= 10
    name, command = re.search(
        r"Save it as `(\w+\.py)` and run it on \w+ ranks: `mailrail (run -n \d+ .*?)`", readme
    ).groups()
    (tmp_path / name).write_text(code)
    *launch, program = command.split()  # run -n 4 python hello.py: the README's own command line
    assert launch[:2] == ["run", "-n"] and int(launch[2]) >= 2 and program == name
    completed = mailrail(*launch, str(tmp_path / program), timeout=180)
    assert completed.returncode == 0, completed.stdout[-3000:] + completed.stderr[-3000:]
    for rank in range(int(launch[2])):
        assert f"{rank} b'hello'" in completed.stdout
