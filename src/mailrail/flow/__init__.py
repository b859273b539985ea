"""Flow-control strategies: plain objects with no MPI import.

* :class:`~mailrail.flow.base.Unconstrained` (``none``): send at once, always.
* :class:`~mailrail.flow.rank.RankCredits` (``rank``): credits per sender/receiver rank pair.
* :class:`~mailrail.flow.node.NodeCredits` (``node``): one credit pool per destination,
  shared by all ranks of a node.
"""

from .base import FlowControl, Unconstrained
from .node import NodeCredits
from .rank import RankCredits
from .sizing import CreditBudget, credit_budget

__all__ = ["FlowControl", "Unconstrained", "RankCredits", "NodeCredits", "CreditBudget", "credit_budget"]
