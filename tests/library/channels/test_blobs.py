"""Records with variable-size parts on a channel (segments of kind 2): every record delivered once with its
fixed part and its bytes (empty, non-ASCII, long), one part or two, across ranks and to the rank itself, under
backpressure; parts of exactly the largest size that fits, and one byte more refused naming both sizes; the wire
format as the module documents it, and a segment whose count of parts is not its channel's refused."""

from __future__ import annotations

import struct
import types

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mailrail.channels import HEADER_SIZE, KIND_BLOBS, MAGIC, Blobs
from mailrail.errors import MessageSizeError, ProtocolError
from mailrail.testing import World

RECORD = np.dtype([("n", "<i4"), ("tag", "<u2")])


def words_of(rank: int, count: int) -> list[str]:
    base = ["", "über", "東京", "x" * 17 + "a", "x" * 17 + "b"]
    return [base[i % len(base)] + f"{rank}:{i}" * (i % 7) for i in range(count)]


def second_words_of(rank: int, count: int) -> list[str]:
    """A second string per record: long where the first is short, so records' sizes vary both ways."""
    return ["ß" * ((7 * i + rank) % 23) + str(i) if i % 5 else "" for i in range(count)]


def exchange(rail, count, record_dtype, as_type, parts=1):
    got = []

    def arrived(source, records, *blobs):
        assert len(blobs) == parts
        columns = [b.arrow(as_type).to_pylist() for b in blobs]
        got.append((source, records.copy(), list(zip(*columns))))

    channel = rail.channels.open(record_dtype, arrived, name="words", blobs=parts)
    words = [words_of(rail.rank, count), second_words_of(rail.rank, count)][:parts]
    records = np.zeros(count, dtype=record_dtype)
    if record_dtype.names:
        records["n"] = np.arange(count)
    packed = tuple(Blobs.of(pa.array(column, pa.string())) for column in words)
    channel.send(
        np.arange(count) % rail.size,
        None if not record_dtype.names else records,
        packed[0] if parts == 1 else packed,
    )
    rail.barrier()
    return [(source, int(r["n"]) if record_dtype.names else None, w) for source, rs, ws in got for r, w in zip(rs, ws)]


@settings(max_examples=12, deadline=None)
@given(
    size=st.integers(1, 4),
    seed=st.integers(0, 2**16),
    count=st.integers(0, 300),
    empty=st.booleans(),
    parts=st.sampled_from([1, 2]),
)
def test_every_record_arrives_once_with_its_bytes(size, seed, count, empty, parts):
    dtype = np.dtype([]) if empty else RECORD
    world = World(size, seed=seed, datagram_size=256, send_pool_slots=2, recv_pool_slots=4)
    results = world.run(exchange, count, dtype, pa.string(), parts)
    for rank, got in enumerate(results):
        expected = [
            (source, None if empty else i, strings[:parts])
            for source in range(size)
            for i, strings in enumerate(zip(words_of(source, count), second_words_of(source, count)))
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


def test_two_parts_of_the_largest_size_together_go_and_one_byte_more_is_refused():
    def program(rail):
        got = []
        channel = rail.channels.open(
            RECORD, lambda s, r, first, second: got.append((first.nbytes, second.nbytes)), name="pairs", blobs=2
        )
        largest = channel.largest_blob
        records = np.zeros(2, dtype=RECORD)
        split = [b"a" * (largest - 5), b""], [b"b" * 5, b"c" * largest]  # records (L - 5, 5) and (0, L)
        channel.send([1 - rail.rank] * 2, records, tuple(Blobs.of(pa.array(part)) for part in split))
        with pytest.raises(MessageSizeError) as refused:
            one_more = [b"a" * 5], [b"b" * (largest - 4)]
            channel.send([1 - rail.rank], records[:1], tuple(Blobs.of(pa.array(part)) for part in one_more))
        with pytest.raises(TypeError, match="2 variable-size parts, given 1"):
            channel.send([1 - rail.rank], records[:1], Blobs.of(pa.array([b"a"])))
        rail.barrier()
        return largest, got, str(refused.value)

    for largest, got, message in World(2, seed=1, datagram_size=256).run(program):
        assert largest == 256 - HEADER_SIZE - 8 - 8 - 16 and sorted(got) == [(0, largest), (largest - 5, 5)]
        assert f"a {largest + 1}-byte record of 2 strings does not fit in a 256-byte datagram" in message
        assert f"strings of up to {largest} bytes together" in message


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
    count, parts = struct.unpack_from("<II", datagram, HEADER_SIZE)
    assert (count, parts) == (3, 1)
    fixed = np.frombuffer(datagram, RECORD, 3, HEADER_SIZE + 8)
    assert fixed["n"].tolist() == [7, 8, 9]
    offsets_at = HEADER_SIZE + 8 + 24  # 3 records of 8 bytes: already at an 8-byte offset
    assert np.frombuffer(datagram, "<i4", 4, offsets_at).tolist() == [0, 2, 2, 7]
    assert datagram[offsets_at + 16 : offsets_at + 23] == "abüber".encode()[:7]
    assert length == offsets_at + 16 + 7 - HEADER_SIZE


def test_a_segment_of_two_parts_is_laid_out_as_the_module_says():
    sent = []
    got = []

    def program(rail):
        channel = rail.channels.open(
            np.dtype([]), lambda s, r, *parts: got.append([p.copy() for p in parts]), name="two", blobs=2
        )
        real_send = rail.send

        def spy(dest, buf, nbytes):
            sent.append(bytes(buf[:nbytes]))
            real_send(dest, buf, nbytes)

        rail.send = spy
        first, second = Blobs.of(pa.array(["ab", "", "c"])), Blobs.of(pa.array(["über", "xyz", ""]))
        if rail.rank == 0:
            channel.send([1, 1, 1], None, (first, second))
        rail.barrier()
        rail.send = real_send
        return [[p.arrow(pa.string()).to_pylist() for p in parts] for parts in got]

    results = World(2, seed=1).run(program)
    datagram = next(d for d in sent if d[3] == KIND_BLOBS)
    count, parts = struct.unpack_from("<II", datagram, HEADER_SIZE)
    assert (count, parts) == (3, 2)
    offsets_at = HEADER_SIZE + 8  # no fixed part
    assert np.frombuffer(datagram, "<i4", 4, offsets_at).tolist() == [0, 2, 2, 3]
    assert np.frombuffer(datagram, "<i4", 4, offsets_at + 16).tolist() == [0, 5, 8, 8]
    data_at = offsets_at + 32
    assert datagram[data_at : data_at + 3] == b"abc" and datagram[data_at + 3 : data_at + 11] == "überxyz".encode()
    assert struct.unpack_from("<HBBI", datagram, 0)[3] == data_at + 11 - HEADER_SIZE
    assert results[1] == [[["ab", "", "c"], ["über", "xyz", ""]]]


def test_a_segment_whose_count_of_parts_is_not_its_channels_is_refused():
    def program(rail):
        rail.channels.open(np.dtype([]), lambda *a: None, name="two", blobs=2)
        body = struct.pack("<II", 1, 1) + struct.pack("<ii", 0, 1) + b"a"  # one part, for the channel of two
        datagram = struct.pack("<HBBI", 0, MAGIC, KIND_BLOBS, len(body)) + body
        message = types.SimpleNamespace(data=np.frombuffer(datagram, np.uint8), nbytes=len(datagram), source=0)
        with pytest.raises(ProtocolError) as refused:
            rail.channels.dispatch(message)
        return str(refused.value)

    (message,) = World(1, seed=1).run(program)
    assert "1 variable-size parts for channel 0's 2" in message


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
