"""The network of the model: one link per node to a single switch, and the switch's output ports.

FIFO links are computed in closed form, not stepped: a message's departure and arrival follow from
when each link and port frees up, so the network costs O(1) per message and no event of its own.

* A node's uplink sends one message at a time at ``link_Bps``.
* The switch's output port towards a node buffers at most ``switch_queue_bytes``; a message whose
  bytes do not fit waits *on its uplink* until they do (a lossless fabric's link-level flow control,
  and what TCP's window does end to end), so a congested port holds back the links that feed it,
  head of line included.
* With ``drop_tail``, queues drop instead of holding back (``tc``'s queue on the virtual cluster's links,
  ``switch_queue_bytes`` or the run's own): a message that finds the receiving node's port with no room
  for it is lost there, if the caller lets it be (flows recover it).  The sender's own uplink queue loses
  nothing: its kernel sees it full (:meth:`Network.uplink_has_room`) and keeps the message (Linux's
  ``tcp_transmit_skb`` fails, the segment stays unsent in its socket).
* The port sends at ``link_Bps`` down the receiving node's link; ``link_latency_s`` is added once.
* Ranks of one node exchange messages by a shared-memory copy (``shm_Bps``, ``shm_latency_s``).
"""

from __future__ import annotations

from .params import ModelParams


class Network:
    def __init__(
        self, params: ModelParams, nodes: int, link_Bps: float | None = None, queue_bytes: int | None = None
    ) -> None:
        self.rate = link_Bps or params.link_Bps
        self.latency = params.link_latency_s
        self.queue = queue_bytes or params.switch_queue_bytes
        self.drop_tail = bool(params.drop_tail)
        self.header = params.header_bytes
        self.shm_rate = params.shm_Bps
        self.shm_latency = params.shm_latency_s
        self.uplink_free = [0.0] * nodes
        self.port_free = [0.0] * nodes
        self.port_peak_bytes = 0.0  # the most bytes one output port held (checked against the buffer)
        self.wire_bytes = 0  # bytes that crossed links, headers included

    def transfer(self, now: float, source_node: int, dest_node: int, nbytes: int) -> tuple[float, float]:
        """A message of *nbytes* handed to the network at *now*: when it has left the sender (its
        buffer is free again) and when it arrives at the receiving rank.  Never lost (control messages,
        and every message of a lossless fabric)."""
        left, arrival = self.send(now, source_node, dest_node, nbytes, droppable=False)
        assert arrival is not None
        return left, arrival

    def send(
        self, now: float, source_node: int, dest_node: int, nbytes: int, *, droppable: bool
    ) -> tuple[float, float | None]:
        """As :meth:`transfer`; with ``drop_tail`` and *droppable*, the arrival is None if a full queue lost it."""
        if source_node == dest_node:
            done = now + self.shm_latency + nbytes / self.shm_rate
            return done, done
        wire = nbytes + self.header
        if self.drop_tail:
            return self._send_drop_tail(now, source_node, dest_node, wire, droppable)
        rate = self.rate
        send_time = wire / rate
        room = self.queue - wire
        # Start when the uplink is free and the port will have room for these bytes on arrival (max(), spelt out:
        # the builtin's call costs more than these comparisons, made for every packet).
        start, uplink_free = now, self.uplink_free[source_node]
        if uplink_free > start:
            start = uplink_free
        port_allows = self.port_free[dest_node] - send_time - (room if room > 0 else 0) / rate
        if port_allows > start:
            start = port_allows
        at_port = start + send_time
        self.uplink_free[source_node] = at_port
        self.wire_bytes += wire
        return at_port, self._through_port(at_port, dest_node, wire, droppable=False)

    def uplink_has_room(self, now: float, source_node: int, nbytes: int) -> bool:
        """Whether *source_node*'s uplink queue has room at *now* for a message of *nbytes* (with ``drop_tail``;
        a lossless fabric's always has)."""
        return (
            not self.drop_tail or (self.uplink_free[source_node] - now) * self.rate + nbytes + self.header <= self.queue
        )

    def _send_drop_tail(
        self, now: float, source_node: int, dest_node: int, wire: int, droppable: bool
    ) -> tuple[float, float | None]:
        """Two fifos in series: the sender's uplink (its caller asked :meth:`uplink_has_room`), then the port,
        which drops what does not fit."""
        at_port = max(now, self.uplink_free[source_node]) + wire / self.rate
        self.uplink_free[source_node] = at_port
        self.wire_bytes += wire
        return at_port, self._through_port(at_port, dest_node, wire, droppable)

    def _through_port(self, at_port: float, dest_node: int, wire: int, droppable: bool) -> float | None:
        """A message of *wire* bytes at *dest_node*'s port at *at_port*: when it reaches the receiving rank, or
        None if the port had no room for it and it may be dropped."""
        port_free = self.port_free[dest_node]
        queued_s = port_free - at_port
        backlog = (queued_s if queued_s > 0.0 else 0.0) * self.rate + wire
        if droppable and backlog > self.queue:
            return None
        if backlog > self.port_peak_bytes:
            self.port_peak_bytes = backlog
        departs = (port_free if port_free > at_port else at_port) + wire / self.rate
        self.port_free[dest_node] = departs
        return departs + self.latency
