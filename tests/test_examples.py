"""The programs the documentation shows run and are right: examples/ and the README's example."""

from __future__ import annotations

import re
import sys

import pytest

from helpers import ROOT, mailrail
from mailrail.flow import MODE_NAMES

pytestmark = pytest.mark.mpi


def run(ranks: int, *argv: str, env: dict[str, str] | None = None):
    completed = mailrail("run", "-n", str(ranks), "--", sys.executable, *argv, timeout=180, env=env)
    assert completed.returncode == 0, completed.stdout[-3000:] + completed.stderr[-3000:]
    return completed.stdout


def run_example(name: str, ranks: int, mode: str, *args: str) -> str:
    """examples/NAME with *args* on *ranks* ranks in flow-control *mode* (2 ranks a node): its output."""
    env = {"MAILRAIL_FLOW_CONTROL": mode, "MAILRAIL_RANKS_PER_NODE": "2"}
    return run(ranks, str(ROOT / "examples" / name), *args, env=env)


@pytest.mark.parametrize("ranks", [1, 2, 4])
@pytest.mark.parametrize("mode", list(MODE_NAMES))
def test_the_tutorial_program_finds_every_level(ranks, mode):
    out = run_example("bfs_levels.py", ranks, mode, "--vertices", "3000", "--degree", "3")
    assert re.search(r"\d+ of 3000 vertices reached, \d+ levels; verified", out), out


@pytest.mark.smoke
def test_the_first_program_greets_every_rank():
    out = run(3, str(ROOT / "examples" / "first_program.py"))
    for rank in range(3):
        assert f"rank {rank}: 3 greetings, the first from 'hello from 0'" in out


def test_the_readme_example_delivers_each_rank_its_message_run_as_the_readme_says(tmp_path):
    readme = (ROOT / "README.md").read_text()
    code = re.search(r"```python\n(.*?)```", readme, re.S).group(1)
    assert len(code.splitlines()) <= 15  # short, with backpressure handled
    name, command = re.search(
        r"Save it as `(\w+\.py)` and run it on \w+ ranks: `mailrail (run -n \d+ .*?)`", readme
    ).groups()
    (tmp_path / name).write_text(code)
    *launch, program = command.split()  # run -n 4 python hello.py: the README's own command line
    assert launch[:2] == ["run", "-n"] and int(launch[2]) >= 2 and program == name
    completed = mailrail(*launch, str(tmp_path / program), timeout=180)
    assert completed.returncode == 0, completed.stdout[-3000:] + completed.stderr[-3000:]
    ranks = int(launch[2])
    for rank in range(ranks):
        assert f"{rank} got b'hello' from {(rank - 1) % ranks}" in completed.stdout


@pytest.mark.smoke
def test_word_count_counts_every_word_of_every_file(tmp_path):
    texts = [
        "the cat and the hat",
        "The THE the: it's a cat's hat",
        "antidisestablishmentarianism is long, and so is the word antidisestablishmentarianism",
        "",
        "internationalisation internationalisations über ÜBER 東京 東京 東京",  # 16 bytes in common; UTF-8
    ]
    files = []
    for index, text in enumerate(texts):
        path = tmp_path / f"text-{index}.txt"
        path.write_text(text, encoding="utf-8")
        files.append(str(path))
    out = run_example("word_count.py", 3, "adaptive", *files, "--top", "8", "--verify")
    assert "28 words, 16 distinct, in 5 files on 3 ranks" in out, out
    assert "       6  the" in out and "       3  東京" in out and "verified" in out, out
    assert "       2  antidisestablishmentarianism\n" in out, out  # whole: not cut to 16 bytes
    assert "       2  über" in out and "internationalisation" not in out, out  # ties in UTF-8 byte order: über last


@pytest.mark.parametrize("mode, ranks", [("node", 2), ("rank", 4)])
def test_degree_count_finds_the_hubs(mode, ranks):
    out = run_example("degree_count.py", ranks, mode, "--scale", "12", "--edges-per-rank", "20000", "--verify")
    assert "the hubs (vertex: degree)" in out and "verified" in out, out


@pytest.mark.parametrize("mode, ranks", [("adaptive", 3), ("none", 4)])
def test_connected_components_match_a_single_process_union_find(mode, ranks):
    out = run_example(
        "connected_components.py", ranks, mode, "--vertices", "3000", "--edges-per-rank", "700", "--verify"
    )
    assert "connected components among 3000 vertices" in out and "verified" in out, out


def tutorial_block(marker: str) -> str:
    """The tutorial's Python code block that contains *marker*."""
    text = (ROOT / "docs" / "tutorial.md").read_text()
    blocks = [block for block in re.findall(r"```python\n(.*?)```", text, re.S) if marker in block]
    assert len(blocks) == 1, f"{len(blocks)} tutorial blocks contain {marker!r}"
    return blocks[0]


@pytest.mark.smoke
def test_the_tutorial_s_calls_relay_around_the_ring(tmp_path):
    program = tmp_path / "relay.py"
    program.write_text(tutorial_block("def relay"))
    out = run(3, str(program))
    for rank in range(3):
        # Each rank sees every origin's call once per hop that lands on it: 4 calls per origin in all.
        line = next(line for line in out.splitlines() if line.startswith(f"{rank} ["))
        assert line.count("(") == 4, out
    assert "(0, 0, 32.0)" in out  # the last hop: the payload (sum 4) doubled three times


def test_the_tutorial_s_unit_test_passes_in_the_in_memory_world():
    namespace: dict = {}
    exec(compile(tutorial_block("from mailrail.testing import World"), "tutorial", "exec"), namespace)
    namespace["test_the_two_commonest_words"]()


@pytest.mark.parametrize(
    "mode, ranks, implementation",
    [("none", 2, "compiled"), ("rank", 4, "python"), ("node", 4, "compiled"), ("adaptive", 3, "python")],
)
def test_the_key_value_store_answers_every_get_as_a_dictionary_would(mode, ranks, implementation):
    """100,000 operations a rank: puts as calls, gets as asks, every answer checked against one dictionary."""
    env = {"MAILRAIL_FLOW_CONTROL": mode, "MAILRAIL_RANKS_PER_NODE": "2", "MAILRAIL_IMPLEMENTATION": implementation}
    out = run(ranks, str(ROOT / "examples" / "kv_store.py"), "--operations", "100000", "--verify", env=env)
    assert f"{ranks} ranks, {100000 * ranks:,} operations" in out and "verified: " in out, out
    assert f", {50000 * ranks:,} answers" in out, out
