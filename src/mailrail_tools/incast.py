"""The adversarial incast's plan: which ranks are victims and where each rank's messages go.

One generator for ``bench adversarial`` and for ``mailrail simulate`` (which models that benchmark), so the
model sends exactly what the benchmark sends for the same ranks, victims, message count and seed.  Plain
numpy, no MPI: each rank computes its own plan from its rank alone.

**Every target is reached**, whatever the message count.  A rank's targets are the victims (not itself),
then its partners (``partners`` other ranks of its own, chosen from the seed).  Its messages go round its
targets in turn, then are shuffled into the rank's own random order, so a rank's messages to its targets
differ by at most one.  Where the round starts makes the ranks' shares add up evenly: the k-th rank that is
not a victim starts where the (k-1)-th stopped (``k * messages`` modulo its targets), and a victim starts
at the victim after itself, so the victims' own messages go round the victims symmetrically.  With fewer
messages per rank than victims, consecutive ranks cover consecutive victims instead of all sending to the
first ones; without partners, any two victims receive within a few messages of each other.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from mailrail.config import default

__all__ = ["RAIL", "choose_victims", "destinations", "rail_default", "spread"]

#: The incast's datagrams and pools: the paper's 4 KiB datagrams, 512 receive and 256 send slots (the library's
#: defaults until its larger datagrams, chosen for throughput: docs, configuration).  ``bench adversarial``,
#: ``compare``, ``sweep`` and the model of them (``mailrail simulate``) run with these unless a flag says otherwise.
RAIL = {"datagram_size": 4096, "recv_pool_slots": 512, "send_pool_slots": 256}


def rail_default(name: str) -> Any:
    """The incast's value of the knob *name*: :data:`RAIL`'s, else the library's default."""
    return RAIL[name] if name in RAIL else default(name)


def choose_victims(ranks: int, victims: int, seed: int) -> list[int]:
    """The *victims* ranks of *ranks* that *seed* picks, ascending."""
    if not 1 <= victims <= ranks:
        raise ValueError(f"victims must be 1..{ranks} (the ranks); got {victims}")
    return sorted(int(v) for v in np.random.default_rng(seed).choice(ranks, victims, replace=False))


def destinations(
    rank: int, ranks: int, victims: Sequence[int], messages: int, seed: int, partners: int = 0
) -> npt.NDArray[np.int64]:
    """The destination of each of *rank*'s *messages*, in its send order (see the module).

    *partners* other ranks (neither victims nor *rank*) are this rank's own choice from *seed*; fewer when
    fewer exist.  A rank with no target (the only victim, no partners) sends nothing.
    """
    if not 0 <= rank < ranks:
        raise ValueError(f"rank must be 0..{ranks - 1}; got {rank}")
    if messages < 0:
        raise ValueError(f"messages must be >= 0; got {messages}")
    victim_ranks = np.asarray(victims, dtype=np.int64)
    me = np.flatnonzero(victim_ranks == rank)  # this rank's place among the victims, if it is one
    if len(me):  # the other victims, from the one after this rank round to the one before it
        targets = np.roll(victim_ranks, -int(me[0]) - 1)[:-1]
    else:
        targets = victim_ranks
    if partners:
        excluded = np.zeros(ranks, dtype=bool)
        excluded[victim_ranks] = True
        excluded[rank] = True
        others = np.flatnonzero(~excluded)
        rng = np.random.default_rng([seed, rank, 1])
        chosen = np.sort(rng.choice(others, min(partners, len(others)), replace=False))
        targets = np.concatenate([targets, chosen.astype(np.int64)])
    if len(targets) == 0:
        return np.zeros(0, dtype=np.int64)
    # A victim starts at the victim after itself; the k-th other rank where the (k-1)-th stopped.
    senders_before = 0 if len(me) else rank - int(np.count_nonzero(victim_ranks < rank))
    start = senders_before * messages % len(targets)
    dests = targets[(start + np.arange(messages, dtype=np.int64)) % len(targets)]
    np.random.default_rng([seed, rank]).shuffle(dests)
    return dests


def spread(counts: Sequence[int]) -> dict[str, float]:
    """``min``, ``median`` and ``max`` of *counts* (the messages each victim received), for a JSON record."""
    if len(counts) == 0:
        return {"min": 0, "median": 0, "max": 0}
    array = np.asarray(counts)
    return {"min": int(array.min()), "median": float(np.median(array)), "max": int(array.max())}
