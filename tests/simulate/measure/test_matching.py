"""``simulate measure-matching`` under a real mpiexec: every queued message received once, each kind of
receive timed, and the refusals before anything is sent.  Correctness only: the figures themselves are the
experiment's."""

from __future__ import annotations

import json

import pytest

from helpers import mailrail_job
from mailrail_simulate.measure.matching import KINDS

pytestmark = pytest.mark.mpi


@pytest.mark.smoke
@pytest.mark.parametrize("ranks, nbytes", [(2, 8), (3, 4096), (2, 65536)])  # the last: rendezvous everywhere
def test_every_queued_message_is_received_once_and_each_kind_is_timed(tmp_path, ranks, nbytes):
    out = tmp_path / "matching.json"
    completed = mailrail_job(
        ranks, "simulate", "measure-matching", "--queue", "40,2000", "--receives", "20", "--bytes", nbytes,
        "--json", out,
    )  # fmt: skip
    assert completed.returncode == 0, completed.stdout + completed.stderr
    document = json.loads(out.read_text())
    assert document["benchmark"] == "matching" and document["senders"] == ranks - 1
    assert document["message_bytes"] == nbytes and "\x00" not in document["mpi"]
    assert [p["queue"] for p in document["points"]] == [40, 2000]
    assert [p["receives"] for p in document["points"]] == [10, 20]  # at most a quarter of the queue
    for point in document["points"]:
        assert set(point["receive_us"]) == set(KINDS)
        for figures in point["receive_us"].values():
            assert 0 < figures["min"] <= figures["median"] <= figures["max"]
        assert point["fill_s"] > 0 and point["resident_bytes_per_message"] >= 0
    assert "head wildcard us" in completed.stdout and "every message checked once" in completed.stdout


@pytest.mark.parametrize(
    "ranks, args, message",
    [
        (1, [], "needs 2 or more ranks (one receiver), got 1: mailrail run -n 2 simulate measure-matching"),
        (2, ["--queue", "3"], "argument --queue: "),
        (2, ["--queue", "100", "--receives", "0"], "argument --receives: "),
        (2, ["--bytes", "7"], "argument --bytes: "),
    ],
)
def test_bad_arguments_are_refused_in_one_line(ranks, args, message):
    completed = mailrail_job(ranks, "simulate", "measure-matching", *args)
    assert completed.returncode == 2
    assert message in completed.stdout + completed.stderr
