"""MailRail: asynchronous, out-of-order, fire-and-forget messaging between MPI processes,
with user-space credit-based flow control against incast congestion."""

from typing import Any

from .config import Config
from .errors import (
    BufferOwnershipError,
    ConfigError,
    ConfigWarning,
    CreditStallError,
    DeprecatedKnobWarning,
    FinalizedError,
    InvalidDestinationError,
    MailRailError,
    MessageSizeError,
    ProtocolError,
    ReleaseError,
    StallError,
    UndeliveredError,
    UndeliveredWarning,
)

__version__ = "0.1.0"

__all__ = [
    "MailRail",
    "Message",
    "Config",
    "MailRailError",
    "ConfigError",
    "ConfigWarning",
    "DeprecatedKnobWarning",
    "InvalidDestinationError",
    "MessageSizeError",
    "BufferOwnershipError",
    "ReleaseError",
    "FinalizedError",
    "StallError",
    "CreditStallError",
    "ProtocolError",
    "UndeliveredWarning",
    "UndeliveredError",
]


def __getattr__(name: str) -> Any:
    # The transport imports mpi4py (which initializes MPI); load it only when asked, so the
    # sans-I/O core and the command-line launcher work without starting MPI.
    if name in ("MailRail", "Message"):
        from . import rail

        return getattr(rail, name)
    raise AttributeError(f"module 'mailrail' has no attribute {name!r}")
