"""Fuzzing the readers: random and mutated bytes either decode or raise TraceFormatError, nothing else."""

from __future__ import annotations

import gzip
import os

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from helpers import BINARY_TRACE, JSON_TRACE
from mailrail.errors import TraceFormatError
from mailrail.trace import MessageBlock, read_binary, read_jsonl

# Examples per run stay few (the suite's time budget); MAILRAIL_FUZZ_EXAMPLES=5000 for a long session.
FUZZ = settings(
    max_examples=int(os.environ.get("MAILRAIL_FUZZ_EXAMPLES", "100")),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
REAL_BINARY = (BINARY_TRACE / "trace_0.bin").read_bytes()
# A real JSON trace's head: the barriers, sends, receives and mpi records of the busy phase.
REAL_JSON = b"".join(
    (JSON_TRACE / "trace_0.txt").read_bytes().splitlines(keepends=True)[:12]
    + (JSON_TRACE / "trace_0.txt").read_bytes().splitlines(keepends=True)[1008:1016]
)


def decode(read, path, ranks, **options) -> None:
    """Consume every event; a decoded block must be in range."""
    try:
        for event in read(str(path), 0, ranks, **options):
            if isinstance(event, MessageBlock):
                assert event.dests.dtype == np.int64 and event.sizes.dtype == np.int64
                assert (event.dests >= 0).all() and (ranks is None or (event.dests < ranks).all())
                assert (event.sizes >= 0).all()
    except TraceFormatError as error:
        assert str(path) in str(error)


@st.composite
def mutated(draw, original: bytes):
    """*original* with a few bytes overwritten, a slice deleted or inserted, or the tail cut."""
    data = bytearray(original)
    for _ in range(draw(st.integers(1, 4))):
        action = draw(st.sampled_from(["overwrite", "delete", "insert", "truncate"]))
        at = draw(st.integers(0, max(0, len(data) - 1)))
        if action == "overwrite" and data:
            chunk = draw(st.binary(min_size=1, max_size=8))
            data[at : at + len(chunk)] = chunk
        elif action == "delete":
            del data[at : at + draw(st.integers(1, 60))]
        elif action == "insert":
            data[at:at] = draw(st.binary(min_size=1, max_size=60))
        else:
            del data[at:]
    return bytes(data)


@FUZZ
@given(
    data=st.binary(max_size=600),
    ranks=st.sampled_from([None, 1, 2, 1 << 30]),
    chunk=st.sampled_from([1, 7, 20, 52, 1 << 20]),
)
def test_random_bytes(tmp_path, data, ranks, chunk):
    path = tmp_path / "trace_0.bin"
    path.write_bytes(data)
    decode(read_binary, path, ranks, chunk_bytes=chunk)


@FUZZ
@given(data=st.lists(st.tuples(st.integers(-2, 6), st.binary(min_size=0, max_size=52)), max_size=30))
def test_random_records(tmp_path, data):
    """Plausible variant indices followed by random field bytes: reaches deeper than pure noise."""
    path = tmp_path / "trace_0.bin"
    path.write_bytes(b"".join(variant.to_bytes(4, "little", signed=True) + body for variant, body in data))
    decode(read_binary, path, 2)


@FUZZ
@given(data=mutated(REAL_BINARY), chunk=st.sampled_from([53, 4096, 1 << 20]))
def test_mutated_real_binary_trace(tmp_path, data, chunk):
    path = tmp_path / "trace_0.bin"
    path.write_bytes(data)
    decode(read_binary, path, 2, chunk_bytes=chunk)


@FUZZ
@given(data=mutated(gzip.compress(REAL_BINARY, mtime=0)))
def test_mutated_gzip_binary_trace(tmp_path, data):
    path = tmp_path / "trace_0.bin.gz"
    path.write_bytes(data)
    decode(read_binary, path, 2)


@FUZZ
@given(data=mutated(REAL_JSON))
def test_mutated_real_json_trace(tmp_path, data):
    path = tmp_path / "trace_0.txt"
    path.write_bytes(data)
    decode(read_jsonl, path, 2)


@FUZZ
@given(data=st.binary(max_size=300))
def test_random_json_bytes(tmp_path, data):
    path = tmp_path / "trace_0.txt"
    path.write_bytes(data)
    decode(read_jsonl, path, 2)
