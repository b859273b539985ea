"""MetricsRecorder: sampling on a fake clock, gaps, final totals, the JSON-lines file."""

from __future__ import annotations

import pytest

from mailrail_tools.bench import metrics
from mailrail_tools.bench.metrics import FIELDS, MetricsRecorder, read_metrics, trial_samples


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch) -> FakeClock:
    fake = FakeClock()
    monkeypatch.setattr(metrics.time, "perf_counter", fake)
    return fake


def test_samples_every_interval_and_final_sample_holds_the_totals(clock, tmp_path):
    recorder = MetricsRecorder(rank=3, interval=0.1)
    recorder.truncate(str(tmp_path))
    recorder.start_trial(0, clock.now, to_send=4, to_receive=2)
    for step in range(4):
        clock.now += 0.03
        recorder.receiving()
        clock.now += 0.03
        recorder.sent(100)
        if step % 2:
            recorder.received(7)
    recorder.finish_trial()
    recorder.write(str(tmp_path))

    samples = read_metrics(str(tmp_path), 3)
    assert [list(s) for s in samples] == [list(FIELDS)] * len(samples)
    # Due at 0.1 and 0.2: the first calls after them (a send at 0.12, a receive at 0.21) take them.
    assert [round(s["elapsed_s"], 6) for s in samples] == [0.12, 0.21, 0.24]
    assert [s["messages_sent"] for s in samples] == [2, 3, 4]
    final = samples[-1]
    assert (final["messages_sent"], final["bytes_sent"]) == (4, 400)
    assert (final["messages_received"], final["bytes_received"]) == (2, 14)
    assert final["send_pct"] == final["recv_pct"] == 100.0
    assert all(s["rank"] == 3 and s["trial"] == 0 for s in samples)


def test_gaps_are_the_longest_pause_since_the_previous_sample(clock, tmp_path):
    recorder = MetricsRecorder(rank=0, interval=10.0)
    recorder.start_trial(0, clock.now, to_send=3, to_receive=0)
    recorder.sent(1)
    clock.now += 0.5
    recorder.sent(1)
    clock.now += 0.2
    recorder.sent(1)
    recorder.receiving()
    clock.now += 1.5
    recorder.receiving()
    recorder.finish_trial()
    recorder.write(str(tmp_path))
    (sample,) = read_metrics(str(tmp_path), 0)
    assert sample["max_send_gap_s"] == pytest.approx(0.5)
    assert sample["max_recv_gap_s"] == pytest.approx(1.5)
    assert sample["recv_pct"] == 100.0  # nothing to receive is complete
    assert sample["rss_bytes"] > 0


def test_a_long_stall_yields_one_sample_not_a_burst(clock, tmp_path):
    recorder = MetricsRecorder(rank=0, interval=0.1)
    recorder.start_trial(0, clock.now, to_send=10, to_receive=0)
    clock.now += 5.0  # blocked for 50 intervals
    recorder.sent(1)
    recorder.sent(1)
    clock.now += 0.05
    recorder.sent(1)
    recorder.finish_trial()
    recorder.write(str(tmp_path))
    samples = read_metrics(str(tmp_path), 0)
    assert [s["messages_sent"] for s in samples] == [1, 3]
    assert samples[-1]["send_pct"] == pytest.approx(30.0)


def test_trials_append_to_one_file_and_truncate_starts_afresh(clock, tmp_path):
    recorder = MetricsRecorder(rank=1, interval=1.0)
    recorder.truncate(str(tmp_path))
    for trial in range(2):
        recorder.start_trial(trial, clock.now, to_send=1, to_receive=0)
        recorder.sent(5)
        recorder.finish_trial()
        recorder.write(str(tmp_path))
    assert sorted(trial_samples(str(tmp_path), 1)) == [1]
    assert [s["trial"] for s in read_metrics(str(tmp_path), 1)] == [0, 1]
    MetricsRecorder(rank=1, interval=1.0).truncate(str(tmp_path))
    assert read_metrics(str(tmp_path), 1) == []
