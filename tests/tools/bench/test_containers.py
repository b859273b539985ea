"""mailrail bench containers under mpiexec: CountingSet against the histogram, in adds of CHUNK keys or in one."""

from __future__ import annotations

import json

import pytest

from mailrail_tools.bench.histogram import CHUNK
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
