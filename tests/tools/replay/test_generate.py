"""Synthetic traces: deterministic given the seed, shaped as asked, and round-trip through the reader."""

from __future__ import annotations

import numpy as np
import pytest

from mailrail.errors import TraceFormatError
from mailrail.trace import MessageBlock, PhaseEnd, TraceDir, summarize
from mailrail_tools.cli import main
from mailrail_tools.replay.generate import RMAT_A, RMAT_B, RMAT_C, Workload, rank_events, rmat_edges, write_trace


def flatten(events):
    """(concatenated dests, concatenated sizes, phase count) of an event stream."""
    dests, sizes, phases = [], [], 0
    for event in events:
        if isinstance(event, MessageBlock):
            dests.append(event.dests)
            sizes.append(event.sizes)
        else:
            assert isinstance(event, PhaseEnd)
            phases += 1
    return np.concatenate(dests or [np.zeros(0, np.int64)]), np.concatenate(sizes or [np.zeros(0, np.int64)]), phases


@pytest.mark.parametrize(
    "workload",
    [
        Workload("uniform", ranks=3, messages=1000, phases=4, min_size=0, max_size=9000, seed=2),
        Workload("zipf", ranks=5, messages=777, phases=2, seed=3),
        Workload("rmat", ranks=4, phases=3, scale=8, edge_factor=4, min_size=16, max_size=16, seed=4),
    ],
)
def test_generated_traces_round_trip_through_the_reader(workload, tmp_path):
    paths = write_trace(workload, str(tmp_path))
    trace = TraceDir.open(tmp_path)
    assert (trace.ranks, trace.format, list(trace.files)) == (workload.ranks, "binary", paths)
    for rank in range(workload.ranks):
        written = flatten(rank_events(workload, rank))
        read = flatten(trace.events(rank))
        assert np.array_equal(read[0], written[0]) and np.array_equal(read[1], written[1])
        assert read[2] == written[2] == workload.phases
        assert len(read[0]) == workload.messages_of(rank)
        assert read[1].min() >= workload.min_size and read[1].max() <= workload.max_size


def test_same_seed_same_bytes_other_seed_other_bytes(tmp_path):
    workload = Workload("zipf", ranks=3, messages=500, phases=2, min_size=1, max_size=100, seed=11)
    write_trace(workload, str(tmp_path / "a"))
    write_trace(workload, str(tmp_path / "b"))
    write_trace(
        Workload("zipf", ranks=3, messages=500, phases=2, min_size=1, max_size=100, seed=12), str(tmp_path / "c")
    )
    for rank in range(3):
        a, b, c = ((tmp_path / d / f"trace_{rank}.bin").read_bytes() for d in "abc")
        assert a == b and a != c


def test_phases_split_messages_evenly_and_end_with_barriers(tmp_path):
    workload = Workload("uniform", ranks=2, messages=10, phases=3)
    write_trace(workload, str(tmp_path))
    summary = summarize(TraceDir.open(tmp_path).events(0), 0, 2)
    assert summary.barriers == 3 and summary.messages.sum(axis=1).tolist() == [4, 3, 3, 0]


def test_zipf_receivers_get_their_power_law_share(tmp_path):
    workload = Workload("zipf", ranks=8, messages=5000, zipf_exponent=1.2, seed=5)
    write_trace(workload, str(tmp_path))
    trace = TraceDir.open(tmp_path)
    received = sum(summarize(trace.events(r), r, 8).messages.sum(axis=0) for r in range(8))
    weights = 1 / np.arange(1, 9) ** 1.2
    shares = np.sort(received)[::-1] / received.sum()
    assert np.allclose(shares, weights / weights.sum(), atol=0.01)


def test_rmat_quadrant_probabilities_are_graph500s():
    sources, targets = rmat_edges(np.random.default_rng(0), 200_000, scale=6)
    for level in range(6):
        assert abs(((sources >> level) & 1).mean() - (1 - RMAT_A - RMAT_B)) < 0.005  # c + d
        assert abs(((targets >> level) & 1).mean() - (1 - RMAT_A - RMAT_C)) < 0.005  # b + d
    assert sources.max() < 64 and targets.max() < 64


def test_rmat_sends_each_edge_to_both_endpoint_owners(tmp_path):
    workload = Workload("rmat", ranks=4, scale=10, edge_factor=8, min_size=16, max_size=16, seed=9)
    write_trace(workload, str(tmp_path))
    trace = TraceDir.open(tmp_path)
    assert sum(workload.messages_of(r) for r in range(4)) == 2 * 8 * 1024
    # rank 0 re-derives its edges from the same generator and finds them at the owners
    rng = np.random.default_rng([workload.seed, 0, 0, 0])
    sources, targets = rmat_edges(rng, workload.messages_of(0) // 2, workload.scale)
    dests, _, _ = flatten(trace.events(0))
    assert np.array_equal(dests[0::2], sources % 4) and np.array_equal(dests[1::2], targets % 4)
    received = sum(summarize(trace.events(r), r, 4).bytes.sum(axis=0) for r in range(4))
    assert received.argmax() == 0  # the hub vertices (low ids, mostly even) live on rank 0


def test_gzip_output_and_stale_files(tmp_path):
    write_trace(Workload("uniform", ranks=3, messages=50), str(tmp_path / "z"), compress=True)
    trace = TraceDir.open(tmp_path / "z")
    assert trace.files[0].endswith("trace_0.bin.gz") and flatten(trace.events(2))[0].size == 50
    write_trace(Workload("uniform", ranks=3, messages=50), str(tmp_path / "s"))
    with pytest.raises(TraceFormatError, match=r"already holds other trace files \(trace_2.bin\)"):
        write_trace(Workload("uniform", ranks=2, messages=50), str(tmp_path / "s"))


def test_generate_command(tmp_path, capsys):
    out = tmp_path / "t"
    assert (
        main(
            [
                "trace",
                "generate",
                str(out),
                "--pattern",
                "rmat",
                "--ranks",
                "3",
                "--scale",
                "6",
                "--edge-factor",
                "2",
                "--phases",
                "2",
            ]
        )
        == 0
    )
    assert "wrote 3 rank files" in capsys.readouterr().out
    assert TraceDir.open(out).ranks == 3
    for size in ("9-3", "big", "4294967296"):
        with pytest.raises(SystemExit) as exit_:
            main(["trace", "generate", str(tmp_path / "u"), "--message-size", size])
        assert exit_.value.code == 2
        assert capsys.readouterr().err == (
            "mailrail trace generate: error: argument --message-size: must be N or MIN-MAX with "
            f"0 <= MIN <= MAX <= 4294967295, got {size!r} (see mailrail trace generate --help)\n"
        )
    assert not (tmp_path / "u").exists()
