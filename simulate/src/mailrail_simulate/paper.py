"""The MailRail paper's measurements at scale, and the experiments that project them with the model.

The paper ran C++ MailRail on an Omni-Path cluster (PSM2, Open MPI 4.1, 64 ranks a node, 4 victims,
4 KiB datagrams, rank credits 8 a pair with piggybacking, node credits 512 a receiving node, credit
return threshold 2).  Its numbers are here to be *compared* with the model's projections, never to fit
it: the model's endpoint costs come from this project's own runs (``calibrated.json``).
"""

from __future__ import annotations

import dataclasses

from mailrail.flow.modes import flow_mode
from mailrail_tools.incast import rail_default

MIB = 1 << 20

#: Table I: mean runtime (s) with 12.8 MiB per sender, 4 victims.
TABLE_I = {
    512: {"none": 152.4, "rank": 0.979, "node": 1.02},
    1024: {"none": 895.0, "rank": 2.55, "node": 2.3},
    2048: {"none": 5080.0, "rank": 6.84, "node": 4.67},
    4096: {"none": 40542.0, "rank": 21.3, "node": 9.15},
}
TABLE_I_BYTES_PER_RANK = int(12.8 * MIB)
#: The modes the paper measured, in Table I's order: its unconstrained baseline, then its credit modes.
MEASURED_MODES = tuple(TABLE_I[512])
MEASURED_CREDIT_MODES = tuple(mode for mode in MEASURED_MODES if flow_mode(mode).has_credits)

#: With 128 MiB per sender, goodput from 128:1 (512 ranks) to 4096:1 (16,384 ranks): how much it fell.
GOODPUT_FALL = {"node": 0.149, "rank": 0.84}
GOODPUT_RANKS = (512, 1024, 4096, 16384)  # the paper's ends and two between: each point costs minutes
GOODPUT_BYTES_PER_RANK = 128 * MIB

#: Victim sweep at 4,096 ranks: unconstrained runtime grew about 8x per doubling of work per victim from
#: 8:1 on; the credit modes stayed flat to 64:1, then grew linearly; node 3.7x faster than rank at 2048:1-4096:1.
SWEEP_RANKS = 4096
SWEEP_RATIOS = (8, 64, 512, 4096)
SWEEP_NONE_GROWTH_PER_DOUBLING = 8.0
SWEEP_NODE_OVER_RANK_AT_HIGH_RATIO = 3.7
#: The pair that ratio compares: (slower, faster).
SWEEP_COMPARED_MODES = ("rank", "node")

#: Stranding: 14,336 ranks replaying a Reddit sort trace: rank credits ran nearly 4x slower than
#: unconstrained (credits stranded on the 8.6% of pairs that never talked); 17.8-26.4 million credit
#: messages per trial against node credits' 117k-435k.
STRANDING_RANK_OVER_NONE_RUNTIME = 4.0
#: The mode whose credits stranded, and the mode it is compared with: (stranded, baseline).
STRANDING_COMPARED_MODES = ("rank", "none")
STRANDING_CREDIT_MESSAGES = {"rank": (17.8e6, 26.4e6), "node": (117e3, 435e3)}

#: The paper's datagrams: 4 KiB.
DATAGRAM_SIZE = 4096
#: The paper's credit settings, as MailRail's knobs: 8 credits per pair in rank mode; node mode's 512 per
#: receiving node is 8 per (sending node, receiving rank) with 64 ranks a node; threshold 2.
CREDITS_PER_PAIR = 8
CREDIT_THRESHOLD = 2
RANKS_PER_NODE = 64
VICTIMS = 4
#: Adaptive mode's receive slots: MailRail's default (its memory does not grow with the job).
ADAPTIVE_RECV_SLOTS: int = rail_default("recv_pool_slots")


@dataclasses.dataclass(frozen=True)
class Experiment:
    name: str
    title: str
    ranks: tuple[int, ...]
    victims: tuple[int, ...]  # one per entry of ranks
    bytes_per_rank: int
    partners: int = 0


def experiments() -> list[Experiment]:
    return [
        Experiment(
            "table1",
            "Table I: runtime with 12.8 MiB per sender, 4 victims",
            tuple(TABLE_I),
            (4,) * 4,
            TABLE_I_BYTES_PER_RANK,
        ),
        Experiment(
            "goodput",
            "Goodput from 128:1 to 4096:1 (128 MiB per sender, 4 victims)",
            GOODPUT_RANKS,
            (VICTIMS,) * len(GOODPUT_RANKS),
            GOODPUT_BYTES_PER_RANK,
        ),
        Experiment(
            "victims",
            "Victim sweep at 4,096 ranks (12.8 MiB per sender)",
            (SWEEP_RANKS,) * len(SWEEP_RATIOS),
            tuple(SWEEP_RANKS // ratio for ratio in SWEEP_RATIOS),
            TABLE_I_BYTES_PER_RANK,
        ),
        Experiment(
            "stranding",
            "Stranding: each rank sends to 2 partners of its own and 1 hot receiver (2,048 ranks)",
            (2048,),
            (1,),
            TABLE_I_BYTES_PER_RANK,
            partners=2,
        ),
    ]


def recv_slots(mode: str, ranks: int, ranks_per_node: int) -> int:
    """The receive slots that back the paper's credits in *mode* (rank and node mode need them per sender)."""
    senders = flow_mode(mode).senders(ranks, -(-ranks // ranks_per_node))
    return ADAPTIVE_RECV_SLOTS if senders is None else CREDITS_PER_PAIR * senders
