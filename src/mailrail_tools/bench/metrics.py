"""Sub-second per-rank metrics of the adversarial benchmark (``--metrics DIR``).

A :class:`MetricsRecorder` is told about every ``send`` and ``receive`` call of
one trial and keeps a sample every ``interval`` seconds in memory; the samples
are written after the trial, so no file I/O happens while the clock runs.  The
clock is read once per call anyway (the gap between successive calls needs
it), and the same reading decides when the next sample is due.

File format: one JSON-lines file per rank, ``DIR/rank-00003.jsonl``; every line
is one sample with the fields of :data:`FIELDS`.  The counts are cumulative
within the trial; the gaps are the longest pause between two successive calls
*since the previous sample*.  The last sample of each trial is taken when the
rank finished its part of the trial, so its counts equal the rank's totals.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from typing import Any

#: The fields of one sample, in file order.
FIELDS = (
    "rank",  # MPI rank
    "trial",  # trial index, from 0
    "elapsed_s",  # seconds since the trial started on this rank
    "messages_sent",  # send() calls so far in this trial
    "bytes_sent",  # payload bytes handed to send() so far
    "messages_received",  # messages receive() returned so far
    "bytes_received",  # payload bytes of those messages
    "send_pct",  # messages_sent / messages this rank must send, in % (100 if none)
    "recv_pct",  # messages_received / messages this rank expects, in % (100 if none)
    "max_send_gap_s",  # longest time between two successive send() calls since the last sample
    "max_recv_gap_s",  # longest time between two successive receive() calls since the last sample
    "rss_bytes",  # resident memory now (VmRSS): what the victim's MPI library buffers shows here
)


def metrics_path(directory: str, rank: int) -> str:
    return os.path.join(directory, f"rank-{rank:05d}.jsonl")


class MetricsRecorder:
    """Counts and call gaps of one rank, sampled every *interval* seconds of one trial."""

    def __init__(self, rank: int, interval: float) -> None:
        self.rank = rank
        self.interval = interval
        self._samples: list[tuple] = []

    def start_trial(self, trial: int, start: float, to_send: int, to_receive: int) -> None:
        self.trial = trial
        self.start = start
        self.to_send = to_send
        self.to_receive = to_receive
        self.messages_sent = self.bytes_sent = 0
        self.messages_received = self.bytes_received = 0
        self._next_sample = start + self.interval
        self._last_send = self._last_receive = None
        self._send_gap = self._recv_gap = 0.0

    def sent(self, nbytes: int) -> None:
        """Call right before ``send()``."""
        now = time.perf_counter()
        if self._last_send is not None and now - self._last_send > self._send_gap:
            self._send_gap = now - self._last_send
        self._last_send = now
        self.messages_sent += 1
        self.bytes_sent += nbytes
        if now >= self._next_sample:
            self._sample(now)

    def receiving(self) -> None:
        """Call right before ``receive()``."""
        now = time.perf_counter()
        if self._last_receive is not None and now - self._last_receive > self._recv_gap:
            self._recv_gap = now - self._last_receive
        self._last_receive = now
        if now >= self._next_sample:
            self._sample(now)

    def received(self, nbytes: int) -> None:
        """Call when ``receive()`` returned a message."""
        self.messages_received += 1
        self.bytes_received += nbytes

    def finish_trial(self) -> None:
        """The final sample of the trial: its counts are the rank's totals."""
        self._sample(time.perf_counter())

    def _sample(self, now: float) -> None:
        self._samples.append(
            (
                self.rank,
                self.trial,
                now - self.start,
                self.messages_sent,
                self.bytes_sent,
                self.messages_received,
                self.bytes_received,
                _percent(self.messages_sent, self.to_send),
                _percent(self.messages_received, self.to_receive),
                self._send_gap,
                self._recv_gap,
                current_rss_bytes(),
            )
        )
        self._send_gap = self._recv_gap = 0.0
        self._next_sample += self.interval
        if self._next_sample <= now:  # the rank was busy past a whole interval: re-anchor, don't replay
            self._next_sample = now + self.interval

    def truncate(self, directory: str) -> None:
        """Start this rank's file afresh (a run appends one block of samples per trial)."""
        os.makedirs(directory, exist_ok=True)
        open(metrics_path(directory, self.rank), "w").close()

    def write(self, directory: str) -> str:
        """Append the buffered samples to this rank's file (after a trial, off the clock)."""
        path = metrics_path(directory, self.rank)
        with open(path, "a") as out:
            for sample in self._samples:
                out.write(json.dumps(dict(zip(FIELDS, sample))) + "\n")
        self._samples.clear()
        return path


def current_rss_bytes() -> int:
    """Resident set size now (cheap: one small /proc read per sample)."""
    try:
        with open("/proc/self/statm", "rb") as statm:
            return int(statm.read().split()[1]) * _PAGE_SIZE
    except OSError:
        return 0


_PAGE_SIZE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def _percent(done: int, total: int) -> float:
    return 100.0 * done / total if total else 100.0


def read_metrics(directory: str, rank: int) -> list[dict[str, Any]]:
    """The samples of one rank's file, in order."""
    with open(metrics_path(directory, rank)) as lines:
        return [json.loads(line) for line in lines if line.strip()]


def read_all_metrics(directory: str) -> Iterator[dict[str, Any]]:
    """Every sample of every rank file in *directory*."""
    for name in sorted(os.listdir(directory)):
        if name.startswith("rank-") and name.endswith(".jsonl"):
            with open(os.path.join(directory, name)) as lines:
                yield from (json.loads(line) for line in lines if line.strip())


def trial_samples(directory: str, trial: int) -> dict[int, list[dict[str, Any]]]:
    """The samples of one trial, per rank, in time order."""
    by_rank: dict[int, list[dict[str, Any]]] = {}
    for sample in read_all_metrics(directory):
        if sample["trial"] == trial:
            by_rank.setdefault(sample["rank"], []).append(sample)
    return by_rank
