"""The cluster's command-line side: the flags every command shares (``--cluster``, link and memory options)
and the :class:`~mailrail_tools.cluster.spec.ClusterSpec` they describe.

Commands parse their flags here and hand the cluster a spec (:func:`cluster_spec`); the cluster's
API (:func:`mailrail_tools.cluster.job_on_cluster.open_cluster`,
:class:`~mailrail_tools.cluster.virtual.VirtualCluster`) takes that spec and never sees an ``argparse.Namespace``.
"""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Sequence

from mailrail.errors import ClusterError

from ..flags import MPI_INT_MAX, int_in
from .spec import ClusterSpec, Link, node_of_rank, parse_memory, parse_node_count, ranks_per_node
from .virtual import VirtualCluster

#: The cluster ``mailrail cluster up`` makes when no ``--name`` is given, and ``--cluster up`` uses.
DEFAULT_NAME = "main"
_OFF = ("off", "none")


@dataclasses.dataclass(frozen=True)
class ClusterChoice:
    """What ``--cluster`` asked for: ``nodes`` new nodes, the running cluster ``name``, ``auto`` or ``off``."""

    kind: str  # "nodes" | "up" | "auto" | "off"
    nodes: int | None = None
    name: str | None = None

    @classmethod
    def parse(cls, text: str | None, *, allow_auto: bool = False) -> ClusterChoice:
        if text is None:
            return cls("off")
        value = str(text).strip().lower()
        if value == "up" or value.startswith("up:"):
            return cls("up", name=value[3:] or DEFAULT_NAME)
        if allow_auto and value in ("auto", "off"):
            return cls(value)
        accepted = "a node count >= 1, 'up' or 'up:NAME'" + (", 'auto' or 'off'" if allow_auto else "")
        try:
            return cls("nodes", nodes=parse_node_count(value))
        except ClusterError as error:
            raise ClusterError(
                f"--cluster takes {accepted}; got {text!r}" + (f" ({error})" if value.lstrip("-").isdigit() else "")
            ) from None


def add_cluster_arguments(
    parser: argparse.ArgumentParser,
    *,
    default: str | None = None,
    victims: bool = False,
    victim_memory: str | None = None,
) -> None:
    """``--cluster`` and the options of the cluster it builds (also valid with ``--cluster up`` for memory).

    *default* is the command's ``--cluster`` when not given (``auto`` also accepts ``auto`` and ``off``);
    *victims* adds ``--victim-ranks``; *victim_memory* is the command's own victim-node cap.
    """
    group = parser.add_argument_group("virtual cluster (nodes as network namespaces; needs root or user namespaces)")
    auto = default is not None
    group.add_argument(
        "--cluster",
        default=default,
        metavar="N|up" + ("|auto|off" if auto else ""),
        help="run on a virtual cluster of N nodes built for this job and removed after it, or on the "
        "running one ('up', made by `mailrail cluster up`)"
        + (
            f" (default: {default}: a 4-node cluster where the machine allows it, else shared "
            f"memory; off: shared memory)"
            if auto
            else ""
        ),
    )
    add_node_arguments(group, victim_memory)
    if victims:
        group.add_argument(
            "--victim-ranks",
            default=None,
            metavar="R[,R...]",
            help="the victim ranks whose nodes --victim-node-memory caps (default for "
            "`bench adversarial`: its own victims)",
        )


def add_node_arguments(group, victim_memory: str | None = None) -> None:
    """The options of the nodes and links themselves (also what ``mailrail cluster up`` takes)."""
    group.add_argument(
        "--link-rate",
        default=None,
        metavar="RATE",
        help="each node's link speed, both directions, in tc units (10gbit, 500mbit; bps = bytes/s)",
    )
    group.add_argument(
        "--link-delay",
        default=None,
        metavar="DELAY",
        help="one-way delay added on each link (50us, 1ms; needs the kernel's netem)",
    )
    group.add_argument(
        "--link-queue", default=None, metavar="QUEUE", help="each link's queue: packets (100p) or bytes (256kb)"
    )
    group.add_argument(
        "--node-memory",
        default=None,
        metavar="SIZE",
        help="memory cap of every node, through its cgroup (1G, 512M; needs root)",
    )
    group.add_argument(
        "--victim-node-memory",
        default=None,
        metavar="SIZE",
        help="memory cap of the nodes that hold victim ranks only"
        + (f" (default: {victim_memory}; off: none)" if victim_memory else ""),
    )
    group.add_argument(
        "--node-slots",
        type=int_in(1, MPI_INT_MAX),
        default=None,
        metavar="K",
        help="ranks a node holds at most (default: as many as the job puts there)",
    )


def memory_option(text: str | None, option: str) -> int | None:
    if text is None or str(text).strip().lower() in _OFF:
        return None
    return parse_memory(text, option)


def build_spec(args: argparse.Namespace, nodes: int, ranks: int, victim_ranks: Sequence[int] = ()) -> ClusterSpec:
    """The spec of a new cluster for a job of *ranks* ranks whose victims are *victim_ranks*."""
    counts = ranks_per_node(ranks, nodes, args.node_slots)
    placement = node_of_rank(counts)
    outside = [r for r in victim_ranks if not 0 <= r < ranks]
    if outside:
        raise ClusterError(f"--victim-ranks {outside} outside the job's ranks 0..{ranks - 1}")
    victim_memory = memory_option(args.victim_node_memory, "--victim-node-memory")
    if victim_memory is not None and not victim_ranks:
        raise ClusterError("--victim-node-memory caps the nodes of the victim ranks: say which with --victim-ranks")
    return ClusterSpec(
        nodes=nodes,
        link=Link.parse(args.link_rate, args.link_delay, args.link_queue),
        node_memory=memory_option(args.node_memory, "--node-memory"),
        victim_node_memory=victim_memory,
        victim_nodes=tuple(sorted({placement[r] for r in victim_ranks})),
        node_slots=args.node_slots,
    )


def parse_ranks(text: str | None, option: str = "--victim-ranks") -> list[int]:
    if text is None:
        return []
    try:
        return sorted({int(part) for part in str(text).split(",") if part.strip()})
    except ValueError:
        raise ClusterError(f"{option} takes comma-separated rank numbers, got {text!r}") from None


def cluster_spec(
    args: argparse.Namespace, choice: ClusterChoice, ranks: int, victim_ranks: Sequence[int] = ()
) -> ClusterSpec:
    """The flags as the spec :func:`~mailrail_tools.cluster.job_on_cluster.open_cluster` takes for a job of
    *ranks* ranks.

    ``--cluster N``: a new cluster of N nodes.  ``--cluster up``: this job's part of the running
    cluster, its first nodes (as many as the job has ranks, at most all), whose memory caps the spec
    gives; link and slot flags shape a cluster when it is made, so they are refused here.
    """
    if choice.kind == "nodes":
        assert choice.nodes is not None  # ClusterChoice.parse gives "nodes" a count
        return build_spec(args, choice.nodes, ranks, victim_ranks)
    if choice.kind != "up" or choice.name is None:
        raise ValueError(f"cluster_spec: no cluster to describe for --cluster {choice.kind}")
    shaping = [
        flag
        for flag, value in (
            ("--link-rate", args.link_rate),
            ("--link-delay", args.link_delay),
            ("--link-queue", args.link_queue),
            ("--node-slots", args.node_slots),
        )
        if value is not None
    ]
    if shaping:
        raise ClusterError(
            f"{', '.join(shaping)} shape a cluster when it is made: give them to "
            f"`mailrail cluster up`, not to a job on the running cluster {choice.name}"
        )
    running = VirtualCluster.attach(choice.name).spec.nodes
    return build_spec(args, min(running, ranks), ranks, victim_ranks)  # a small job: the first nodes


def node_flags_given(args: argparse.Namespace) -> list[str]:
    """The node and link flags set on the command line (meaningless without a cluster)."""
    names = ("link_rate", "link_delay", "link_queue", "node_memory", "victim_node_memory", "node_slots", "victim_ranks")
    return ["--" + name.replace("_", "-") for name in names if getattr(args, name, None) is not None]


#: The flags of :func:`add_cluster_arguments`, each taking one value.
CLUSTER_FLAGS = (
    "--cluster",
    "--link-rate",
    "--link-delay",
    "--link-queue",
    "--node-memory",
    "--victim-node-memory",
    "--node-slots",
    "--victim-ranks",
)


def without_cluster_flags(argv: Sequence[str]) -> list[str]:
    """*argv* minus the cluster flags and their values (the command as each rank runs it)."""
    kept, skip = [], False
    for arg in argv:
        if skip:
            skip = False
        elif arg in CLUSTER_FLAGS:
            skip = True
        elif not arg.startswith(tuple(flag + "=" for flag in CLUSTER_FLAGS)):
            kept.append(arg)
    return kept
