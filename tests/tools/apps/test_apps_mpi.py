"""Both applications under a real mpiexec: exact results at 1, 2 and 4 ranks in every mode and the peer."""

import json
import sys

import pytest

from helpers import ROOT, mailrail

pytestmark = pytest.mark.mpi

MODES = "none,rank,node,adaptive"
#: Small graphs with a known number of components (edges as 'u v' lines).
GRAPHS = {
    "path": ([(v, v + 1) for v in range(9)], 1),
    "star": ([(0, leaf) for leaf in range(1, 10)], 1),
    "cliques": (
        [(u, v) for group in (range(0, 3), range(3, 7), range(7, 12)) for u in group for v in group if u < v],
        3,
    ),
    # 3, 4, 7, 8 isolated; 2 and 9 only have self loops; 0-1 three times, both ways.
    "isolated_loops_duplicates": ([(0, 1), (0, 1), (1, 0), (2, 2), (5, 6), (6, 5), (9, 9)], 8),
}


def run_app(tmp_path, ranks: int, *args: str) -> dict:
    out = tmp_path / "app.json"
    completed = mailrail(
        "run",
        "-n",
        str(ranks),
        "app",
        *args,
        "--modes",
        MODES,
        "--baseline",
        "alltoallv",
        "--trials",
        "1",
        "--json",
        str(out),
        timeout=180,
    )
    assert completed.returncode == 0, completed.stdout[-3000:] + completed.stderr[-3000:]
    return json.loads(out.read_text())


def assert_every_run_verified(document: dict, ranks: int) -> None:
    assert document["verified"] is True and document["ranks"] == ranks
    assert [run["mode"] for run in document["runs"]] == ["none", "rank", "node", "adaptive", "alltoallv"]
    for run in document["runs"]:
        assert run["runtime_s_median"] > 0
        assert all(trial["correct"] for trial in run["trials"]), run["mode"]
        # Linux lets a process restart its peak resident set: each trial's peak is its own.
        assert all(trial["peak_rss_since"] == "trial" for trial in run["trials"]), run["mode"]


@pytest.mark.parametrize("ranks", [1, 2, 4])
@pytest.mark.parametrize("graph", GRAPHS)
def test_connected_components_are_exact(tmp_path, graph, ranks):
    edges, components = GRAPHS[graph]
    path = tmp_path / f"{graph}.txt"
    path.write_text("# a small test graph\n" + "".join(f"{u} {v}\n" for u, v in edges))
    document = run_app(tmp_path, ranks, "cc", "--edges", str(path))
    assert_every_run_verified(document, ranks)
    assert document["app"] == "cc" and document["components"] == components
    assert document["workload"]["labels_checked"] == "every label against scipy"
    assert all("edges_per_s" in trial for run in document["runs"] for trial in run["trials"])


@pytest.mark.smoke
def test_connected_components_of_an_rmat_graph(tmp_path):
    document = run_app(tmp_path, 4, "cc", "--scale", "10", "--edge-factor", "8")
    assert_every_run_verified(document, 4)
    assert document["workload"]["edges"] == 8 << 10 and document["components"] >= 1


@pytest.mark.parametrize("ranks", [1, 2, 4])
@pytest.mark.parametrize("skew", ["0", "30"])  # 30: nearly every token picks experts 0 and 1
def test_moe_outputs_are_exact(tmp_path, skew, ranks):
    document = run_app(tmp_path, ranks, "moe", "--tokens", "96", "--hidden", "32", "--skew", skew)
    assert_every_run_verified(document, ranks)
    load = document["workload"]["pairs_per_rank_of_experts"]
    assert sum(load) == 2 * 96 * ranks
    if skew == "30" and ranks > 1:
        assert load[0] >= 0.45 * sum(load) and document["hottest_rank"] == 0
    assert all("tokens_per_s" in trial for run in document["runs"] for trial in run["trials"])


def test_a_bad_edge_file_is_named_with_its_line(tmp_path):
    path = tmp_path / "bad.txt"
    path.write_text("0 1\n1 2\n2 3\n3 x4\n")
    completed = mailrail("run", "-n", "2", "app", "cc", "--edges", str(path), timeout=120)
    assert completed.returncode != 0
    assert f"{path}, line 4: 'x4' is not a non-negative integer vertex id" in completed.stderr


def test_the_example_imports_the_application(tmp_path):
    path = tmp_path / "g.txt"
    path.write_text("0 1\n1 2\n5 6\n")
    example = str(ROOT / "examples" / "components_of_a_file.py")
    completed = mailrail("run", "-n", "2", "--", sys.executable, example, str(path), timeout=120)
    assert completed.returncode == 0, completed.stdout[-2000:] + completed.stderr[-2000:]
    assert "4 components" in completed.stdout and "verified" in completed.stdout
