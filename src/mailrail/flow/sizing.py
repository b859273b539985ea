"""Credit sizing from one receive-memory budget, shared by the credit modes."""

from __future__ import annotations

import dataclasses

from ..errors import ConfigError

#: Adaptive mode's default lease: a grant carries at most this share of the receive slots.
ADAPTIVE_LEASE_SHARE = 8


@dataclasses.dataclass(frozen=True)
class CreditBudget:
    # rank mode: per (sender rank, receiver rank); node mode: per (sender node, receiver rank);
    # adaptive mode: the most credits one grant carries (the lease)
    credits_per_pair: int
    # rank and node modes: return credits once this many were consumed; adaptive mode: a node holding h
    # credits gets released ones back once h // return_threshold gathered
    return_threshold: int


def credit_budget(
    mode: str, *, recv_slots: int, ranks: int, nodes: int, credit_threshold: int, credits_per_pair: int | None = None
) -> CreditBudget:
    """Credits so that all senders together never hold more than ``recv_slots`` for one receiver.

    Rank-based: ``recv_slots // ranks`` per rank pair.  Node-based:
    ``recv_slots // nodes`` per (node, receiver) pair.  An explicit
    *credits_per_pair* must still fit in the receive pool.  Adaptive: never refused for
    any number of ranks or nodes; a grant carries at most ``recv_slots // 8`` credits (or
    *credits_per_pair*, at most ``recv_slots``).
    """
    if mode == "adaptive":
        if credits_per_pair is None:
            return CreditBudget(max(1, recv_slots // ADAPTIVE_LEASE_SHARE), credit_threshold)
        if not 1 <= credits_per_pair <= recv_slots:
            raise ConfigError(
                f"MAILRAIL_CREDITS_PER_PAIR={credits_per_pair}: adaptive mode's lease must be 1.."
                f"MAILRAIL_RECV_POOL_SLOTS={recv_slots} (one grant never carries more than the receive slots)"
            )
        return CreditBudget(credits_per_pair, credit_threshold)
    senders = ranks if mode == "rank" else nodes
    unit = "sender rank" if mode == "rank" else "sending node"
    if credits_per_pair is None:
        per_pair = recv_slots // senders
        if per_pair == 0:
            ways = ["flow_control='adaptive' (credits lent on request: any job size)"]
            if mode == "rank" and recv_slots >= nodes:
                ways.insert(0, "flow_control='node' (credits per sending node instead of per rank)")
            raise ConfigError(
                f"{mode}-based flow control gets 0 credits per {unit}: MAILRAIL_RECV_POOL_SLOTS={recv_slots} "
                f"is fewer than the {senders} {unit}s that may send to a rank; use {' or '.join(ways)}, or raise "
                f"MAILRAIL_RECV_POOL_SLOTS to at least {senders}"
            )
    else:
        per_pair = credits_per_pair
        if per_pair < 1:
            raise ConfigError(f"MAILRAIL_CREDITS_PER_PAIR must be >= 1, got {per_pair}")
        if per_pair * senders > recv_slots:
            raise ConfigError(
                f"MAILRAIL_CREDITS_PER_PAIR={per_pair} x {senders} {unit}s = {per_pair * senders} credits "
                f"exceeds MAILRAIL_RECV_POOL_SLOTS={recv_slots}: credits must be backed by receive slots"
            )
    return CreditBudget(per_pair, max(1, per_pair // credit_threshold))


@dataclasses.dataclass(frozen=True)
class MemoryPlan:
    """What one rank of a job would hold in a flow-control mode, computed from the state sizes (no MPI)."""

    mode: str
    ranks: int
    nodes: int
    credits_per_pair: int | None  # None: unconstrained, or refused
    refused: str | None  # why MailRail would refuse the mode for this job (the ConfigError's text)
    receive_bytes: int  # the receive pool: R slots of datagram_size
    send_bytes: int  # the send pool
    credit_bytes: int  # private credit state of one rank (adaptive: its worst case, every node asking at once)
    shared_bytes_per_node: int  # credit state in node-shared memory (pool, adaptive's tokens and demand, map)

    @property
    def shared_bytes_per_rank(self) -> int:
        return self.shared_bytes_per_node * self.nodes // self.ranks

    @property
    def total_bytes_per_rank(self) -> int:
        return self.receive_bytes + self.send_bytes + self.credit_bytes + self.shared_bytes_per_rank


def least_recv_slots(mode: str, ranks: int, nodes: int) -> int:
    """The fewest receive slots per rank *mode* runs with in a job of *ranks* on *nodes*: one credit per
    sender rank (rank), per sending node (node), one slot in all (adaptive: lent in turn); 1 unconstrained
    (its messages wait in MPI's unexpected queue, unbounded)."""
    return {"rank": ranks, "node": nodes}.get(mode, 1)


def memory_plan(
    mode: str,
    *,
    ranks: int,
    ranks_per_node: int,
    recv_slots: int,
    send_slots: int,
    datagram_size: int,
    credit_threshold: int = 2,
    credits_per_pair: int | None = None,
    real_nodes: bool = True,
) -> MemoryPlan:
    """Memory per rank of *mode* for a job of *ranks* in nodes of *ranks_per_node*, from the same state the
    flow controls hold (their ``credit_state_bytes`` and ``shared_state_bytes``; *real_nodes*: the
    rank-to-node map lives in node-shared memory, 4 bytes per rank)."""
    from .adaptive import LEASE_BYTES, QUEUE_ENTRY_BYTES

    nodes = -(-ranks // ranks_per_node)
    int64 = 8
    pools = {"receive_bytes": recv_slots * datagram_size, "send_bytes": send_slots * datagram_size}
    if mode == "none":
        return MemoryPlan(mode, ranks, nodes, None, None, credit_bytes=0, shared_bytes_per_node=0, **pools)
    try:
        budget = credit_budget(
            mode,
            recv_slots=recv_slots,
            ranks=ranks,
            nodes=nodes,
            credit_threshold=credit_threshold,
            credits_per_pair=credits_per_pair,
        )
    except ConfigError as error:
        return MemoryPlan(mode, ranks, nodes, None, str(error), credit_bytes=0, shared_bytes_per_node=0, **pools)
    node_map = 4 * ranks if real_nodes else 0
    if mode == "rank":  # credits, owed and unreturned per rank
        credit, shared = 3 * int64 * ranks, 0
    elif mode == "node":  # owed and unreturned per node; the node's pool per destination rank
        credit, shared = 2 * int64 * nodes, int64 * ranks + node_map
    else:  # a lease record and a place in each of its three queues per node, at worst; pool, tokens, demand
        credit, shared = (LEASE_BYTES + 3 * QUEUE_ENTRY_BYTES) * nodes, 3 * int64 * ranks + node_map
    return MemoryPlan(
        mode, ranks, nodes, budget.credits_per_pair, None, credit_bytes=credit, shared_bytes_per_node=shared, **pools
    )
