"""Flow-control strategies: plain objects with no MPI import.  One module here uses MPI, and importing the
package does not import it: :mod:`~mailrail.flow.node_memory`, the node's shared credit memory (an MPI
shared-memory window, or CPU atomics in it), which the rail makes for node and adaptive modes.

* :class:`~mailrail.flow.base.Unconstrained` (``none``): send at once, always.
* :class:`~mailrail.flow.rank.RankCredits` (``rank``): credits per sender/receiver rank pair.
* :class:`~mailrail.flow.node.NodeCredits` (``node``): one credit pool per destination,
  shared by all ranks of a node.
* :class:`~mailrail.flow.adaptive.AdaptiveCredits` (``adaptive``): a receiver lends its
  receive slots to the sending nodes that ask, shared by the node's ranks; any job size.

:mod:`~mailrail.flow.modes` describes each mode in one table entry (budget, node memory, strategies in both
implementations, state sizes); everything else reads the table.
"""

from .adaptive import AdaptiveCredits
from .base import FlowControl, Unconstrained
from .modes import (
    MODE_NAMES,
    MODES,
    FlowMode,
    FlowParts,
    NodeLayout,
    credit_budget,
    flow_mode,
    least_recv_slots,
    memory_plan,
)
from .node import NodeCredits
from .rank import RankCredits
from .sizing import CreditBudget, MemoryPlan

__all__ = [
    "FlowControl",
    "Unconstrained",
    "RankCredits",
    "NodeCredits",
    "AdaptiveCredits",
    "MODES",
    "MODE_NAMES",
    "FlowMode",
    "FlowParts",
    "NodeLayout",
    "flow_mode",
    "CreditBudget",
    "MemoryPlan",
    "credit_budget",
    "least_recv_slots",
    "memory_plan",
]
