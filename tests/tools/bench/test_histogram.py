"""The histogram benchmark is correct in every mode, at 1, 2, 4 and 8 ranks, uniform and R-MAT."""

import json

import numpy as np
import pytest

from mailrail_tools.bench.histogram import Table, make_keys
from mailrail_tools.jobs.job import run_mailrail


def test_rmat_keys_are_skewed_and_in_range():
    keys = make_keys(np.random.default_rng(0), 100_000, 12, rmat=True)
    assert keys.max() < 1 << 12
    counts = np.bincount(keys.astype(np.intp), minlength=1 << 12)
    assert counts[0] > 50 * counts.mean()  # key 0 is the R-MAT hot spot


def test_table_blocks_cover_the_keys_once():
    tables = [Table(10, 3, r) for r in range(3)]
    assert sum(len(t.counts) for t in tables) == 1 << 10
    keys = np.arange(1 << 10, dtype=np.uint64)
    owners = tables[0].owners(keys)
    for rank, table in enumerate(tables):
        table.add(0, keys[owners == rank])
        table.add(1, keys[owners == rank][:5])
        table.settle()
        assert table.counts.sum() == len(table.counts) + 5
        assert (table.counts[:5] == 2).all() and (table.counts[5:] == 1).all()


def test_table_counts_more_keys_than_its_buffer_holds():
    table = Table(4, 1, 0)
    table.PENDING_KEYS = 8
    table._pending = table._pending[:8]
    for _ in range(5):
        table.add(0, np.arange(16, dtype=np.uint64))
    table.add(0, np.arange(16, dtype=np.uint64).repeat(3))  # larger than the whole buffer
    table.settle()
    assert (table.counts == 8).all()


@pytest.mark.mpi
@pytest.mark.parametrize("ranks", [1, 2, pytest.param(4, marks=pytest.mark.smoke), 8])
@pytest.mark.parametrize("distribution", ["uniform", "rmat"])
def test_histogram_is_exact_in_every_mode(tmp_path, ranks, distribution):
    out = tmp_path / "histogram.json"
    args = [
        "bench",
        "histogram",
        "--log2-table",
        "14",
        "--inserts",
        "20000",
        "--trials",
        "1",
        "--modes",
        "none,rank,node",
        "--ranks-per-node",
        "2",
        "--recv-pool-slots",
        "64",
        "--baseline",
        "alltoallv",
        "--json",
        str(out),
    ]
    if distribution == "rmat":
        args.append("--rmat")
    completed = run_mailrail(ranks, args, timeout=180, capture=True)
    assert completed.returncode == 0, completed.stdout + completed.stderr
    document = json.loads(out.read_text())
    assert document["benchmark"] == "histogram" and document["ranks"] == ranks
    assert set(document["modes"]) == {"none", "rank", "node"}
    for mode in document["modes"].values():
        assert [t["correct"] for t in mode["trials"]] == [True]
        assert {"runtime_s", "inserts_per_s", "correct"} <= set(mode["trials"][0])
    assert document["baseline"]["trials"][0]["correct"] is True
    assert "overhead % vs none" in completed.stdout
