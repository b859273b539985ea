"""Both implementations of the node credit pool's atomics lose no update under contention."""

import json

import pytest

from mailrail_tools.jobs.job import run_mailrail

pytestmark = pytest.mark.mpi


@pytest.mark.smoke
def test_cpu_and_mpi_atomics_are_exact_under_contention(tmp_path):
    out = tmp_path / "atomics.json"
    completed = run_mailrail(
        4, ["bench", "atomics", "--ops", "3000", "--counters", "2", "--json", str(out)], timeout=120, capture=True
    )
    assert completed.returncode == 0, completed.stdout + completed.stderr
    results = {r["atomics"]: r for r in json.loads(out.read_text())["results"]}
    assert set(results) == {"mpi", "cpu"}  # the helper is built by the package install
    assert all(r["exact"] and r["ranks"] == 4 for r in results.values())
