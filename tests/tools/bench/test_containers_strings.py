"""mailrail bench containers --keys str under mpiexec: its JSON fields and its table; the words it draws."""

from __future__ import annotations

import json

import numpy as np
import pytest

from mailrail_tools.bench.containers import truncated_zipf, vocabulary
from mailrail_tools.jobs.job import run_mailrail


def test_the_vocabulary_is_distinct_words_of_1_to_40_letters_the_same_for_a_seed():
    words = vocabulary(3, 5000)
    assert len(words) == 5000 and len(set(words.to_pylist())) == 5000
    lengths = [len(word) for word in words.to_pylist()]
    assert min(lengths) == 1 and max(lengths) == 40
    assert words.equals(vocabulary(3, 5000)) and not words.equals(vocabulary(4, 5000))
    numbers = truncated_zipf(np.random.default_rng(1), 20000, 1.1, 5000)
    assert (
        numbers.max() < 5000 and np.bincount(numbers.astype(np.int64))[0] > np.bincount(numbers.astype(np.int64))[100]
    )


@pytest.mark.mpi
def test_bench_containers_keys_str_reports_both_rates_and_their_ratio(tmp_path):
    out = tmp_path / "containers.json"
    args = ["bench", "containers", "--keys", "str", "--inserts", "20000", "--vocabulary", "3000"]
    completed = run_mailrail(2, [*args, "--trials", "1", "--json", str(out)], timeout=180, capture=True)
    assert completed.returncode == 0, completed.stdout + completed.stderr
    document = json.loads(out.read_text())
    assert document["keys"] == "str" and document["ranks"] == 2 and document["vocabulary"] == 3000
    medians = document["median_inserts_per_s"]
    assert set(medians) == {"CountingSet uint64", "CountingSet hashes", "CountingSet str"}
    assert document["ratio_str_to_uint64"] == pytest.approx(medians["CountingSet str"] / medians["CountingSet uint64"])
    cpu = document["median_cpu_s_per_rank"]
    assert set(cpu) == set(medians) and min(cpu.values()) > 0
    assert document["cpu_ratio_str_to_uint64"] == pytest.approx(cpu["CountingSet uint64"] / cpu["CountingSet str"])
    assert document["ratio_str_to_uint64_hashes"] == pytest.approx(
        medians["CountingSet str"] / medians["CountingSet hashes"]
    )
    assert document["cpu_ratio_str_to_uint64_hashes"] == pytest.approx(
        cpu["CountingSet hashes"] / cpu["CountingSet str"]
    )
    assert all(len(seconds) == 1 for seconds in document["cpu_s_per_rank"].values())
    assert len(set(document["distinct_keys"].values())) == 1 and document["distinct_keys"]["CountingSet str"] > 0
    assert "vs uint64" in completed.stdout and "vs hashes" in completed.stdout and "CountingSet str" in completed.stdout
    assert "vs uint64 (CPU)" in completed.stdout
