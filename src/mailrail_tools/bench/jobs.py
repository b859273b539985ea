"""Launch the adversarial benchmark as its own mpiexec job, bounded by a time limit (compare, sweep).

Each run is a separate job, so a mode that hangs, crashes or runs out of
memory costs only its own run: it comes back as a ``status`` of ``"timeout"``
or ``"failed"`` that the caller reports, next to the runs that worked.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, NoReturn

from mailrail.config import Config
from mailrail.errors import ConfigError
from mailrail.flow.modes import flow_mode

from ..flags import rail_flags
from ..jobs.job import Here, InAllocation, Job, OnCluster, Where, run_job
from .adversarial import add_arguments

if TYPE_CHECKING:
    from ..cluster import ClusterJob, VirtualCluster

#: Seconds each run may take, mpiexec start-up included, unless the caller says otherwise.
DEFAULT_TIME_LIMIT = 120.0


class _Refused(Exception):
    pass


def adversarial_args_problem(args: Sequence[str]) -> str | None:
    """Why ``bench adversarial ARGS`` would refuse its flags (the line argparse would print), or None.

    For a driver to check every run's command line once, before it builds a cluster or touches a
    result file, instead of learning it from each run's exit status 2.  Checks against the rank
    count (``--victims``) and memory still happen in the run itself.
    """
    parser = argparse.ArgumentParser(prog="mailrail bench adversarial")
    add_arguments(parser)

    def refuse(message: str) -> NoReturn:
        raise _Refused(message)

    parser.error = refuse  # type: ignore[method-assign]
    try:
        parser.parse_args([*args, "--json", os.devnull])
    except _Refused as refused:
        return f"argument error in bench adversarial {' '.join(args)}: {refused}"
    return None


def adversarial_args(
    *,
    victims: int,
    trials: int,
    seed: int,
    messages: int | None,
    bytes_per_rank: int | None,
    knobs: Mapping[str, Any],
    receive_work_us: float = 0.0,
    partners: int = 0,
    extra: Sequence[str] = (),
) -> list[str]:
    """The ``bench adversarial`` command line of one run (*bytes_per_rank*, when given, wins over *messages*)."""
    amount = ["--bytes-per-rank", str(bytes_per_rank)] if bytes_per_rank is not None else ["--messages", str(messages)]
    work = ["--receive-work-us", f"{receive_work_us:g}"] if receive_work_us else []
    work += ["--partners", str(partners)] if partners else []
    return [
        "--victims",
        str(victims),
        "--trials",
        str(trials),
        "--seed",
        str(seed),
        "--quiet",
        *extra,
        *amount,
        *work,
        *rail_flags(knobs),
    ]


def adversarial_program(args: Sequence[str]) -> list[str]:
    # python -m mpi4py: an exception on one rank aborts the whole job instead of hanging it;
    # the module is launched directly, so the run does not depend on the rest of the CLI.
    return [sys.executable, "-m", "mpi4py", "-m", "mailrail_tools.bench.adversarial", *args]


def run_adversarial(
    ranks: int,
    args: Sequence[str],
    json_path: str,
    *,
    time_limit: float = DEFAULT_TIME_LIMIT,
    capture: bool = True,
    cluster: VirtualCluster | None = None,
    nodes: int | None = None,
    launcher: str = "mpiexec",
) -> dict[str, Any]:
    """Run ``bench adversarial ARGS --json JSON_PATH`` on *ranks* ranks, here or on *cluster* (started by
    *launcher*: ``mpiexec``, or ``srun`` on a cluster running Slurm; without a cluster, ``srun`` on *nodes*
    nodes of the Slurm allocation this runs in).

    Returns the benchmark's JSON document with ``status="ok"`` and ``wall_s``
    added, or ``{"status": "timeout" | "failed" | "out_of_memory", ...}`` saying
    what went wrong.  With *capture* False the job's standard output goes straight
    to the terminal (live progress); the tail of a failed job's output is kept either way.
    On a cluster (its first *nodes* nodes, default all) the result also holds
    ``network_bytes`` and ``cluster_nodes`` (per node: memory peak, cap, OOM kills).
    """
    if os.path.exists(json_path):
        os.remove(json_path)  # never mistake an older run's document for this one's
    program = adversarial_program([*args, "--json", json_path])
    outcome: dict[str, Any] = {"ranks": ranks}
    where: Where
    if cluster is not None:
        where = OnCluster(cluster, launcher, nodes)
    else:  # (in a Slurm allocation, on its first nodes: all ranks on one without --nodes)
        where = InAllocation(nodes or 1) if launcher == "srun" else Here()
    job = run_job(Job(ranks, program, where, timeout=time_limit, capture=capture, capture_stderr=True))
    returncode, timed_out, stdout, stderr, wall = job.returncode, job.timed_out, job.stdout, job.stderr, job.wall_s
    if cluster is not None:
        job = _on_cluster(job)
        outcome.update(network_bytes=job.network_bytes, cluster_nodes=job.nodes)
        if job.out_of_memory:
            return {
                **outcome,
                "status": "out_of_memory",
                "returncode": returncode,
                "wall_s": wall,
                "oom_nodes": [n["node"] for n in job.nodes if n["oom_kills"]],
                "output_tail": _tail(stdout, stderr),
            }
    if timed_out:
        return {
            **outcome,
            "status": "timeout",
            "time_limit_s": time_limit,
            "wall_s": wall,
            "output_tail": _tail(stdout, stderr),
        }
    if returncode != 0 or not os.path.exists(json_path):
        return {
            **outcome,
            "status": "failed",
            "returncode": returncode,
            "wall_s": wall,
            "output_tail": _tail(stdout, stderr),
        }
    with open(json_path) as source:
        document = json.load(source)
    document.update(outcome, status="ok", wall_s=wall)
    return document


def _on_cluster(job: object) -> ClusterJob:
    """*job* as what a virtual cluster's run returns (the cluster imported here: the ranks import this module)."""
    from ..cluster import ClusterJob

    assert isinstance(job, ClusterJob)
    return job


def refusal(mode: str, ranks: int, nodes: int, options: Mapping[str, Any]) -> dict[str, Any] | None:
    """The result of a run whose credit budget MailRail refuses (fewer receive slots than the senders its
    mode divides them by: ``status`` ``"refused"`` and the reason), without launching it; None if it runs."""
    config = Config.from_env(warn=False, **dict(options, flow_control=mode))  # compare warned once
    try:
        flow_mode(mode).budget(
            recv_slots=config.recv_pool_slots,
            ranks=ranks,
            nodes=nodes,
            credit_threshold=config.credit_threshold,
            credits_per_pair=config.credits_per_pair,
        )
    except ConfigError as error:
        return {"status": "refused", "reason": str(error), "wall_s": 0.0}
    return None


def all_finished(statuses: Iterable[str], capped: bool) -> bool:
    """Every run ended as a run may: ``ok``, ``refused`` (its credit budget does not fit the job: it says
    why), or ``out_of_memory`` where a memory cap was set on purpose."""
    expected = {"ok", "refused", "out_of_memory"} if capped else {"ok", "refused"}
    return all(status in expected for status in statuses)


def status_text(result: dict[str, Any]) -> str:
    """``ok``, ``timed out (> 120 s)``, ``failed (exit 1)``, ``refused (too few receive slots)`` or
    ``out of memory (node 1, cap 384 MiB)``."""
    if result["status"] == "timeout":
        return f"timed out (> {result['time_limit_s']:g} s)"
    if result["status"] == "failed":
        return f"failed (exit {result['returncode']})"
    if result["status"] == "refused":
        return "refused (too few receive slots)"
    if result["status"] == "out_of_memory":
        nodes = [n for n in result.get("cluster_nodes", []) if n["node"] in result["oom_nodes"]]
        caps = ", ".join(
            f"node {n['node']}, cap {n['limit_bytes'] / 2**20:,.0f} MiB" if n["limit_bytes"] else f"node {n['node']}"
            for n in nodes
        )
        return f"out of memory ({caps})"
    return "ok"


def _tail(stdout: str | bytes | None, stderr: str | bytes | None, limit: int = 2000) -> str:
    text = "".join(
        part.decode(errors="replace") if isinstance(part, bytes) else part for part in (stdout, stderr) if part
    )
    return text[-limit:]
