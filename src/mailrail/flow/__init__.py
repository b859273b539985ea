"""Flow-control strategies: plain objects with no MPI import.

* :class:`~mailrail.flow.base.Unconstrained` (``none``): send at once, always.
* :class:`~mailrail.flow.rank.RankCredits` (``rank``): credits per sender/receiver rank pair.
* :class:`~mailrail.flow.node.NodeCredits` (``node``): one credit pool per destination,
  shared by all ranks of a node.
* :class:`~mailrail.flow.adaptive.AdaptiveCredits` (``adaptive``): a receiver lends its
  receive slots to the sending nodes that ask, shared by the node's ranks; any job size.
"""

from .adaptive import AdaptiveCredits
from .base import FlowControl, Unconstrained
from .node import NodeCredits
from .rank import RankCredits
from .sizing import CreditBudget, MemoryPlan, credit_budget, least_recv_slots, memory_plan

__all__ = [
    "FlowControl",
    "Unconstrained",
    "RankCredits",
    "NodeCredits",
    "AdaptiveCredits",
    "CreditBudget",
    "MemoryPlan",
    "credit_budget",
    "least_recv_slots",
    "memory_plan",
]
