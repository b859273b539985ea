"""Credit sizing from one receive-memory budget, shared by both credit modes."""

from __future__ import annotations

import dataclasses

from ..errors import ConfigError


@dataclasses.dataclass(frozen=True)
class CreditBudget:
    credits_per_pair: int  # rank mode: per (sender rank, receiver rank); node mode: per (sender node, receiver rank)
    return_threshold: int  # return credits once this many were consumed


def credit_budget(
    mode: str, *, recv_slots: int, ranks: int, nodes: int, credit_threshold: int, credits_per_pair: int | None = None
) -> CreditBudget:
    """Credits so that all senders together never hold more than ``recv_slots`` for one receiver.

    Rank-based: ``recv_slots // ranks`` per rank pair.  Node-based:
    ``recv_slots // nodes`` per (node, receiver) pair.  An explicit
    *credits_per_pair* must still fit in the receive pool.
    """
    senders = ranks if mode == "rank" else nodes
    unit = "sender rank" if mode == "rank" else "sending node"
    if credits_per_pair is None:
        per_pair = recv_slots // senders
        if per_pair == 0:
            hint = (
                "use flow_control='node' (credits per sending node instead of per rank) or " if mode == "rank" else ""
            )
            raise ConfigError(
                f"{mode}-based flow control gets 0 credits per {unit}: MAILRAIL_RECV_POOL_SLOTS={recv_slots} "
                f"is fewer than the {senders} {unit}s that may send to a rank; {hint}raise "
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
