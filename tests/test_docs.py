"""The documentation: its tables come from the code, its pages exist, the README links to them."""

from __future__ import annotations

import importlib.util
import re

from helpers import ROOT
from mailrail import counters
from mailrail.cli import COMMANDS
from mailrail.config import knobs

DOCS = ROOT / "docs"


def generate():
    spec = importlib.util.spec_from_file_location("docs_generate", DOCS / "generate.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_knob_table_is_the_config_fields_metadata():
    table = generate().knob_table()
    for knob in knobs():
        assert f"| `{knob.variable}` | `{knob.name}`" in table and f"| {knob.default_text} | {knob.help} |" in table
    assert "{include} _generated/knobs.md" in (DOCS / "configuration.md").read_text()


def test_the_counter_table_is_counters_py():
    table = generate().counter_table()
    for who, entries in (
        ("message", counters.MESSAGE_COUNTERS),
        ("credit", counters.CREDIT_COUNTERS),
        ("rail", counters.RAIL_FACTS),
    ):
        for name, meaning in entries.items():
            assert f"| `{name}` | {who} | {meaning} |" in table, name
    assert "{include} _generated/counters.md" in (DOCS / "flow-control.md").read_text()


def test_the_memory_table_is_memory_plan():
    """Rank mode refused from 1,024 ranks (more than the 512 slots), node mode at 1,024 nodes, adaptive never;
    each row's numbers are memory_plan's."""
    table = generate().memory_table()
    rows = [line.split(" | ") for line in table.splitlines()[2:]]
    refused = {(row[0].lstrip("| "), row[2]) for row in rows if "refused" in row[3]}
    assert refused == {
        ("1,024 (64)", "rank"),
        ("4,096 (64)", "rank"),
        ("16,384 (64)", "rank"),
        ("16,384 (16)", "rank"),
        ("16,384 (16)", "node"),
    }
    assert "| 16,384 (64) | 256 | node | 2 | 4,096 B + 3,072 B | 1 MiB |" in table
    assert all(row[5].startswith("4 KiB") for row in rows if row[2] == "adaptive")  # one slot, any size
    assert "{include} _generated/memory.md" in (DOCS / "flow-control.md").read_text()


def test_the_command_page_has_every_command_with_its_help():
    page = generate().command_reference()
    for path, (_, summary) in COMMANDS.items():
        assert f"## `mailrail {' '.join(path)}`\n\n{summary}" in page
    assert "usage: mailrail app moe" in page and "--recv-pool-slots" in page
    assert "{include} _generated/commands.md" in (DOCS / "cli.md").read_text()


def test_every_page_is_in_the_table_of_contents_and_every_link_resolves():
    index = (DOCS / "index.md").read_text()
    pages = {path.stem for path in DOCS.glob("*.md")} - {"index"}
    listed = set(re.findall(r"^([a-z-]+)$", index, re.M))
    assert pages == listed
    readme = (ROOT / "README.md").read_text()
    for target in re.findall(r"\]\(([^)#]+)\)", readme):
        assert (ROOT / target).exists(), target
    for page in DOCS.glob("*.md"):
        for target in re.findall(r"\[\]\(([a-z-]+\.md)", page.read_text()):
            assert (DOCS / target).exists(), (page.name, target)


def test_the_readme_keeps_exactly_its_two_commands_on_top():
    readme = (ROOT / "README.md").read_text()
    first_block = re.search(r"```sh\n(.*?)```", readme, re.S).group(1).splitlines()
    assert [line.split("#")[0].strip() for line in first_block] == ["make demo", "make test"]
    assert "exec make test" in (ROOT / ".ci" / "run").read_text()
