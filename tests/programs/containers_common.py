"""What the container test programs share (each puts this folder on sys.path, as it does for
containers_counting_set): a rank's ``Checks``, the probe of collectives refused inside a handler, the end of a
``staged`` run (finalize() with work pending), and a job's ``main`` under mpiexec with its ``RESULT`` line."""

from __future__ import annotations

import argparse
import json
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np

from mailrail import MailRailError, UndeliveredError, UndeliveredWarning


class Checks:
    """This rank's checks: how many ran, the failures (named, with at most *detail* characters of detail), and
    the messages of the expected errors by name."""

    def __init__(self, rank: int, detail: int = 300) -> None:
        self.rank = rank
        self.detail = detail
        self.failures: list[str] = []
        self.count = 0
        self.errors: dict[str, str] = {}

    def __call__(self, name: str, ok: object, detail: object = "") -> None:
        self.count += 1
        if not ok:
            self.failures.append(f"rank {self.rank}: {name} {str(detail)[: self.detail]}")

    def error(self, name: str, kind: type, words: list[str], action: Callable[[], object]) -> None:
        """*action* raises *kind*, with each of *words* in its message."""
        try:
            action()
        except kind as error:
            self.errors[name] = str(error)
            self(f"error {name} names {words}", all(word in str(error) for word in words), error)
            return
        except Exception as error:  # reported as a failure
            self(f"error {name} is {kind.__name__}", False, f"got {type(error).__name__}: {error}")
            return
        self(f"error {name} raised", False, "no error")


def refused_in_a_handler(
    rail: Any, collectives: list[Callable[[], object]], allowed: Callable[[], object]
) -> list[str]:
    """Each of *collectives* called inside a handler (of one record from the previous rank), then *allowed*
    (asynchronous work, which a handler may do); after a barrier, the message of each refusal in order, or
    ``"no error"`` for a collective that was not refused."""
    refusals: list[str] = []

    def collective_inside(source: int, records: np.ndarray) -> None:
        for action in collectives:
            try:
                action()
                refusals.append("no error")
            except MailRailError as error:
                refusals.append(str(error))
        allowed()

    probe = rail.channels.open(np.int64, collective_inside, name="probe")
    probe.send_to((rail.rank + 1) % rail.size, np.zeros(1, dtype=np.int64))
    rail.barrier()
    return refusals


def finalize_pending(rail: Any, strict: bool, result: dict[str, Any]) -> dict[str, Any]:
    """finalize() with work pending, into *result*: if *strict*, the message of its error (``error``); else its
    report (``report``) and the UndeliveredWarnings' messages (``warnings``)."""
    if strict:
        try:
            rail.finalize(strict=True)
            result["error"] = "no error"
        except UndeliveredError as error:
            result["error"] = str(error)
        return result
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result["report"] = rail.finalize()
    result["warnings"] = [str(w.message) for w in caught if w.category is UndeliveredWarning]
    return result


def seed_and_scale(parser: argparse.ArgumentParser | None = None) -> argparse.ArgumentParser:
    """*parser* (a new one by default) with ``--seed``, ``--scale`` and ``--staged``."""
    parser = parser or argparse.ArgumentParser()
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--scale", type=float, default=1.0, help="batch sizes, relative to the defaults")
    parser.add_argument("--staged", action="store_true", help="also check what finalize() reports as staged")
    return parser


def run_job(
    scenario: Callable[[Any], dict],
    staged: dict[str, Callable[[Any], dict]] | None = None,
    first_rank: tuple[str, ...] = ("errors",),
) -> None:
    """A container program's job under mpiexec: *scenario* on a MailRail of COMM_WORLD, which must then
    finalize() with nothing pending; each of *staged* on a MailRail of its own.  Rank 0 prints ``RESULT`` and
    the JSON of ``failures`` (every rank's), ``checks`` (how many ran, per rank), the keys *first_rank* of rank
    0's result, ``reserve_failures`` (the sum over ranks), and each key of *staged* (a list, per rank)."""
    from mpi4py import MPI

    from mailrail import MailRail

    comm = MPI.COMM_WORLD
    rail = MailRail(comm)
    result = scenario(rail)
    stats = rail.stats()
    report = rail.finalize(strict=True)
    if any(report.values()):
        result["failures"].append(f"rank {comm.rank}: finalize after barriers reported {report}")
    staged = staged or {}
    for key, run in staged.items():
        result[key] = run(MailRail(comm))
    everyone = comm.gather(result, root=0)
    reserve_failures = comm.reduce(stats["reserve_failures"], root=0)
    if comm.rank == 0:
        assert everyone is not None
        summary = {
            "failures": [failure for theirs in everyone for failure in theirs["failures"]],
            "checks": [theirs["checks"] for theirs in everyone],
            **{key: everyone[0][key] for key in first_rank},
            "reserve_failures": reserve_failures,
            **{key: [theirs[key] for theirs in everyone] for key in staged},
        }
        print("RESULT " + json.dumps(summary), flush=True)


def local_arrays(table: Any, *dtypes: Any) -> tuple[np.ndarray, ...]:
    """A container's ``local()`` table back as numpy arrays, one per column, of these *dtypes*."""
    from mailrail.containers.keys import numpy_column

    return tuple(numpy_column(table.column(i), np.dtype(dtype)) for i, dtype in enumerate(dtypes))
