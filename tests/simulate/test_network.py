"""The model's network against closed forms: one link, a switch port's bounded buffer, shared memory."""

from __future__ import annotations

import pytest

from mailrail_simulate.network import Network
from mailrail_simulate.params import ModelParams

RATE = 1e9  # bytes/s
PARAMS = ModelParams(link_Bps=RATE, link_latency_s=5e-6, header_bytes=0, switch_queue_bytes=1 << 20)


def test_back_to_back_messages_on_one_link_pipeline_through_the_switch():
    """k messages of s bytes handed over at once: the first arrives after two serializations and the
    latency, each next one s / rate later (store and forward at the switch)."""
    network = Network(PARAMS, nodes=2)
    size, serialize = 4096, 4096 / RATE
    times = [network.transfer(0.0, 0, 1, size) for _ in range(10)]
    for i, (left, arrival) in enumerate(times):
        assert left == pytest.approx((i + 1) * serialize)
        assert arrival == pytest.approx((i + 2) * serialize + 5e-6)
    assert network.wire_bytes == 10 * size


def test_a_message_after_the_link_went_idle_waits_for_nothing():
    network = Network(PARAMS, nodes=2)
    network.transfer(0.0, 0, 1, 1000)
    left, arrival = network.transfer(1.0, 0, 1, 1000)
    assert left == pytest.approx(1.0 + 1e-6)
    assert arrival == pytest.approx(1.0 + 2e-6 + 5e-6)


@pytest.mark.parametrize("senders", [2, 8, 32])
def test_incast_is_paced_by_the_receivers_port_and_its_buffer_is_never_exceeded(senders):
    """n nodes send at once to one: the port drains at the link rate, so the last message arrives after
    all bytes crossed it; the uplinks wait while the port's buffer is full."""
    queue = 64 * 1024
    network = Network(PARAMS.replace(switch_queue_bytes=queue), nodes=senders + 1)
    size, per_sender = 4096, 50
    arrivals = [network.transfer(0.0, s, senders, size)[1] for _ in range(per_sender) for s in range(senders)]
    total = senders * per_sender * size
    assert max(arrivals) == pytest.approx(size / RATE + total / RATE + 5e-6)
    assert network.port_peak_bytes <= queue + 1e-6  # float rounding of times


def test_the_header_counts_on_the_wire():
    network = Network(PARAMS.replace(header_bytes=100), nodes=2)
    left, _ = network.transfer(0.0, 0, 1, 900)
    assert left == pytest.approx(1000 / RATE)
    assert network.wire_bytes == 1000


def test_ranks_of_one_node_copy_through_shared_memory():
    network = Network(PARAMS.replace(shm_Bps=2e9, shm_latency_s=1e-7), nodes=1)
    left, arrival = network.transfer(2.0, 0, 0, 4000)
    assert left == arrival == pytest.approx(2.0 + 1e-7 + 2e-6)
    assert network.wire_bytes == 0
