"""Measured runs as the model's cases: ``compare.json`` and ``sweep.json`` read into workloads and figures.

A :class:`Case` is one mode of one run: the :class:`~.model.Workload` that reproduces it and what was
measured (mean goodput of its trials, the victim's RSS growth, its outcome).
"""

from __future__ import annotations

import dataclasses
import glob
import json
import os
from typing import Any

from mailrail_tools.cluster.spec import MTU, tbf_burst_bytes
from mailrail_tools.incast import rail_default

from .model import Workload
from .params import ParamsError


@dataclasses.dataclass(frozen=True)
class Case:
    name: str  # where it came from: "<file>:<mode>" or "<file>:<point>"
    workload: Workload
    status: str  # measured outcome: "ok", "out_of_memory", ...
    goodput_bps: float | None
    victim_growth_bytes: int | None
    victim_peak_bytes: int | None  # the victim's peak RSS
    credit_messages: int | None
    # TCP segments sent again over all segments sent, summed over the virtual cluster's nodes (None: not counted)
    retransmitted_per_packet: float | None = None

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "workload": dataclasses.asdict(self.workload),
            "status": self.status,
            "goodput_bps": self.goodput_bps,
            "victim_growth_bytes": self.victim_growth_bytes,
            "victim_peak_bytes": self.victim_peak_bytes,
            "credit_messages": self.credit_messages,
            "retransmitted_per_packet": self.retransmitted_per_packet,
        }


def read_runs(paths: list[str]) -> list[Case]:
    """Every case in *paths*: ``compare.json`` / ``sweep.json`` files, or directories searched for them."""
    files: list[str] = []
    for path in paths:
        if os.path.isdir(path):
            found = sorted(
                glob.glob(os.path.join(path, "**", "compare.json"), recursive=True)
                + glob.glob(os.path.join(path, "**", "sweep.json"), recursive=True)
            )
            if not found:
                raise ParamsError(f"{path}: no compare.json or sweep.json in it")
            files += found
        elif os.path.isfile(path):
            files.append(path)
        else:
            raise ParamsError(f"{path}: no such file or directory")
    cases: list[Case] = []
    for file in files:
        cases += read_file(file)
    return cases


def read_file(path: str) -> list[Case]:
    try:
        with open(path) as source:
            document = json.load(source)
    except json.JSONDecodeError as error:
        raise ParamsError(f"{path} is not JSON: {error}") from None
    kind = document.get("benchmark") if isinstance(document, dict) else None
    try:
        if kind == "compare":
            return _compare_cases(path, document)
        if kind == "sweep":
            return _sweep_cases(path, document)
    except (KeyError, TypeError, ValueError) as error:
        raise ParamsError(f"{path}: a {kind} document without what the model needs ({error!r})") from None
    raise ParamsError(f"{path}: not a compare or sweep result (its 'benchmark' is {kind!r})")


def _link(cluster: dict[str, Any] | None) -> float | None:
    rate = ((cluster or {}).get("link") or {}).get("rate_bps")
    return rate / 8 if rate else None


def _queue_bytes(cluster: dict[str, Any] | None) -> int | None:
    """The bytes a run's link queue takes before it drops (a queue of packets counted as full-sized ones).
    On a shaped link the token bucket's burst passes at once what arrives at an idle link: the model's
    fifo takes it as room too (right for bursts after idle, which incast is made of; generous under a
    steady overload, where the bucket is empty)."""
    link = (cluster or {}).get("link") or {}
    queue = link.get("queue")
    if not queue:
        return None
    limit = int(queue["limit"]) * (MTU if queue["unit"] == "packets" else 1)
    return limit + (tbf_burst_bytes(int(link["rate_bps"])) if link.get("rate_bps") else 0)


def _retransmitted_per_packet(result: dict[str, Any]) -> float | None:
    """TCP segments sent again per segment sent, over every node of the run's cluster."""
    nodes = result.get("cluster_nodes") or []
    sent = sum(node.get("tcp_out_segs") or 0 for node in nodes)
    again = sum(node.get("tcp_retrans_segs") or 0 for node in nodes)
    return again / sent if sent else None


def _case(
    name: str, mode: str, result: dict[str, Any], shape: dict[str, Any], cluster: dict[str, Any] | None, cap: Any
) -> Case:
    options = dict(shape.get("rail_options") or {})
    config = result.get("config") or {}
    ranks, nodes = int(shape["ranks"]), int(shape["nodes"])
    workload = Workload(
        ranks=ranks,
        ranks_per_node=-(-ranks // nodes),
        victims=int(shape["victims"]),
        messages_per_rank=int(shape["messages_per_rank"]),
        mode=mode,
        datagram_size=int(config.get("datagram_size", options.get("datagram_size", rail_default("datagram_size")))),
        recv_slots=int(config.get("recv_pool_slots", options.get("recv_pool_slots", rail_default("recv_pool_slots")))),
        send_slots=int(config.get("send_pool_slots", options.get("send_pool_slots", rail_default("send_pool_slots")))),
        credit_threshold=int(
            config.get("credit_threshold", options.get("credit_threshold", rail_default("credit_threshold")))
        ),
        credits_per_pair=config.get("credits_per_pair", options.get("credits_per_pair")),
        piggyback=bool(config.get("piggyback", options.get("piggyback", rail_default("piggyback")))),
        partners=int(shape.get("partners") or 0),
        seed=int(shape.get("seed", 1)),
        receive_work_s=float(shape.get("receive_work_us") or 0.0) * 1e-6,
        link_Bps=_link(cluster),
        victim_node_memory=int(cap) if cap else None,
        link_queue_bytes=_queue_bytes(cluster),
        # the mode's time limit covers its start and every trial: a trial's share of it
        time_limit_s=float(shape["time_limit_s"]) / int(shape.get("trials") or 1)
        if shape.get("time_limit_s")
        else None,
    )
    summary = result.get("summary") or {}
    ok = result.get("status") == "ok"
    return Case(
        name=name,
        workload=workload,
        status=str(result.get("status")),
        goodput_bps=float(summary["goodput_bps_mean"]) if ok else None,
        victim_growth_bytes=int(summary["victim_rss_growth_bytes"]) if ok else None,
        victim_peak_bytes=int(summary["peak_victim_rss_bytes"]) if ok else None,
        credit_messages=int(summary["credit_messages"]) if ok else None,
        retransmitted_per_packet=_retransmitted_per_packet(result),
    )


def _compare_cases(path: str, document: dict[str, Any]) -> list[Case]:
    load, cluster = document["workload"], document.get("cluster")
    cap = (cluster or {}).get("victim_node_memory")
    return [
        _case(f"{_short(path)}:{mode}", mode, result, load, cluster, cap)
        for mode, result in document["modes"].items()
        if result.get("status") != "refused"
    ]


def _sweep_cases(path: str, document: dict[str, Any]) -> list[Case]:
    load, cluster = document["workload"], document.get("cluster")
    cases = []
    for study, points in document["studies"].items():
        for point in points:
            if point["status"] == "refused":
                continue
            result = point["result"]
            shape = {
                **load,
                "ranks": point["ranks"],
                "nodes": point.get("nodes") or result.get("nodes"),
                "victims": point["victims"],
                "messages_per_rank": result.get("messages_per_rank", load.get("messages_per_rank")),
            }
            name = f"{_short(path)}:{study}-r{point['ranks']}-v{point['victims']}-{point['mode']}"
            cases.append(_case(name, point["mode"], result, shape, cluster, None))
    return cases


def _short(path: str) -> str:
    """A file's name as cases show it: its directory and name."""
    return os.path.join(os.path.basename(os.path.dirname(os.path.abspath(path))), os.path.basename(path))


def keep(scratch: str, into: str) -> list[str]:
    """Copy the ``compare.json`` / ``sweep.json`` files under *scratch* into *into* (same relative
    directories), without what the model does not read (per-rank details, output tails): what the
    package ships as its recorded runs."""
    kept = []
    for source in sorted(
        glob.glob(os.path.join(scratch, "**", "compare.json"), recursive=True)
        + glob.glob(os.path.join(scratch, "**", "sweep.json"), recursive=True)
    ):
        with open(source) as stream:
            document = json.load(stream)
        results = list(document.get("modes", {}).values()) + [
            point["result"] for points in document.get("studies", {}).values() for point in points
        ]
        for result in results:
            for bulky in ("ranks_detail", "output_tail", "cluster_nodes_samples"):
                result.pop(bulky, None)
        target = os.path.join(into, os.path.relpath(source, scratch))
        os.makedirs(os.path.dirname(target), exist_ok=True)
        with open(target, "w") as stream:
            json.dump(document, stream, indent=1)
            stream.write("\n")
        kept.append(target)
    return kept


if __name__ == "__main__":  # python -m mailrail_simulate.runs --keep SCRATCH INTO (make simulate-runs)
    import sys

    if len(sys.argv) != 4 or sys.argv[1] != "--keep":
        sys.exit("usage: python -m mailrail_simulate.runs --keep SCRATCH_DIR INTO_DIR")
    for path in keep(sys.argv[2], sys.argv[3]):
        print(f"kept {path}")
