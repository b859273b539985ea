"""Fitting the model to measured runs, and predicting runs with it.

The fit has three stages, each fitting what the measurements can tell apart:

1. **CPU per message** (``send_cpu_s``, ``recv_cpu_s``, ``credit_cpu_s``, and on shared cores the
   ``idle_share`` of a core an idle rank still takes) from the goodput of the
   credit modes' runs, where no message waits in MPI (credits bound them by the posted receives):
   Nelder-Mead on their logarithms, minimizing the squared log-ratio of modelled to measured goodput.
2. **Matching cost** (``match_per_entry_s``) from the unconstrained runs' goodput, the one mode where
   messages wait in MPI's unexpected queue: a bounded search on its logarithm.
3. **Memory**: ``rank_baseline_bytes`` is the median resident memory of a victim before its first
   message (peak minus growth), ``unexpected_overhead_bytes`` what MPI held per unexpected message
   beyond its payload (the unconstrained runs' growth over the modelled peak count of waiting messages).

Runs are modelled with fewer messages per rank while fitting (goodput is a rate; memory growth is
scaled back by the message ratio); predictions use the run's own size up to a message budget.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from collections.abc import Callable
from typing import Any

from scipy import optimize

from mailrail.flow.modes import flow_mode

from .model import Result, Workload, simulate
from .params import ModelParams
from .runs import Case

CPU_FIELDS = ("send_cpu_s", "recv_cpu_s", "credit_cpu_s")
#: What the virtual cluster is, before fitting: TCP over veth pairs and a bridge at the host's speed (where each
#: value comes from: docs/simulate.md, "Calibration").
VIRTUAL_CLUSTER = {
    "link_Bps": 2.5e9,  # veth at the host's speed: faster than the ranks can fill
    "link_latency_s": 30e-6,  # half a TCP round trip over veth and a bridge
    "switch_queue_bytes": 1000 * 1514,  # the bridge's port: a 1000-packet queue
    "header_bytes": 66 + 32,  # Ethernet, IP and TCP headers, and Open MPI's match header
    "eager_limit_bytes": 65536,  # Open MPI's TCP BTL
    "shm_Bps": 4e9,
    "shm_latency_s": 1e-6,
    "send_cpu_s": 10e-6,
    "recv_cpu_s": 10e-6,
    "credit_cpu_s": 5e-6,
    # each node's ranks are one scheduler group (its prted starts a session; autogroup, on by default, groups
    # a session): the cores go evenly to the nodes, then to their ranks (measured: docs/simulate.md)
    "cores_by_node": 1,
}
#: Where the fit of ``idle_share`` starts (on shared cores): an idle rank polls, then yields.
IDLE_SHARE_START = 0.3
#: The smallest growth (bytes) taken as MPI buffering, not RSS noise, when fitting memory.
MEMORY_SIGNAL_BYTES = 16 << 20


@dataclasses.dataclass
class Prediction:
    case: Case
    result: Result
    scale: float  # measured messages per rank / modelled
    goodput_bps: float
    victim_bytes: int  # the victim's resident memory: its baseline and its peak of unexpected messages
    status: str


def scaled(workload: Workload, max_messages: int | None) -> tuple[Workload, float]:
    """*workload* with fewer messages per rank so that all ranks together send at most *max_messages*."""
    total = workload.messages_per_rank * workload.ranks
    if max_messages is None or total <= max_messages:
        return workload, 1.0
    per_rank = max(1, max_messages // workload.ranks)
    scale = workload.messages_per_rank / per_rank
    limit = workload.time_limit_s / scale if workload.time_limit_s else None  # the time a scaled trial may take
    return dataclasses.replace(workload, messages_per_rank=per_rank, time_limit_s=limit), scale


def virtual_cluster(host_cores: int) -> ModelParams:
    """Where :func:`fit` starts on the virtual cluster: :data:`VIRTUAL_CLUSTER`, its ranks sharing *host_cores*."""
    return ModelParams(**{**VIRTUAL_CLUSTER, "host_cores": host_cores})


def predict(case: Case, params: ModelParams, *, max_messages: int | None = None) -> Prediction:
    workload, scale = scaled(case.workload, max_messages)
    result = simulate(workload, params)
    growth = int(result.victim_unexpected_peak_bytes * scale)
    return Prediction(case, result, scale, result.goodput_bps, params.rank_baseline_bytes + growth, result.status)


def _log_error(modelled: float, measured: float) -> float:
    return math.log(max(modelled, 1.0) / max(measured, 1.0)) ** 2


def fit(
    cases: list[Case],
    base: ModelParams,
    *,
    fit_messages: int = 8000,
    max_evaluations: int = 60,
    progress: Callable[[str], None] = lambda line: None,
) -> tuple[ModelParams, dict[str, Any]]:
    """Parameters fitted to *cases* (measured, status ``ok``), starting from *base*; and how the fit went."""
    usable = [c for c in cases if c.status == "ok" and c.goodput_bps]
    credit = [c for c in usable if flow_mode(c.workload.mode).has_credits]
    unconstrained = [c for c in usable if not flow_mode(c.workload.mode).has_credits]
    if not credit:
        raise ValueError("calibration needs at least one run of a credit mode that finished (status ok)")
    report: dict[str, Any] = {"cases": [c.name for c in usable], "fit_messages": fit_messages}
    evaluations = 0

    def goodput_error(params: ModelParams, group: list[Case]) -> float:
        nonlocal evaluations
        evaluations += 1
        total = sum(
            _log_error(predict(c, params, max_messages=fit_messages).goodput_bps, c.goodput_bps or 0) for c in group
        )
        return total / len(group)

    # 1. CPU per message, from the credit modes (and, on shared cores, what an idle rank takes).
    params = base.replace(match_per_entry_s=0.0)
    shared = base.host_cores is not None
    start = [math.log(getattr(params, name)) for name in CPU_FIELDS] + ([IDLE_SHARE_START] if shared else [])

    def cpu_params(x: Any) -> ModelParams:
        values: dict[str, Any] = {name: math.exp(v) for name, v in zip(CPU_FIELDS, x[:3], strict=True)}
        if shared:
            values["idle_share"] = min(max(float(x[3]), 0.0), 1.0)
        return params.replace(**values)

    def cpu_objective(x: Any) -> float:
        trial = cpu_params(x)
        error = goodput_error(trial, credit)
        times = ", ".join(f"{getattr(trial, name) * 1e6:.2f}" for name in CPU_FIELDS)
        progress(f"cpu fit {evaluations}: {times} us, idle share {trial.idle_share:.2f} -> {error:.4f}")
        return error

    start_error = goodput_error(params.replace(idle_share=IDLE_SHARE_START if shared else 0.0), credit)
    found = optimize.minimize(
        cpu_objective, start, method="Nelder-Mead", options={"maxfev": max_evaluations, "xatol": 0.02, "fatol": 1e-4}
    )
    start_params = cpu_params(start)
    params = cpu_params(found.x)
    report["cpu"] = {
        "rms_log_error": math.sqrt(min(found.fun, start_error)),
        "start_rms_log_error": math.sqrt(start_error),
        "evaluations": int(found.nfev),
    }
    if start_error < found.fun:  # (Nelder-Mead cut short by its budget can end worse than it began)
        params = start_params

    # 2. Matching cost per waiting message, from the unconstrained runs.
    if unconstrained:

        def match_objective(log10_cost: float) -> float:
            error = goodput_error(params.replace(match_per_entry_s=10.0**log10_cost), unconstrained)
            progress(f"matching fit: {10.0**log10_cost:.3g} s per waiting message -> {error:.4f}")
            return error

        without = goodput_error(params, unconstrained)
        best = optimize.minimize_scalar(
            match_objective, bounds=(-13.0, -6.0), method="bounded", options={"maxiter": 14, "xatol": 0.05}
        )
        if best.fun < without:
            params = params.replace(match_per_entry_s=10.0**best.x)
        report["matching"] = {"rms_log_error": math.sqrt(min(best.fun, without)), "without": math.sqrt(without)}

    # 3. Memory.
    starts = [c.victim_peak_bytes - c.victim_growth_bytes for c in usable if c.victim_peak_bytes is not None]
    if starts:
        params = params.replace(rank_baseline_bytes=int(statistics.median(starts)))
    overheads = []
    for case in unconstrained:
        if (case.victim_growth_bytes or 0) < MEMORY_SIGNAL_BYTES:
            continue
        prediction = predict(case, params.replace(unexpected_overhead_bytes=0), max_messages=fit_messages)
        waiting = prediction.result.victim_unexpected_peak_bytes * prediction.scale / case.workload.datagram_size
        if waiting >= 1:
            overheads.append(case.victim_growth_bytes / waiting - case.workload.datagram_size)
    if overheads:
        params = params.replace(unexpected_overhead_bytes=max(0, int(statistics.median(overheads))))
    report["memory"] = {"baselines": len(starts), "overhead_samples": [round(o) for o in overheads]}
    report["evaluations"] = evaluations
    return params, report


def relative_error(modelled: float | None, measured: float | None) -> float | None:
    if modelled is None or not measured:
        return None
    return modelled / measured - 1.0


#: The flow windows :func:`fit_window` tries (packets).
WINDOWS = (1, 2, 4, 8, 16, 32, 64)


def fit_window(
    cases: list[Case],
    params: ModelParams,
    *,
    windows: tuple[int, ...] = WINDOWS,
    progress: Callable[[str], None] = lambda line: None,
) -> tuple[int, dict[str, Any]]:
    """The flow window (``flow_window_packets``) under which *params* predicts *cases* best: first the most
    outcomes right (finished, timed out, out of memory), then the least mean squared log-ratio of goodput
    over the cases both finished; and each window's score."""
    scores = []
    for window in windows:
        trial = params.replace(flow_window_packets=window)
        agree, errors = 0, []
        for case in cases:
            predicted = predict(case, trial)
            agree += predicted.status == case.status
            if predicted.status == case.status == "ok":
                errors.append(_log_error(predicted.goodput_bps, case.goodput_bps or 0))
        score = {
            "window": window,
            "outcomes_agree": agree,
            "cases": len(cases),
            "rms_log_goodput_error": math.sqrt(statistics.fmean(errors)) if errors else None,
            "goodput_cases": len(errors),
        }
        scores.append(score)
        progress(
            f"window {window}: outcomes agree in {agree}/{len(cases)}, rms log goodput error "
            f"{score['rms_log_goodput_error'] if errors else 'n/a'} over {len(errors)}"
        )
    best = min(
        scores,
        key=lambda s: (
            -s["outcomes_agree"],
            math.inf if s["rms_log_goodput_error"] is None else s["rms_log_goodput_error"],
        ),
    )
    return int(best["window"]), {"cases": [case.name for case in cases], "windows": scores}
