"""Packing recorded messages into datagrams: consecutive ones to a destination share, big ones split."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from mailrail_tools.replay.packing import DatagramPacker


def datagrams(size: int, messages) -> list[tuple[int, int]]:
    packer = DatagramPacker(size)
    out = [d for dest, nbytes in messages for d in packer.add(dest, nbytes)]
    return out + list(packer.flush())


def test_consecutive_messages_share_a_datagram_until_the_destination_changes():
    assert datagrams(100, [(1, 30), (1, 30), (1, 30), (2, 5), (1, 5)]) == [(1, 90), (2, 5), (1, 5)]


def test_a_run_is_cut_into_full_datagrams_and_one_partial():
    assert datagrams(100, [(3, 60), (3, 60), (3, 60)]) == [(3, 100), (3, 80)]
    assert datagrams(100, [(0, 250)]) == [(0, 100), (0, 100), (0, 50)]
    assert datagrams(100, [(0, 200)]) == [(0, 100), (0, 100)]  # no empty tail


def test_empty_messages_still_send_one_datagram_per_run():
    assert datagrams(100, [(1, 0), (1, 0), (2, 0), (2, 7)]) == [(1, 0), (2, 7)]


def test_block_input_matches_message_by_message():
    rng = np.random.default_rng(1)
    dests, sizes = rng.integers(0, 3, 500), rng.integers(0, 300, 500)
    packer = DatagramPacker(256)
    blocks = [
        d for start in range(0, 500, 64) for d in packer.add_block(dests[start : start + 64], sizes[start : start + 64])
    ]
    blocks += list(packer.flush())
    assert blocks == datagrams(256, zip(dests.tolist(), sizes.tolist()))


@settings(max_examples=200, deadline=None)
@given(size=st.integers(1, 64), messages=st.lists(st.tuples(st.integers(0, 3), st.integers(0, 200)), max_size=40))
def test_bytes_are_conserved_per_run_and_datagrams_fit(size, messages):
    out = datagrams(size, messages)
    assert all(0 <= nbytes <= size for _, nbytes in out)
    runs: list[list[int]] = []  # (dest, bytes) of each run of consecutive messages
    for dest, nbytes in messages:
        if runs and runs[-1][0] == dest:
            runs[-1][1] += nbytes
        else:
            runs.append([dest, nbytes])
    produced: list[list[int]] = []
    for dest, nbytes in out:
        if produced and produced[-1][0] == dest:
            produced[-1][1] += nbytes
        else:
            produced.append([dest, nbytes])
    assert produced == runs
    # every datagram but the last of a run is full
    for (dest, nbytes), (next_dest, _) in zip(out, out[1:]):
        if dest == next_dest:
            assert nbytes == size
