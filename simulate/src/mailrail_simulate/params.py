"""The model's parameters: what one message costs where, and what the machine is.

A parameter set is a JSON file (``mailrail/simulate/data/*.json``): ``"params"`` holds the
numbers below, the rest (``"source"``, ``"date"``, ``"runs"``, ``"fit"``) says where they came from.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
from typing import Any

DATA_DIR = os.path.join(os.path.dirname(__file__), "data")
#: Fitted on this project's virtual cluster (``mailrail simulate calibrate``).
CALIBRATED = os.path.join(DATA_DIR, "calibrated.json")
#: An Omni-Path-like cluster, from public figures (its file names the sources).
OMNIPATH = os.path.join(DATA_DIR, "omnipath.json")


class ParamsError(ValueError):
    """A parameter file or value the model cannot use (the message names it)."""


@dataclasses.dataclass(frozen=True)
class ModelParams:
    # CPU time of one rank (seconds)
    send_cpu_s: float = 2e-6  # one payload send: MailRail's send path and MPI's
    recv_cpu_s: float = 2e-6  # one payload received, handed to the application and released
    # extra matching cost per message waiting in MPI's unexpected queue: none measured for MailRail's wildcard
    # receives, a scan of the queue for a receive by tag (data/matching, ``mailrail simulate measure-matching``;
    # the figures: docs/simulate.md)
    match_per_entry_s: float = 0.0
    credit_cpu_s: float = 1e-6  # one credit message, at either end (sent or received)
    # memory
    # MPI's memory per buffered unexpected message beyond its payload (measured: data/matching)
    unexpected_overhead_bytes: int = 0
    rank_baseline_bytes: int = 0  # a rank's resident memory before its first message, pools included
    node_memory_bytes: int = 0  # a node's memory: a victim's node past it ends the job (0: unbounded)
    # protocol
    eager_limit_bytes: int = 65536  # larger payloads go by rendezvous (request, clear-to-send, data)
    header_bytes: int = 64  # bytes on the wire per message beyond its payload
    # network: a link per node to one switch, the switch's output port per node with a bounded buffer
    link_Bps: float = 1.25e9  # bytes per second, each direction
    link_latency_s: float = 2e-6  # one way, end to end
    switch_queue_bytes: int = 1 << 20  # buffer of one output port (and, with drop_tail, of an uplink)
    # 0: a full port holds back the links that feed it (a lossless fabric); 1: a full port drops the packet and
    # a full uplink refuses its sender (tc's drop-tail queues: the virtual cluster's shallow links)
    drop_tail: int = 0
    shm_Bps: float = 5e9  # copies between ranks of one node
    shm_latency_s: float = 5e-7
    # loss and its recovery (PSM2 on Omni-Path, :mod:`.reliability`): the fabric is lossless, a rank's receive
    # context is not.  0 switches a bound off: TCP's receiving kernel takes what arrives (the calibrated and tcp sets).
    recv_context_entries: int = 0  # packets a receive context holds until its rank's progress takes them
    recv_context_bytes: int = 0  # eager payload bytes it holds
    ingest_cpu_s: float = 0.0  # the receiving rank's CPU to take one packet out of its receive context
    copy_Bps: float = 0.0  # its copy rate for the eager data it takes out, twice if unexpected; 0: in recv_cpu_s
    flow_window_packets: int = 0  # unacknowledged packets per flow (ordered pair of ranks); 0: no flows
    ack_interval_packets: int = 1  # a receiver acknowledges every this many packets it accepts
    retransmit_timeout_min_s: float = 0.0
    retransmit_timeout_max_s: float = 0.0
    retransmit_backoff: float = 1.0  # the timeout's factor after each expiry
    congestion_control: int = 0  # 1: a NAK shrinks the flow's window to one packet and holds it (PSM2's CCA)
    selective_recovery: int = 0  # 1: TCP's (SACK, fast retransmit of the packet missed, RTO); 0: PSM2's go-back-N
    # 1: a flow's window is TCP Reno's congestion window (RFC 5681), at most flow_window_packets; 0: fixed
    reno_window: int = 0
    # Reno's window starts at this many bytes and slow-starts up to flow_window_packets (0: starts there)
    initial_window_bytes: int = 0
    # TCP's tail-loss probe (RACK-TLP): due this long after a flow's latest transmission or ACK (0: none)
    loss_probe_s: float = 0.0
    # the machine: None, every rank has a core of its own; else all ranks share this many cores, and a rank
    # with nothing to do still takes this share of what a busy rank takes (it polls, then yields)
    host_cores: int | None = None
    idle_share: float = 0.0
    # 1: the host's cores go evenly to the nodes first, then to each node's ranks (a virtual cluster's node is
    # one scheduler group: its ranks share a session, and the kernel's autogroup makes a session one group)
    cores_by_node: int = 0

    def __post_init__(self) -> None:
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if field.name == "host_cores":
                if value is not None and (type(value) is not int or value < 1):
                    raise ParamsError(f"host_cores={value!r}: null (a core per rank) or an integer >= 1")
                continue
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                raise ParamsError(f"{field.name}={value!r}: a finite number")
            if field.name == "idle_share" and value > 1:
                raise ParamsError(f"idle_share={value!r}: a share of a core, 0..1")
            positive = field.name in ("link_Bps", "shm_Bps", "eager_limit_bytes")
            if value < 0 or (positive and value == 0):
                raise ParamsError(f"{field.name}={value!r}: must be {'> 0' if positive else '>= 0'}")
        if self.cores_by_node not in (0, 1):
            raise ParamsError(f"cores_by_node={self.cores_by_node!r}: 0 (shared by rank) or 1 (by node first)")
        self._check_loss()

    def _check_loss(self) -> None:
        for switch in ("congestion_control", "drop_tail", "selective_recovery", "reno_window"):
            if getattr(self, switch) not in (0, 1):
                raise ParamsError(f"{switch}={getattr(self, switch)!r}: 0 (off) or 1 (on)")
        if self.initial_window_bytes and not self.reno_window:
            raise ParamsError(
                f"initial_window_bytes={self.initial_window_bytes!r}: a congestion window's, so reno_window=1"
            )
        if self.loss_probe_s and not self.selective_recovery:
            raise ParamsError(f"loss_probe_s={self.loss_probe_s!r}: TCP's tail-loss probe, so selective_recovery=1")
        if self.ack_interval_packets < 1:
            raise ParamsError(f"ack_interval_packets={self.ack_interval_packets!r}: must be >= 1")
        if self.retransmit_backoff < 1:
            raise ParamsError(f"retransmit_backoff={self.retransmit_backoff!r}: must be >= 1")
        if self.retransmit_timeout_max_s < self.retransmit_timeout_min_s:
            raise ParamsError(
                f"retransmit_timeout_max_s={self.retransmit_timeout_max_s!r}: must be >= retransmit_timeout_min_s "
                f"({self.retransmit_timeout_min_s!r})"
            )
        lossy = self.recv_context_entries > 0 or self.recv_context_bytes > 0
        if (lossy or self.drop_tail) and (self.flow_window_packets == 0 or self.retransmit_timeout_min_s == 0):
            what = (
                f"recv_context_entries={self.recv_context_entries!r}, recv_context_bytes={self.recv_context_bytes!r}: "
                "a bounded receive context"
                if lossy
                else "drop_tail=1: a drop-tail queue"
            )
            raise ParamsError(
                f"{what} loses packets, so flow_window_packets and retransmit_timeout_min_s must be > 0 to recover them"
            )

    @property
    def flows(self) -> bool:
        """Whether messages between nodes travel numbered flows (:mod:`.reliability`)."""
        return self.flow_window_packets > 0

    def replace(self, **changes: Any) -> ModelParams:
        return dataclasses.replace(self, **changes)

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def params_from_dict(values: dict[str, Any], where: str) -> ModelParams:
    if not isinstance(values, dict):
        raise ParamsError(f"{where}: 'params' must be an object, got {type(values).__name__}")
    known = {field.name for field in dataclasses.fields(ModelParams)}
    unknown = sorted(set(values) - known)
    if unknown:
        raise ParamsError(f"{where}: unknown parameter(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}")
    try:
        return ModelParams(**values)
    except ParamsError as error:
        raise ParamsError(f"{where}: {error}") from None


def load_params(path: str) -> tuple[ModelParams, dict[str, Any]]:
    """The parameters in *path* and the whole document (its provenance)."""
    try:
        with open(path) as source:
            document = json.load(source)
    except OSError as error:
        raise ParamsError(f"cannot read the parameter file {path}: {error.strerror}") from None
    except json.JSONDecodeError as error:
        raise ParamsError(f"{path} is not JSON: {error}") from None
    if not isinstance(document, dict) or not isinstance(document.get("params"), dict):
        raise ParamsError(f"{path}: a parameter file is an object with a 'params' object")
    values = document["params"]
    inherit = document.get("inherit")
    if inherit is not None:  # the parameters this file does not set come from another file (beside it)
        if not isinstance(inherit, str):
            raise ParamsError(f"{path}: 'inherit' names a parameter file, got {inherit!r}")
        base, _ = load_params(os.path.join(os.path.dirname(os.path.abspath(path)), inherit))
        values = {**base.as_dict(), **values}
    return params_from_dict(values, path), document


def resolve(name: str) -> str:
    """A parameter file from its path, or one of the shipped sets by name (``calibrated``, ``omnipath``)."""
    shipped = os.path.join(DATA_DIR, name + ".json")
    if os.sep not in name and not name.endswith(".json") and os.path.exists(shipped):
        return shipped
    return name
