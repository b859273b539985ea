"""Credit sizing from one receive-memory budget: the rules the credit modes' descriptors apply
(:mod:`mailrail.flow.modes`), and what a memory plan reports."""

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


def lease_budget(recv_slots: int, credit_threshold: int, credits_per_pair: int | None) -> CreditBudget:
    """Credits lent on request (adaptive): never refused for any number of ranks or nodes; a grant carries at
    most ``recv_slots // 8`` credits (or *credits_per_pair*, at most ``recv_slots``)."""
    if credits_per_pair is None:
        return CreditBudget(max(1, recv_slots // ADAPTIVE_LEASE_SHARE), credit_threshold)
    if not 1 <= credits_per_pair <= recv_slots:
        raise ConfigError(
            f"MAILRAIL_CREDITS_PER_PAIR={credits_per_pair}: adaptive mode's lease must be 1.."
            f"MAILRAIL_RECV_POOL_SLOTS={recv_slots} (one grant never carries more than the receive slots)"
        )
    return CreditBudget(credits_per_pair, credit_threshold)


def split_budget(
    mode: str,
    *,
    senders: int,
    unit: str,
    recv_slots: int,
    credit_threshold: int,
    credits_per_pair: int | None,
    node_mode_fits: bool = False,
) -> CreditBudget:
    """Receive slots split among *senders* (sender ranks, or sending nodes: *unit*), so that all of them
    together never hold more than ``recv_slots`` credits for one receiver: ``recv_slots // senders`` each, or
    an explicit *credits_per_pair* that still fits.  Refused (:class:`ConfigError`, naming the modes that would
    run: node mode too where *node_mode_fits*) when a sender would get none."""
    if credits_per_pair is None:
        per_pair = recv_slots // senders
        if per_pair == 0:
            ways = ["flow_control='adaptive' (credits lent on request: any job size)"]
            if node_mode_fits:
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
