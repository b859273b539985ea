# cython: language_level=3
"""The compiled :class:`mailrail.futures.PythonFuture`, method for method, as an object the cyclic garbage
collector does not track (``mailrail/futures.py`` says why; ``tests/library/test_futures.py`` runs both)."""

cimport cython

from typing import Any

#: A future's states, compared by identity (:mod:`mailrail.futures` takes these same objects).
WAITING = "waiting"
ANSWERED = "answered"
FAILED = "failed"


@cython.no_gc
@cython.freelist(256)
cdef class Future:
    """What a :meth:`rail.ask <mailrail.channels.Channels.ask>` will return: :meth:`result` waits for it (making
    progress on the rail), :meth:`done` says whether it is there.  *dest* is the rank asked."""

    cdef public object _channels
    cdef public object dest
    cdef public object _state
    cdef public object _value

    def __init__(self, channels, dest):
        self._channels = channels
        self.dest = dest
        self._state = WAITING
        self._value = None

    def _settle(self, value, failed):
        self._state = FAILED if failed else ANSWERED
        self._value = value

    def done(self) -> bool:
        """Whether the answer is there (no progress is made to find out)."""
        return self._state is not WAITING

    def result(self) -> Any:
        """What the function returned on rank :attr:`dest`, waiting for it if need be; what it raised there
        raises here as a :class:`~mailrail.errors.RemoteError`.  Not from inside a handler (a
        :class:`~mailrail.errors.MailRailError` says why)."""
        if self._state is WAITING:
            self._channels.wait_for([self])
        if self._state is FAILED:
            raise self._value
        return self._value

    def __repr__(self):
        return f"<Future of rank {self.dest}: {self._state}>"
