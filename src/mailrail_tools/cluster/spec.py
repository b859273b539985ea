"""What a virtual cluster is, as plain data: options and their units, names, addresses, commands.

Nothing here touches the machine: :class:`ClusterSpec` validates the user's
options, :class:`Layout` derives every name and address of one cluster from its
id, and the functions below turn both into the exact ``tc`` argument lists,
hostfiles and ssh stand-in script that :mod:`mailrail_tools.cluster.virtual` applies.
All of it is unit-tested without root.
"""

from __future__ import annotations

import dataclasses
import re
import shlex
from collections.abc import Iterable, Sequence

from mailrail.errors import ClusterError

#: Nodes get 10.213.0.1 ... 10.213.0.250 on the cluster's own bridge; the head (switch and
#: launcher) is .254.  The range exists only inside the cluster's namespaces, so clusters
#: never see each other's addresses nor the host's.
SUBNET = "10.213.0.0/24"
HEAD_ADDRESS = "10.213.0.254"
MAX_NODES = 250
#: Node side of each link, inside the node's namespace; the switch side is ``n<index>``.
NODE_INTERFACE = "eth0"
BRIDGE = "br0"
#: What every name of the project's namespaces, cgroups and state starts with.
PREFIX = "mailrail-"
_ID = re.compile(r"^[a-z0-9]{1,12}$")
#: The batch schedulers a cluster can run (None: none, jobs start through mpiexec alone).
SCHEDULERS = (None, "slurm")

_RATE_UNITS = {
    "bit": 1,
    "kbit": 10**3,
    "mbit": 10**6,
    "gbit": 10**9,
    "tbit": 10**12,
    "bps": 8,
    "kbps": 8 * 10**3,
    "mbps": 8 * 10**6,
    "gbps": 8 * 10**9,
    "tbps": 8 * 10**12,
}
_TIME_UNITS = {"s": 1.0, "sec": 1.0, "ms": 1e-3, "msec": 1e-3, "us": 1e-6, "usec": 1e-6, "ns": 1e-9, "nsec": 1e-9}
_SIZE_UNITS = {
    "": 1,
    "b": 1,
    "k": 2**10,
    "kb": 2**10,
    "kib": 2**10,
    "m": 2**20,
    "mb": 2**20,
    "mib": 2**20,
    "g": 2**30,
    "gb": 2**30,
    "gib": 2**30,
    "t": 2**40,
    "tb": 2**40,
    "tib": 2**40,
}
_PACKET_UNITS = ("p", "pkt", "pkts", "packets")
_NUMBER = re.compile(r"^\s*([0-9]+(?:\.[0-9]*)?)\s*([a-zA-Z]*)\s*$")


def _split(option: str, text: str, what: str) -> tuple[float, str]:
    match = _NUMBER.match(str(text))
    if not match:
        raise ClusterError(f"{option}: {text!r} is not {what}")
    return float(match.group(1)), match.group(2).lower()


def _quantity(option: str, text: str, kind: str, example: str, units: dict, accepted: str) -> float:
    """*text* (a number and a unit of *units*) in the base unit, or an error naming option, unit and text."""
    value, unit = _split(option, text, f"a {kind} such as {example}")
    if unit not in units:
        raise ClusterError(f"{option}: unknown {kind} unit {unit or '(none)'!r} in {text!r}; use {accepted}")
    return value * units[unit]


def parse_rate(text: str, option: str = "--link-rate") -> int:
    """``10gbit`` -> bits per second (tc's units: bit, kbit, mbit, gbit, tbit; bps, kbps, ... are bytes/s)."""
    bits = int(
        _quantity(
            option,
            text,
            "rate",
            "10gbit or 500mbit",
            _RATE_UNITS,
            f"one of {', '.join(_RATE_UNITS)} (tc's units: bps is bytes per second)",
        )
    )
    if bits < 8000:
        raise ClusterError(f"{option}: {text!r} is below 8kbit, the slowest link tc shapes well")
    return bits


def parse_duration(text: str, option: str = "--link-delay") -> float:
    """``50us`` -> seconds (s, ms, us, ns as tc writes them)."""
    return _quantity(option, text, "time", "50us or 1ms", _TIME_UNITS, "one of s, ms, us, ns")


def parse_memory(text: str, option: str = "--node-memory") -> int:
    """``1G`` / ``512MiB`` / ``2147483648`` -> bytes (K, M, G, T are powers of 1024, as cgroups take them)."""
    size = int(
        _quantity(
            option,
            text,
            "memory",
            "1G or 512M",
            _SIZE_UNITS,
            "bytes or K, M, G, T (powers of 1024; KiB, MiB, GiB also accepted)",
        )
    )
    if size < 16 * 2**20:
        raise ClusterError(f"{option}: {text!r} is below 16M, too small for even one Python rank")
    return size


@dataclasses.dataclass(frozen=True)
class Queue:
    """A link's queue limit: so many packets or so many bytes."""

    limit: int
    unit: str  # "packets" | "bytes"

    def describe(self) -> str:
        return f"{self.limit}p" if self.unit == "packets" else f"{self.limit}b"


def parse_queue(text: str, option: str = "--link-queue") -> Queue:
    """``100p`` (packets) or ``256kb`` / ``1mb`` / ``65536`` (bytes)."""
    value, unit = _split(option, text, "a queue length such as 100p or 256kb")
    if unit in _PACKET_UNITS:
        packets = int(value)
        if packets < 1 or packets != value:
            raise ClusterError(f"{option}: {text!r} must be a whole number of packets >= 1")
        return Queue(packets, "packets")
    if unit not in _SIZE_UNITS:
        raise ClusterError(
            f"{option}: unknown queue unit {unit!r} in {text!r}; use p (packets) or a size in b, kb, mb (bytes)"
        )
    size = int(value * _SIZE_UNITS[unit])
    if size < 2048:
        raise ClusterError(f"{option}: {text!r} holds less than one full-size packet (1514 bytes)")
    return Queue(size, "bytes")


@dataclasses.dataclass(frozen=True)
class Link:
    """How each node's link to the switch behaves, both directions (None: as fast as the host)."""

    rate_bps: int | None = None
    delay_s: float | None = None
    queue: Queue | None = None

    @classmethod
    def parse(cls, rate: str | None = None, delay: str | None = None, queue: str | None = None) -> Link:
        return cls(
            parse_rate(rate) if rate else None,
            parse_duration(delay) if delay else None,
            parse_queue(queue) if queue else None,
        )

    @property
    def shaped(self) -> bool:
        return self.rate_bps is not None or self.delay_s is not None or self.queue is not None

    @property
    def frames_only(self) -> bool:
        """Whether the link carries only frames of one MTU: with a queue it does, as a switch port's buffer
        holds frames.  The host's segmentation-offload packets (up to 64 KiB, one TCP write's worth) would
        otherwise be dropped *whole* by a queue shorter than one, and a sender's own full queue would leave
        its socket waiting for TCP's 200 ms probe timer (:func:`link_commands`)."""
        return self.queue is not None

    def describe(self) -> dict:
        return {
            "rate_bps": self.rate_bps,
            "delay_s": self.delay_s,
            "queue": None if self.queue is None else dataclasses.asdict(self.queue),
            "frames_only": self.frames_only,
        }


@dataclasses.dataclass(frozen=True)
class ClusterSpec:
    """A virtual cluster's shape: nodes, slots, links and memory caps (validated at construction)."""

    nodes: int
    link: Link = Link()
    node_memory: int | None = None  # bytes, every node
    victim_node_memory: int | None = None  # bytes, only the nodes in victim_nodes
    victim_nodes: tuple[int, ...] = ()
    node_slots: int | None = None  # ranks a node takes at most (None: as many as asked)
    #: The batch scheduler run on the cluster: None, or "slurm" (slurmctld on the head, a slurmd per node).
    scheduler: str | None = None

    def __post_init__(self) -> None:
        check_node_count(self.nodes)
        if self.scheduler not in SCHEDULERS:
            raise ClusterError(
                f"--scheduler {self.scheduler!r} is not one this cluster runs; use "
                + " or ".join(repr(s) for s in SCHEDULERS if s)
            )
        if self.node_slots is not None and self.node_slots < 1:
            raise ClusterError(f"--node-slots must be >= 1, got {self.node_slots}")
        outside = [n for n in self.victim_nodes if not 0 <= n < self.nodes]
        if outside:
            raise ClusterError(f"victim node(s) {outside} outside the cluster's nodes 0..{self.nodes - 1}")

    def memory_limit(self, node: int) -> int | None:
        """The memory cap of *node*: the victim cap on a victim's node, else the node cap (or none)."""
        if node in self.victim_nodes and self.victim_node_memory is not None:
            return self.victim_node_memory
        return self.node_memory

    @property
    def memory_capped(self) -> bool:
        return any(self.memory_limit(node) is not None for node in range(self.nodes))

    def describe(self) -> dict:
        """The ``"cluster"`` entry of a benchmark's JSON."""
        return {
            "nodes": self.nodes,
            "network": "tcp",
            "link": self.link.describe(),
            "node_memory": self.node_memory,
            "victim_node_memory": self.victim_node_memory,
            "victim_nodes": list(self.victim_nodes),
            "node_slots": self.node_slots,
            "scheduler": self.scheduler,
        }


def check_node_count(nodes: int, option: str = "--cluster") -> None:
    if isinstance(nodes, bool) or not isinstance(nodes, int) or nodes < 1:
        raise ClusterError(f"{option} must be a node count >= 1, got {nodes!r}")
    if nodes > MAX_NODES:
        raise ClusterError(f"{option} {nodes}: a virtual cluster has at most {MAX_NODES} nodes")


def parse_node_count(text: str, option: str = "--cluster") -> int:
    try:
        nodes = int(str(text).strip())
    except ValueError:
        raise ClusterError(f"{option} takes a node count (or 'up' for the running cluster), got {text!r}") from None
    check_node_count(nodes, option)
    return nodes


def ranks_per_node(ranks: int, nodes: int, node_slots: int | None = None) -> list[int]:
    """How *ranks* spread over *nodes* in order: as evenly as they go, the first nodes taking one more.

    Ranks fill the nodes in blocks, in rank order (16 ranks on 4 nodes: 0-3 on the first), as both
    launchers place them from the hostfile this produces.  A node left empty, or more ranks than
    *node_slots* per node, is an error naming the numbers.
    """
    if ranks < 1:
        raise ClusterError(f"-n must be >= 1 rank, got {ranks}")
    if nodes > ranks:
        raise ClusterError(
            f"{ranks} rank(s) cannot fill {nodes} nodes: every virtual node needs at least one "
            f"rank (use --cluster {ranks} or more ranks)"
        )
    base, extra = divmod(ranks, nodes)
    counts = [base + 1] * extra + [base] * (nodes - extra)
    if node_slots is not None and counts[0] > node_slots:
        raise ClusterError(
            f"{ranks} ranks do not fit on {nodes} nodes of {node_slots} slots "
            f"(at most {nodes * node_slots}); add nodes or raise --node-slots"
        )
    return counts


def node_of_rank(counts: Sequence[int]) -> list[int]:
    """The node of every rank, for the placement :func:`ranks_per_node` returned."""
    return [node for node, count in enumerate(counts) for _ in range(count)]


@dataclasses.dataclass(frozen=True)
class Layout:
    """Every name and address of the cluster with id *cluster_id* (deterministic: teardown needs only the id)."""

    cluster_id: str
    nodes: int

    def __post_init__(self) -> None:
        if not _ID.match(self.cluster_id):
            raise ClusterError(f"cluster name {self.cluster_id!r} must be 1-12 lower-case letters or digits")
        check_node_count(self.nodes)

    @property
    def name(self) -> str:
        return PREFIX + self.cluster_id

    def netns(self, node: int | None) -> str:
        """Network namespace of *node*; None is the head (the switch, where mpiexec runs)."""
        return f"{self.name}-{'head' if node is None else f'n{node}'}"

    def hostname(self, node: int | None) -> str:
        return f"{self.cluster_id}-{'head' if node is None else f'n{node}'}"

    def address(self, node: int | None) -> str:
        return HEAD_ADDRESS if node is None else f"10.213.0.{node + 1}"

    def switch_port(self, node: int) -> str:
        return f"n{node}"

    def all_netns(self) -> list[str]:
        return [self.netns(None)] + [self.netns(n) for n in range(self.nodes)]


def new_cluster_id(pid: int, entropy: int) -> str:
    """A job cluster's id: the owner's pid and random bits (two jobs never share one)."""
    return f"j{pid:x}{entropy & 0xFFFFF:05x}"[:12]


# -- tc ---------------------------------------------------------------------------

#: Linux's default MTU on veth links; a queue given in bytes becomes packets where only packets count.
MTU = 1500


def tbf_burst_bytes(rate_bps: int) -> int:
    """The token bucket's burst on a link of *rate_bps*: 1 ms of traffic, at least one 64 KiB
    segmentation-offload packet (or tbf would split every one)."""
    return max(64 * 1024 + MTU, rate_bps // 8 // 1000)


def link_commands(device: str, link: Link) -> list[list[str]]:
    """``ip`` argument lists that make *device* carry what the *link* carries: with ``frames_only``, one
    segment per packet (``gso_max_segs 1``: TCP then writes MTU-sized packets, as a NIC puts frames on a wire).

    With offload packets the drops were at the senders' own queues and every mode ran far slower; with frames
    they are at the victim's switch port, as on a switch (measured: docs, virtual cluster).
    """
    if not link.frames_only:
        return []
    return [["ip", "link", "set", "dev", device, "gso_max_segs", "1"]]


def tc_commands(device: str, link: Link) -> list[list[str]]:
    """``tc`` argument lists that give *device*'s egress the *link*'s rate, delay and queue.

    Rate: a token bucket (tbf) whose burst holds 1 ms of traffic (at least one 64 KiB
    segmentation-offload packet, or tbf would split every one).  Delay: netem, under the
    bucket when there is a rate.  Queue: the bucket's byte limit, or a packet fifo (netem's
    own limit with a delay).  Without a rate the queue limits the fifo that replaces the
    default qdisc.
    """
    if not link.shaped:
        return []
    base = ["tc", "qdisc", "replace", "dev", device]
    commands = []
    queue = link.queue
    if link.rate_bps is not None:
        burst = tbf_burst_bytes(link.rate_bps)
        limit = queue.limit if queue and queue.unit == "bytes" else max(2 * burst, link.rate_bps // 8 // 100)
        commands.append(
            base
            + ["root", "handle", "1:", "tbf", "rate", f"{link.rate_bps}bit", "burst", str(burst), "limit", str(limit)]
        )
        parent = ["parent", "1:1", "handle", "10:"]
    else:
        parent = ["root", "handle", "1:"]
    if link.delay_s is not None:
        netem = base + parent + ["netem", "delay", f"{link.delay_s * 1e6:.0f}us"]
        if queue is not None:
            netem += ["limit", str(queue.limit if queue.unit == "packets" else max(1, queue.limit // MTU))]
        commands.append(netem)
    elif queue is not None and (queue.unit == "packets" or link.rate_bps is None):
        kind = "pfifo" if queue.unit == "packets" else "bfifo"
        commands.append(base + parent + [kind, "limit", str(queue.limit)])
    return commands


# -- launcher inputs ---------------------------------------------------------------


def hostfile(layout: Layout, counts: Sequence[int], flavor: str) -> str:
    """The hostfile of a job placed as *counts* (ranks per node), in the launcher's syntax."""
    lines = []
    for node, count in enumerate(counts):
        if count:
            address = layout.address(node)
            lines.append(f"{address} slots={count}" if flavor == "openmpi" else f"{address}:{count}")
    return "\n".join(lines) + "\n"


def agent_script(layout: Layout, uts_files: Sequence[str], cgroup_dirs: Sequence[Sequence[str]], nsenter: str) -> str:
    """The ssh stand-in: ``AGENT [ssh options] HOST COMMAND`` runs COMMAND on virtual node HOST.

    It joins the node's cgroups (so the node's memory cap covers it and cleanup finds it),
    then enters the node's network and UTS namespaces, exactly where ``ssh HOST`` would have
    put it on a real cluster.  ``AGENT --exec HOST PROGRAM ARGS...`` runs an argv without a
    shell (the launcher itself, on the head).  Index ``len(layout)`` of *uts_files* and
    *cgroup_dirs* is the head; the others are the nodes in order.
    """
    cases = []
    hosts: list[tuple[int | None, Iterable[str]]] = [
        (n, (layout.address(n), layout.hostname(n))) for n in range(layout.nodes)
    ]
    hosts.append((None, (layout.address(None), layout.hostname(None), "head")))
    for index, (node, names) in enumerate(hosts):
        joins = " ".join(f"echo $$ > {shlex.quote(d + '/cgroup.procs')} &&" for d in cgroup_dirs[index])
        cases.append(
            f"  {'|'.join(names)})\n"
            f"    netns=/run/netns/{layout.netns(node)}; uts={shlex.quote(uts_files[index])}\n"
            f"    join() {{ {joins} :; }} ;;"
        )
    return f"""#!/bin/sh
# ssh stand-in of MailRail virtual cluster {layout.cluster_id} (written by mailrail_tools.cluster; removed with it).
# mpiexec calls it as it would call ssh: AGENT [ssh options] HOST COMMAND...
# AGENT --exec HOST PROGRAM [ARGS...] runs PROGRAM there without a shell.
mode=shell
if [ "$1" = --exec ]; then mode=exec; shift; fi
while [ $# -gt 0 ]; do
  case "$1" in
    -[bcDEeFIiJLlmOoPpQRSWw]) shift 2 ;;
    -*) shift ;;
    *) break ;;
  esac
done
host=$1; shift
case "$host" in
{chr(10).join(cases)}
  *) echo "mailrail cluster {layout.cluster_id}: no node named $host" >&2; exit 255 ;;
esac
join || {{ echo "mailrail cluster {layout.cluster_id}: cannot join the cgroup of $host" >&2; exit 255; }}
if [ $mode = exec ]; then exec {shlex.quote(nsenter)} --net="$netns" --uts="$uts" -- "$@"; fi
exec {shlex.quote(nsenter)} --net="$netns" --uts="$uts" -- /bin/sh -c "$*"
"""
