"""``mailrail bench faults``: the time from a fault to the end of its job, for each local fault.

Each trial starts ``mailrail run -n RANKS -- python -c PROGRAM`` (this Python and its MPI),
waits until every rank announced its pid, injects the fault and measures until the job has
ended: ``mailrail run`` exited (except when it is the process killed) *and* every process of the
job (the launcher and each rank) is gone.  The faults:

* ``exception``: rank 0 raises while the others wait in ``Barrier`` (time taken from the raise);
* ``rank-sigkill``: SIGKILL of the last rank;
* ``run-sigterm``, ``run-sigint``, ``run-sigkill``: the signal to ``mailrail run``;
* ``timeout``: ``mailrail run --timeout`` (time taken from the moment it is due: the launcher's start
  plus the time-out, to the kernel's 10 ms clock tick).

Run it outside any job (``mailrail bench faults``, not under ``mailrail run``).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import select
import signal
import statistics
import subprocess
import sys
import textwrap
import time
from typing import Any

from ..flags import float_in, int_in, one_line_errors
from ..jobs.control import children_of, descendants, is_alive, is_watchdog
from ..output import TABLE_WIDTH

FAULTS = ("exception", "rank-sigkill", "run-sigterm", "run-sigint", "run-sigkill", "timeout")
#: Seconds a job may take to start, and to end after its fault, before the trial counts as hung.
START_S = 60.0
END_S = 60.0

PROGRAM = """
import os, sys, time
from mpi4py import MPI
comm = MPI.COMM_WORLD
print(f"READY {comm.Get_rank()} {os.getpid()}", flush=True)
comm.Barrier()
if sys.argv[1] == "exception" and comm.Get_rank() == 0:
    time.sleep(0.5)  # the bench reads every READY line first
    print(f"FAULT {time.time()!r}", flush=True)
    raise RuntimeError("injected by mailrail bench faults")
comm.Barrier()
while True:
    time.sleep(1)
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    one_line_errors(parser)
    parser.add_argument("-n", "--ranks", type=int_in(2, 64), default=2, help="ranks of each job (default 2)")
    parser.add_argument("--trials", type=int_in(1, 100), default=3, help="trials per fault (default 3)")
    parser.add_argument(
        "--faults",
        default=",".join(FAULTS),
        type=lambda text: [name.strip() for name in text.split(",") if name.strip()],
        help=f"comma-separated subset of {','.join(FAULTS)} (default all)",
    )
    parser.add_argument(
        "--timeout", type=float_in(0.5, 600), default=3.0, help="the --timeout of the timeout fault (default 3 s)"
    )
    parser.add_argument("--json", metavar="PATH", help="write the results as JSON")


def _wait_gone(pids: set[int], deadline: float) -> bool:
    while any(is_alive(pid) for pid in pids):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.005)
    return True


def trial(fault: str, ranks: int, timeout: float) -> dict[str, Any]:
    """One job, one fault: seconds from the fault to the end of the job, and the job's exit status."""
    argv = [sys.executable, "-m", "mailrail_tools", "run", "-n", str(ranks)]
    if fault == "timeout":
        argv += ["--timeout", str(timeout)]
    argv += ["--", "python", "-c", PROGRAM, fault]
    started = time.time()
    run = subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL, start_new_session=True
    )
    assert run.stdout is not None
    output = ""
    job: set[int] = set()
    try:
        deadline = time.monotonic() + START_S
        while len(re.findall(r"READY \d+ (\d+)", output)) < ranks:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([run.stdout], [], [], left)[0]:
                return {"fault": fault, "error": "the job did not start"}
            chunk = os.read(run.stdout.fileno(), 65536).decode()
            if not chunk:
                return {"fault": fault, "error": f"the job ended before it started (exit {run.wait()})"}
            output += chunk
        pids = [int(pid) for pid in re.findall(r"READY \d+ (\d+)", output)]
        job = (descendants([run.pid]) | set(pids)) - {run.pid}
        fault_at = _inject(fault, run, pids, started, timeout)
        deadline = time.monotonic() + END_S
        while True:  # until every holder of the pipe is gone
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([run.stdout], [], [], left)[0]:
                return {"fault": fault, "error": f"the job did not end within {END_S:.0f} s"}
            chunk = os.read(run.stdout.fileno(), 65536).decode()
            if not chunk:
                break
            output += chunk
        returncode = run.wait(END_S)
        watchdogs = {pid for pid in job if is_watchdog(pid)}
        if not _wait_gone(job - watchdogs, deadline):
            return {"fault": fault, "error": f"processes left: {sorted(p for p in job if is_alive(p))}"}
        ended = time.time()
        _wait_gone(watchdogs, deadline)  # a SIGKILLed run's watchdog is still cleaning up: let it finish
        if fault == "exception":
            found = re.search(r"FAULT ([0-9.]+)", output)
            fault_at = float(found.group(1)) if found else fault_at
        return {"fault": fault, "seconds": ended - fault_at, "returncode": returncode}
    finally:
        for pid in [run.pid, *job]:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        run.wait()
        run.stdout.close()


def _inject(fault: str, run: subprocess.Popen[bytes], pids: list[int], started: float, timeout: float) -> float:
    now = time.time()
    if fault == "rank-sigkill":
        os.kill(pids[-1], signal.SIGKILL)
    elif fault.startswith("run-"):
        os.kill(run.pid, getattr(signal, fault[len("run-") :].upper()))
    elif fault == "timeout":
        return _launcher_started(run.pid, default=started) + timeout
    return now


def _launcher_started(run_pid: int, *, default: float) -> float:
    """When ``mailrail run`` started its launcher (the moment its ``--timeout`` clock starts), as ``time.time()``.

    The launcher is its first child but the watchdog: the ranks' output forwarders
    (:mod:`mailrail_tools.jobs.rank_runner`) re-parent to it too, later.
    """
    ticks = os.sysconf("SC_CLK_TCK")
    starts = []
    for child in children_of(run_pid):
        try:
            with open(f"/proc/{child}/cmdline", "rb") as source:
                if b"mailrail_tools.jobs.control" in source.read():
                    continue  # the watchdog
            with open(f"/proc/{child}/stat") as source:
                starts.append(int(source.read().rsplit(")", 1)[1].split()[19]))
        except OSError:
            continue
    if not starts:
        return default
    since_boot = time.clock_gettime(time.CLOCK_BOOTTIME)
    return time.time() - (since_boot - min(starts) / ticks)


def error_row(fault: str, error: str) -> str:
    """The row of a fault whose trial failed: *error* in the exit column, wrapped under it to fit the
    tables' width.  Rows are printed as each fault's trials end, seconds apart, so not by format_table."""
    row = f"{fault:<14} {'-':>9} {'-':>8}  {error}"
    return textwrap.fill(row, TABLE_WIDTH, subsequent_indent=" " * 35, break_long_words=False)


def run(args: argparse.Namespace) -> int:
    unknown = [name for name in args.faults if name not in FAULTS]
    if unknown or not args.faults:
        print(f"mailrail bench faults: error: --faults: each must be one of {','.join(FAULTS)}", file=sys.stderr)
        return 2
    results: dict[str, Any] = {"ranks": args.ranks, "trials": args.trials, "python": sys.executable, "faults": {}}
    print(f"{'fault':<14} {'median s':>9} {'max s':>8}  exit  (time from the fault to the job's end)")
    failed = False
    for fault in args.faults:
        trials = [trial(fault, args.ranks, args.timeout) for _ in range(args.trials)]
        errors = [t["error"] for t in trials if "error" in t]
        seconds = [t["seconds"] for t in trials if "seconds" in t]
        codes = sorted({t["returncode"] for t in trials if "returncode" in t})
        results["faults"][fault] = {"seconds": seconds, "returncodes": codes, "errors": errors}
        if errors:
            failed = True
            print(error_row(fault, errors[0]))
        else:
            codes_text = ",".join(map(str, codes))
            print(f"{fault:<14} {statistics.median(seconds):>9.3f} {max(seconds):>8.3f}  {codes_text}")
    if args.json:
        with open(args.json, "w") as out:
            json.dump(results, out, indent=2)
    return 1 if failed else 0
