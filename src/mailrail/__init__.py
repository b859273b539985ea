"""MailRail: asynchronous, out-of-order, fire-and-forget messaging between MPI processes,
with user-space credit-based flow control against incast congestion."""

from typing import TYPE_CHECKING, Any

from .config import Config
from .errors import (
    BufferOwnershipError,
    CollectiveMismatchError,
    ConfigError,
    ConfigWarning,
    CreditStallError,
    FinalizedError,
    InvalidDestinationError,
    MailRailError,
    MessageSizeError,
    ProtocolError,
    ReleaseError,
    RemoteError,
    SlowRankWarning,
    StallError,
    UndeliveredError,
    UndeliveredWarning,
)

if TYPE_CHECKING:  # the real classes for type checkers; at run time __getattr__ imports them on first use
    from .channels import Future, Rail, wait
    from .coalesce import Coalescer
    from .interfaces import DatagramRail
    from .rail import MailRail, Message

__version__ = "0.1.0"

__all__ = [
    "MailRail",
    "Message",
    "Rail",
    "DatagramRail",
    "Coalescer",
    "Future",
    "wait",
    "Config",
    "MailRailError",
    "ConfigError",
    "ConfigWarning",
    "InvalidDestinationError",
    "MessageSizeError",
    "BufferOwnershipError",
    "ReleaseError",
    "FinalizedError",
    "StallError",
    "CreditStallError",
    "CollectiveMismatchError",
    "SlowRankWarning",
    "ProtocolError",
    "RemoteError",
    "UndeliveredWarning",
    "UndeliveredError",
]


def __getattr__(name: str) -> Any:
    # The transport imports mpi4py (which initializes MPI); load it only when asked, so the
    # sans-I/O core and the command-line launcher work without starting MPI.
    if name in ("MailRail", "Message"):
        from . import rail

        return getattr(rail, name)
    if name in ("Rail", "Future", "wait"):  # what a program's own functions take and use (no MPI to import them)
        from . import channels

        return getattr(channels, name)
    if name == "DatagramRail":
        from .interfaces import DatagramRail

        return DatagramRail
    if name == "Coalescer":
        from .coalesce import Coalescer

        return Coalescer
    raise AttributeError(f"module 'mailrail' has no attribute {name!r}")
