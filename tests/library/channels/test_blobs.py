"""Records with a variable-size part on a channel (segments of kind 2): every record delivered once with its
fixed part and its bytes (empty, non-ASCII, long), across ranks and to the rank itself, under backpressure; a part
of exactly the largest size that fits, and one byte more refused naming both sizes; the wire format as the
module documents it."""

from __future__ import annotations

import struct

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mailrail.channels import HEADER_SIZE, KIND_BLOBS, MAGIC, Blobs
from mailrail.errors import MessageSizeError
from mailrail.testing import World

RECORD = np.dtype([("n", "<i4"), ("tag", "<u2")])


def words_of(rank: int, count: int) -> list[str]:
    base = ["", "über", "東京", "x" * 17 + "a", "x" * 17 + "b"]
    return [base[i % len(base)] + f"{rank}:{i}" * (i % 7) for i in range(count)]


def exchange(rail, count, record_dtype, as_type):
    got = []

    def arrived(source, records, blobs):
        got.append((source, records.copy(), blobs.arrow(as_type).to_pylist()))

    channel = rail.channels.open(record_dtype, arrived, name="words", blobs=True)
    words = words_of(rail.rank, count)
    records = np.zeros(count, dtype=record_dtype)
    if record_dtype.names:
        records["n"] = np.arange(count)
    channel.send(
        np.arange(count) % rail.size,
        None if not record_dtype.names else records,
        Blobs.of(pa.array(words, pa.string())),
    )
    rail.barrier()
    return [(source, int(r["n"]) if record_dtype.names else None, w) for source, rs, ws in got for r, w in zip(rs, ws)]


@settings(max_examples=12, deadline=None)
@given(size=st.integers(1, 4), seed=st.integers(0, 2**16), count=st.integers(0, 300), empty=st.booleans())
def test_every_record_arrives_once_with_its_bytes(size, seed, count, empty):
    dtype = np.dtype([]) if empty else RECORD
    world = World(size, seed=seed, datagram_size=256, send_pool_slots=2, recv_pool_slots=4)
    results = world.run(exchange, count, dtype, pa.string())
    for rank, got in enumerate(results):
        expected = [
            (source, None if empty else i, word)
            for source in range(size)
            for i, word in enumerate(words_of(source, count))
            if i % size == rank
        ]
        assert sorted(got, key=repr) == sorted(expected, key=repr)


def test_the_largest_part_that_fits_goes_and_one_byte_more_is_refused_naming_both_sizes():
    def program(rail):
        got = []
        channel = rail.channels.open(RECORD, lambda s, r, b: got.append(b.nbytes), name="big", blobs=True)
        largest = channel.largest_blob
        records = np.zeros(1, dtype=RECORD)
        channel.send([1 - rail.rank], records, Blobs.of(pa.array([b"a" * largest])))
        with pytest.raises(MessageSizeError) as refused:
            channel.send([1 - rail.rank], records, Blobs.of(pa.array([b"a" * (largest + 1)])))
        sent = rail.channels.staged()
        rail.barrier()
        return largest, got, str(refused.value), sent

    for largest, got, message, _ in World(2, seed=1, datagram_size=256).run(program):
        assert largest == 256 - HEADER_SIZE - 8 - 8 - 8 and got == [largest]
        assert f"a {largest + 1}-byte string does not fit in a 256-byte datagram" in message
        assert f"strings of up to {largest} bytes" in message


def test_a_segment_is_laid_out_as_the_module_says():
    sent = []

    def program(rail):
        channel = rail.channels.open(RECORD, lambda *args: None, name="layout", blobs=True)
        real_send = rail.send

        def spy(dest, buf, nbytes):
            sent.append(bytes(buf[:nbytes]))
            real_send(dest, buf, nbytes)

        rail.send = spy
        records = np.zeros(3, dtype=RECORD)
        records["n"] = [7, 8, 9]
        channel.send([1, 1, 1], records, Blobs.of(pa.array(["ab", "", "über"])))
        rail.barrier()
        rail.send = real_send

    World(2, seed=1).run(program)
    datagram = next(d for d in sent if d[3] == KIND_BLOBS)
    number, magic, kind, length = struct.unpack_from("<HBBI", datagram, 0)
    assert (magic, kind) == (MAGIC, KIND_BLOBS)
    count, zero = struct.unpack_from("<II", datagram, HEADER_SIZE)
    assert (count, zero) == (3, 0)
    fixed = np.frombuffer(datagram, RECORD, 3, HEADER_SIZE + 8)
    assert fixed["n"].tolist() == [7, 8, 9]
    offsets_at = HEADER_SIZE + 8 + 24  # 3 records of 8 bytes: already at an 8-byte offset
    assert np.frombuffer(datagram, "<i4", 4, offsets_at).tolist() == [0, 2, 2, 7]
    assert datagram[offsets_at + 16 : offsets_at + 23] == "abüber".encode()[:7]
    assert length == offsets_at + 16 + 7 - HEADER_SIZE


def test_a_channel_of_blobs_refuses_sends_without_them_and_the_others_refuse_them():
    def program(rail):
        blobs = rail.channels.open(RECORD, lambda *a: None, name="b", blobs=True)
        plain = rail.channels.open(RECORD, lambda *a: None, name="p")
        errors = []
        for call in (
            lambda: blobs.send([0], np.zeros(1, RECORD)),
            lambda: plain.send([0], np.zeros(1, RECORD), Blobs.of(pa.array(["a"]))),
            lambda: blobs.send([0, 0], np.zeros(2, RECORD), Blobs.of(pa.array(["a"]))),
            lambda: blobs.fill_to(0, 1, lambda *a: None),
        ):
            with pytest.raises((TypeError, ValueError)) as error:
                call()
            errors.append(str(error.value))
        return errors

    (errors,) = World(1, seed=1).run(program)
    assert "give their blobs" in errors[0] and "takes no blobs" in errors[1]
    assert "1 variable-size parts for 2 records" in errors[2] and "sent with send()" in errors[3]
