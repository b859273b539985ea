"""Type stubs for the compiled transport (see _compiled.pyx and mailrail.transport.compiled)."""

from typing import Any, final

import numpy as np

from .._protocol import Endpoint, Message, ProgressIO
from ..pool import SlotPool
from .base import Tuning
from .compiled import MPILibrary

@final
class CompiledTransport(ProgressIO):
    """The compiled transport of one MailRail; implements mailrail.transport.base.Transport."""

    @property
    def name(self) -> str: ...
    def __init__(
        self,
        *,
        mpi: MPILibrary,
        comm: int,
        credit_comm: int,
        send_pool: SlotPool,
        recv_pool: SlotPool,
        recv_views: list[np.ndarray],
        posted_receives: int,
        endpoint: Endpoint,
        tuning: Tuning,
    ) -> None: ...
    def reserve_send_buffer(self) -> np.ndarray | None: ...
    def send(self, dest: Any, buf: Any, nbytes: Any) -> None: ...
    def receive(self) -> Message | None: ...
    def release_receive_buffer(self, message: Any) -> None: ...
    def reclaim_sends(self) -> int: ...
    def discard_arrivals(self) -> int: ...
    def cancel_receives(self) -> int: ...
    def close(self) -> None: ...
    def abandon(self) -> None: ...
