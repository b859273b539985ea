"""The transports beneath :class:`~mailrail.rail.MailRail`: one interface, a Python and a compiled path.

See :mod:`mailrail.transport.base` for the interface, :mod:`.python` and
:mod:`.compiled` for the two implementations.
"""

from .base import EndpointHooks, Message, Transport, Tuning
from .python import PythonTransport

__all__ = ["EndpointHooks", "Message", "PythonTransport", "Transport", "Tuning"]
