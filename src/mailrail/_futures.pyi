"""Type stubs for the compiled futures (see _futures.pyx): mailrail.futures.PythonFuture, untracked by the cyclic
garbage collector."""

from typing import Any

from typing_extensions import disjoint_base

WAITING: str
ANSWERED: str
FAILED: str

@disjoint_base
class Future:
    _channels: Any
    dest: Any
    _state: Any
    _value: Any
    def __init__(self, channels: Any, dest: Any) -> None: ...
    def _settle(self, value: Any, failed: Any) -> None: ...
    def done(self) -> bool: ...
    def result(self) -> Any: ...
