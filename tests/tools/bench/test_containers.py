"""mailrail bench containers under mpiexec: CountingSet against the histogram, in adds of CHUNK keys or in one."""

from __future__ import annotations

import json

import pytest

from mailrail_tools.bench.histogram import CHUNK
from mailrail_tools.bench.operations import CHUNKINGS
from mailrail_tools.jobs.job import run_mailrail


@pytest.mark.mpi
@pytest.mark.parametrize("one_batch", [False, True])
def test_bench_containers_reports_each_measurement_against_the_histogram(tmp_path, one_batch):
    out = tmp_path / "containers.json"
    args = ["bench", "containers", "--inserts", "30000", "--log2-table", "12", "--trials", "1", "--json", str(out)]
    completed = run_mailrail(2, args + (["--one-batch"] if one_batch else []), timeout=180, capture=True)
    assert completed.returncode == 0, completed.stdout[-2000:] + completed.stderr[-2000:]
    document = json.loads(out.read_text())
    assert document["keys_per_add"] == (30000 if one_batch else CHUNK)
    medians = document["median_inserts_per_s"]
    assert set(medians) == {"coalescer histogram", "CountingSet uniform", "CountingSet zipf"}
    assert all(rate > 0 for rate in medians.values())
    for name, ratio in document["ratio_to_histogram"].items():
        assert ratio == pytest.approx(medians[name] / medians["coalescer histogram"])
    # 60,000 keys below 2**12 reach every one of them, uniform and Zipf alike.
    assert document["distinct_keys"]["CountingSet uniform"] == 4096
    assert document["distinct_keys"]["CountingSet zipf"] <= 4096
    assert f"CountingSet adds of {document['keys_per_add']:,} keys" in completed.stdout


@pytest.mark.mpi
def test_bench_containers_operations_compares_one_call_with_chunked_calls_and_checks_each(tmp_path):
    out = tmp_path / "operations.json"
    args = ["bench", "containers", "--keys", "operations", "--inserts", "20000", "--trials", "1", "--json", str(out)]
    completed = run_mailrail(2, args, timeout=240, capture=True)
    assert completed.returncode == 0, completed.stdout[-2000:] + completed.stderr[-2000:]
    document = json.loads(out.read_text())
    assert document["keys_per_call"] == [20000, *CHUNKINGS]
    medians = document["median_inserts_per_s"]
    assert set(medians) == set(document["one_call_to_best_chunking"]) >= {"CountingSet.add", "Map.visit", "Array.set"}
    for name, by in medians.items():
        assert set(by) == {str(per) for per in document["keys_per_call"]} and all(rate > 0 for rate in by.values())
        best = max(by[str(per)] for per in CHUNKINGS)
        assert document["one_call_to_best_chunking"][name] == pytest.approx(by["20000"] / best)
        assert name in completed.stdout


def test_an_operations_check_fails_on_a_lost_key():
    """The checks can fail: a Set one key short of the batch says by how much."""
    from mailrail.testing import World
    from mailrail_tools.bench import operations

    def program(rail):
        chosen = operations.operations(rail.comm, 100, seed=1)
        container = chosen["Set.insert"].make(rail)
        chosen["Set.insert"].call(container, slice(1, 100))  # one key short
        rail.barrier()
        return chosen["Set.insert"].check(container)

    for problem in World(2, seed=1).run(program):
        assert problem is not None and problem.startswith("size() is ") and "expected" in problem
