"""What the runner of a job (``mailrail run``, on this machine or a virtual cluster) says when the job fails:
the first failing rank's traceback, trimmed to the user's frames (:mod:`mailrail.tracebacks`), then one
line, after whatever the ranks printed, from what the ranks recorded (:mod:`mailrail.failure`) and what
the MPI printed (:mod:`mailrail_tools.jobs.launcher_messages`); every rank's traceback in full and the MPI's messages
are kept in a log the line names."""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from collections.abc import Sequence
from types import TracebackType
from typing import Any

from mailrail.failure import (
    FAILURES_VARIABLE,
    SAME_ON_EVERY_RANK,
    SHOWN_BY_RUNNER,
    TRACEBACKS_VARIABLE,
    describe_ranks,
    labelled,
    read_failures,
)
from mailrail.tracebacks import with_log

from . import control
from .launcher_messages import EndedProcess, LauncherMessageFilter, ended_processes


class FailureReport:
    """What a job's ranks record while it runs (their failures, tracebacks included) and the MPI's messages
    it prints, kept out of the job's output unless *verbose* (then the ranks print their tracebacks and the
    MPI's messages show where they came, as they would under a bare ``mpiexec``); then, at its end, the
    first failing rank's traceback, trimmed, and the one line its runner says (:meth:`say`).  A context
    manager: its scratch directory goes at the end, or when this process dies (SIGKILL included: the
    watchdog's); the log it names stays (in the temporary directory) for the user to read."""

    def __init__(self, ranks: int, *, verbose: bool = False) -> None:
        self.ranks = ranks
        self.verbose = verbose
        self.messages = None if verbose else LauncherMessageFilter()
        self._scratch = tempfile.mkdtemp(prefix="mailrail-run-")
        self._unregister = control.end_job_on_owner_death(self._scratch)
        self._failures = os.path.join(self._scratch, "failures")
        self._log: str | None = None  # where kept() wrote the tracebacks and the MPI's messages (once)
        self._logged = ""  # what that log holds, said in kept()'s line

    @property
    def environment(self) -> dict[str, str]:
        """What the job's environment needs for its ranks to record their failures here (and, unless verbose,
        to leave their tracebacks to this report)."""
        if self.verbose:
            return {FAILURES_VARIABLE: self._failures}
        return {FAILURES_VARIABLE: self._failures, TRACEBACKS_VARIABLE: SHOWN_BY_RUNNER}

    def kept(self) -> str:
        """`` [the traceback in full and the MPI's messages: LOG; -v shows them]`` once the failing ranks'
        tracebacks and the MPI's messages the job printed are written to a log of their own (in the temporary
        directory, kept), or nothing when there were none (or they were shown: verbose)."""
        if self._log is None:
            tracebacks = [record for record in read_failures(self._failures) if record.get("traceback")]
            messages = self.messages.text if self.messages is not None and self.messages.messages else ""
            if self.verbose or not (tracebacks or messages):
                return ""
            fd, self._log = tempfile.mkstemp(prefix="mailrail-run-", suffix=".log")
            with os.fdopen(fd, "w", encoding="utf-8") as log:
                log.write(failure_log(tracebacks, messages))
            said = []
            if tracebacks:
                said.append(
                    f"the {len(tracebacks)} tracebacks in full" if len(tracebacks) > 1 else "the traceback in full"
                )
            if messages:
                said.append("the MPI's messages")
            self._logged = " and ".join(said)
        return f" [{self._logged}: {self._log}; -v shows them]"

    def show_first_traceback(self) -> None:
        """On standard error, the traceback of the first rank that recorded a failure, trimmed to the user's
        frames and naming the log that holds it in full; nothing when verbose (the ranks printed theirs), when
        that rank recorded none (an exit status), or for an error every rank raises alike (the line says it)."""
        records = read_failures(self._failures)
        if self.verbose or not records or records[0].get("type") in SAME_ON_EVERY_RANK:
            return
        first = records[0]
        text = first.get("brief") or first.get("traceback")
        if not isinstance(text, str) or not text:
            return
        self.kept()  # (the log the traceback names)
        sys.stderr.write(labelled(with_log(text, self._log or "the job's log"), record_label(first)))

    def say(self, command: str, status: int) -> None:
        """``COMMAND: the job failed ...`` on standard error when *status* is not 0, after the first failing
        rank's traceback (:meth:`show_first_traceback`), and where the log went, if anything was kept."""
        if status == 0:
            if self.messages is not None and self.messages.messages:
                print(f"{command}: the MPI printed messages{self.kept()}", file=sys.stderr)
            return
        ended = ended_processes(self.messages.text) if self.messages is not None else []
        summary = failure_summary(read_failures(self._failures), self.ranks, status, ended)
        if summary is None and self.messages is not None:  # nothing else says what failed: the MPI's words do
            sys.stderr.write(self.messages.text)
            self.messages = None
        self.show_first_traceback()
        said = summary or f"the job failed with exit status {status} (the MPI's messages above say why)"
        print(f"{command}: {said}{self.kept()}", file=sys.stderr)

    def __enter__(self) -> FailureReport:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, traceback: TracebackType | None
    ) -> None:
        shutil.rmtree(self._scratch, ignore_errors=True)
        self._unregister()


#: The longest part of an exception's message the summary line quotes.
SUMMARY_MESSAGE_CHARS = 300


def failure_summary(
    records: Sequence[dict[str, Any]],
    ranks: int,
    status: int,
    ended: Sequence[EndedProcess] = (),
) -> str | None:
    """One line for a job that failed: which ranks raised what (an error every rank raised alike, once),
    or exited with which status, else which ranks the MPI says ended on which signal (*ended*), and the
    job's exit status; None when none of that is known."""
    raised: dict[tuple[str, str], list[int]] = {}
    exited: dict[int, list[int]] = {}
    for record in records:
        rank = record.get("rank")
        if not isinstance(rank, int):
            continue
        if record.get("type"):
            message = (record.get("message") or "").strip().splitlines()
            text = message[0][:SUMMARY_MESSAGE_CHARS] if message else ""
            raised.setdefault((record["type"], text), []).append(rank)
        else:
            exited.setdefault(int(record.get("exit_code") or 0), []).append(rank)
    parts = []
    for (kind, text), who in raised.items():
        named = f"every rank ({ranks})" if len(set(who)) == ranks > 1 else describe_ranks(sorted(set(who)))
        parts.append(f"{named} raised {kind}" + (f": {text}" if text else ""))
    for code, who in exited.items():
        parts.append(f"{describe_ranks(sorted(set(who)))} exited with status {code}")
    if not parts:  # a signal or a crash: the MPI names the process
        parts = [describe_ended(process) for process in ended]
    if not parts:
        return None
    return f"the job failed with exit status {status}: " + "; ".join(parts)


def record_label(record: dict[str, Any]) -> str:
    """``rank R on HOST``, as the failing rank named itself (:func:`~mailrail.failure.rank_label`)."""
    rank, host = record.get("rank"), record.get("host")
    return f"rank {rank} on {host}" if rank is not None else str(host)


def failure_log(tracebacks: Sequence[dict[str, Any]], messages: str) -> str:
    """The log of a failed job: every failing rank's traceback in full, in the order they were recorded (each
    line prefixed ``[rank R on HOST] ``, as a bare ``mpiexec`` shows them), then the MPI's *messages*."""
    parts = []
    if tracebacks:
        parts.append("--- the failing ranks' tracebacks, in full, in the order the ranks failed ---\n")
        parts += [labelled(record["traceback"], record_label(record)) for record in tracebacks]
    if tracebacks and messages:
        parts.append("--- the MPI's messages ---\n")
    return "".join(parts) + messages


def describe_ended(process: EndedProcess) -> str:
    """``rank 1 was killed by signal 9 (Killed)``; ``a rank on vm ...`` when the MPI does not say which."""
    who = f"rank {process.rank}" if process.rank is not None else f"a rank on {process.host}"
    if process.aborted:
        return f"{who} called MPI_Abort" + (f" ({process.reason})" if process.reason else "")
    if process.signal is None:  # (Hydra's exit code: a signal's number, or the exit status)
        return f"{who} ended abnormally (exit code {process.exit_code})"
    named = f" ({process.signal_name})" if process.signal_name else ""
    return f"{who} was killed by signal {process.signal}{named}"
