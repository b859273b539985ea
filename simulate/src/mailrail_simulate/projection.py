"""Projections: the adversarial incast at the job sizes asked, one point per (ranks, victims) and mode.

A point is the model's trial (:func:`.model.simulate`) with each rank's bytes scaled down to a message budget
and to a time limit, then scaled back to the bytes asked; or the fluid approximation (:func:`.fluid.fluid`)
at the whole bytes.  ``mailrail simulate adversarial`` and ``mailrail simulate paper`` print and write the
points (:mod:`.command`).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from mailrail.flow.modes import flow_mode
from mailrail_tools.incast import rail_default

if TYPE_CHECKING:  # (the model is imported when a point is computed: the commands' flags need none of it)
    from .model import Workload
    from .params import ModelParams

#: Messages one point models at most (all ranks together) unless told otherwise.
DEFAULT_MAX_MESSAGES = 1_000_000
#: Seconds one point may take unless told otherwise: within the 10 minutes asked of each.
DEFAULT_POINT_TIME_LIMIT = 480.0
#: A point's pilot models this fraction of its messages, and the point then takes at most this share of its
#: time limit by the pilot's cost per message (it grows a little with the messages in flight).
PILOT_FRACTION = 20
PILOT_MARGIN = 0.6
#: How a point is computed: the discrete-event model, scaled to the message budget; or its fluid
#: approximation at the whole bytes.
METHODS = ("simulate", "fluid")


def recv_slots_for(
    mode: str, ranks: int, ranks_per_node: int, *, recv_slots: int | None = None, credits_per_pair: int | None = None
) -> int:
    """A rank's receive slots in *mode*: *recv_slots* if given; else, with *credits_per_pair*, the slots that
    back a credit per pair for every sender the mode counts; else MailRail's default."""
    if recv_slots is not None:
        return int(recv_slots)
    slots = int(rail_default("recv_pool_slots"))
    if credits_per_pair is None:
        return slots
    senders = flow_mode(mode).senders(ranks, -(-ranks // ranks_per_node))
    return slots if senders is None else credits_per_pair * senders  # a credit per pair for every sender


def project(
    params: ModelParams,
    sizes: list[tuple[int, int]],
    modes: list[str],
    bytes_per_rank: int,
    *,
    ranks_per_node: int,
    datagram_size: int = rail_default("datagram_size"),
    credits_per_pair: int | None = None,
    recv_slots: int | None = None,
    send_slots: int = rail_default("send_pool_slots"),
    credit_threshold: int = rail_default("credit_threshold"),
    partners: int = 0,
    seed: int = 1,
    link_rate_bps: float | None = None,
    max_messages: int = DEFAULT_MAX_MESSAGES,
    point_time_limit_s: float = DEFAULT_POINT_TIME_LIMIT,
    method: str = "simulate",
    label: str = "",
    progress: Callable[[str], None] = lambda line: None,
) -> list[dict[str, Any]]:
    """One point per (ranks, victims) of *sizes* and mode of *modes*, each rank sending *bytes_per_rank*.

    With *method* ``"simulate"``, the model's trial with each rank's messages cut to *max_messages* over the
    ranks, and further to what *point_time_limit_s* allows (0: no limit) by a pilot run's cost per message;
    the point says so (``scaled``) and gives its runtime, credit messages, victim memory and outcome scaled
    back to the bytes asked.  With ``"fluid"``, the fluid approximation at the whole bytes.  The workload
    knobs are :class:`.model.Workload`'s (``recv_slots``: :func:`recv_slots_for`; ``link_rate_bps``: bits
    per second of every link, else the parameters'); *label* names the points in the lines *progress* gets.
    Raises :class:`.params.ParamsError` for what the fluid view does not cover.
    """
    from .fluid import fluid
    from .model import Workload, simulate

    if method not in METHODS:
        raise ValueError(f"method={method!r}: one of {', '.join(METHODS)}")
    whole = method == "fluid"
    points = []
    total = len(sizes) * len(modes)
    for index, ((ranks, victims), mode) in enumerate(((s, m) for s in sizes for m in modes), 1):
        messages = max(1, -(-bytes_per_rank // datagram_size))
        budget = messages if whole else max(1, max_messages // ranks)
        modelled = min(messages, budget)
        workload = Workload(
            ranks=ranks,
            ranks_per_node=min(ranks_per_node, ranks),
            victims=victims,
            messages_per_rank=modelled,
            mode=mode,
            datagram_size=datagram_size,
            recv_slots=recv_slots_for(
                mode, ranks, ranks_per_node, recv_slots=recv_slots, credits_per_pair=credits_per_pair
            ),
            send_slots=send_slots,
            credit_threshold=credit_threshold,
            credits_per_pair=credits_per_pair,
            partners=partners,
            seed=seed,
            link_Bps=link_rate_bps / 8 if link_rate_bps else None,
        )
        prefix = f"[{index}/{total}]{label} {ranks} ranks, {victims} victim(s), {mode}"
        started = time.monotonic()
        if point_time_limit_s and modelled >= 2 * PILOT_FRACTION and not whole:
            # A pilot with a twentieth of the messages tells what one costs here in this mode at this size
            # (it differs by mode and size): fit the point in time.
            pilot = dataclasses.replace(workload, messages_per_rank=max(1, modelled // PILOT_FRACTION))
            pilot_started = time.monotonic()
            simulate(pilot, params)
            per_message = (time.monotonic() - pilot_started) / (pilot.messages_per_rank * ranks)
            affordable = int(point_time_limit_s * PILOT_MARGIN / per_message / ranks)
            if affordable < modelled:
                modelled = max(1, affordable)
                workload = dataclasses.replace(workload, messages_per_rank=modelled)
        progress(
            f"{prefix}: {modelled} messages per rank" + (f" (of {messages}: scaled)" if modelled < messages else "")
        )
        if whole:
            result: Any = fluid(workload, params)
        else:
            result = simulate(workload, params, progress=_prefixed(progress, prefix))
        wall = time.monotonic() - started
        scale = messages / modelled
        point = {
            "ranks": ranks,
            "mode": mode,
            "runtime_s": result.runtime_s,
            "goodput_bps": result.goodput_bps,
            "victim_peak_bytes": result.victim_peak_bytes,
            "credit_messages": result.credit_messages,
            "wall_s": wall,
            "method": method,
            "status": result.status,
            "nodes": workload.nodes,
            "victims": victims,
            "incast_ratio": (ranks - victims) / victims,
            "recv_slots": workload.recv_slots,
            "bytes_per_rank": modelled * datagram_size,
            "bytes_per_rank_asked": bytes_per_rank,
            "scaled": modelled < messages,
            # Linear in the bytes: what the credit modes do once past their start; for none a lower bound,
            # its matching cost growing with its queue.
            "runtime_s_at_bytes_asked": result.runtime_s * scale,
            "credit_messages_at_bytes_asked": int(result.credit_messages * scale),
            # MPI's unexpected queue grows with the bytes; the pools and credit state do not.
            "victim_peak_bytes_at_bytes_asked": int(
                result.victim_peak_bytes + result.victim_unexpected_peak_bytes * (scale - 1)
            ),
            "victim_unexpected_peak_bytes": result.victim_unexpected_peak_bytes,
            "victim_node_peak_bytes": result.victim_node_peak_bytes,
            # its unexpected messages grow with the bytes: past the node's memory, the whole run would have died
            "status_at_bytes_asked": status_at_bytes_asked(result, params, workload, scale),
            "victim_messages": result.victim_messages,  # modelled messages received per victim: min, median, max
            "messages": result.messages,
            "wire_bytes": result.wire_bytes,
            "events": result.events,
            "detail": result.detail,
            # loss and recovery (parameter sets that bound a receive context): packets lost, sent again, timers
            "dropped_packets": result.dropped_packets,
            "retransmitted_packets": result.retransmitted_packets,
            "retransmitted_fraction": result.retransmitted_packets / max(result.messages, 1),
            "timeouts": result.timeouts,
        }
        points.append(point)
        progress(
            f"{prefix}: {result.status}, {result.runtime_s:.4g} s simulated, {result.goodput_bps / 1e9:.3g} Gb/s, "
            f"victim {result.victim_peak_bytes / (1 << 20):.1f} MiB, {result.credit_messages} credit messages "
            f"({wall:.1f} s)"
        )
    return points


def _prefixed(progress: Callable[[str], None], prefix: str) -> Callable[[str], None]:
    """*progress*, each line led by *prefix* (the point's)."""
    return lambda line: progress(f"{prefix}: {line}")


def status_at_bytes_asked(result: Any, params: ModelParams, workload: Workload, scale: float) -> str:
    """A scaled point's outcome at the bytes asked: out of memory if its victim node's unexpected messages,
    grown linearly with the bytes (*scale*: asked over modelled), pass the node's memory."""
    cap = workload.victim_node_memory or params.node_memory_bytes
    baselines = min(workload.ranks_per_node, workload.ranks) * params.rank_baseline_bytes
    if result.status == "ok" and cap and baselines + (result.victim_node_peak_bytes - baselines) * scale > cap:
        return "out_of_memory"
    return str(result.status)
