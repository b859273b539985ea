"""Channels and calls refuse bad input with errors naming the value, before anything is sent (one rank).

``RESULT``: for each case, the exception's type and message; and the rail's staged count after
each (nothing may be staged by a refused call).
"""

import json
import threading

import numpy as np

from mailrail import MailRail


def fine(*args: object) -> None:
    pass


def make_inner():
    def inner() -> None:
        pass

    return inner


class Holder:
    def method(self) -> None:
        pass


def collective_inside(source: int, records: np.ndarray) -> None:
    rail.barrier()


results: dict[str, list] = {}


def attempt(name: str, action) -> None:
    try:
        action()
        results[name] = ["no error", "", rail.channels.staged()]
    except Exception as error:
        results[name] = [type(error).__name__, str(error), rail.channels.staged()]


rail = MailRail(datagram_size=256, on_error="raise")
attempt("lambda", lambda: rail.call(0, lambda x: x, 1))
attempt("nested", lambda: rail.call(0, make_inner()))
attempt("bound", lambda: rail.call(0, Holder().method))
attempt("unpicklable", lambda: rail.call(0, fine, 1, threading.Lock()))
attempt("large", lambda: rail.call(0, fine, b"x" * 1000))  # no error: a large call goes in pieces
attempt("bad_dest", lambda: rail.call(5, fine))
attempt("float_dest", lambda: rail.call(0.0, fine))
channel = rail.channels.open(np.uint64, collective_inside, name="inside")
attempt("wrong_dtype", lambda: channel.send([0], np.array([1.5])))
attempt("float_dests", lambda: channel.send(np.array([0.0]), np.array([1], np.uint64)))
attempt("dest_range", lambda: channel.send([3], np.array([1], np.uint64)))
attempt("collective_inside", lambda: channel.send([0], np.array([1], np.uint64)))
attempt("huge_record", lambda: rail.channels.open(np.dtype("S300"), fine))
rail.barrier()
# A datagram sent with rail.send reaches barrier()'s channel dispatch: refused, naming it.
buf = rail.reserve_send_buffer()
buf[:4] = 7
rail.send(0, buf, 4)
attempt("raw_datagram", lambda: rail.barrier())
rail._abandon()
print("RESULT " + json.dumps(results), flush=True)
