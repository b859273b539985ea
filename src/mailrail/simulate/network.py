"""The network of the model: one link per node to a single switch, and the switch's output ports.

FIFO links are computed in closed form, not stepped: a message's departure and arrival follow from
when each link and port frees up, so the network costs O(1) per message and no event of its own.

* A node's uplink sends one message at a time at ``link_Bps``.
* The switch's output port towards a node buffers at most ``switch_queue_bytes``; a message whose
  bytes do not fit waits *on its uplink* until they do (a lossless fabric's link-level flow control,
  and what TCP's window does end to end), so a congested port holds back the links that feed it,
  head of line included.
* The port sends at ``link_Bps`` down the receiving node's link; ``link_latency_s`` is added once.
* Ranks of one node exchange messages by a shared-memory copy (``shm_Bps``, ``shm_latency_s``).
"""

from __future__ import annotations

from .params import ModelParams


class Network:
    def __init__(self, params: ModelParams, nodes: int, link_Bps: float | None = None) -> None:
        self.rate = link_Bps or params.link_Bps
        self.latency = params.link_latency_s
        self.queue = params.switch_queue_bytes
        self.header = params.header_bytes
        self.shm_rate = params.shm_Bps
        self.shm_latency = params.shm_latency_s
        self.uplink_free = [0.0] * nodes
        self.port_free = [0.0] * nodes
        self.port_peak_bytes = 0.0  # the most bytes one output port held (checked against the buffer)
        self.wire_bytes = 0  # bytes that crossed links, headers included

    def transfer(self, now: float, source_node: int, dest_node: int, nbytes: int) -> tuple[float, float]:
        """A message of *nbytes* handed to the network at *now*: when it has left the sender (its
        buffer is free again) and when it arrives at the receiving rank."""
        if source_node == dest_node:
            done = now + self.shm_latency + nbytes / self.shm_rate
            return done, done
        wire = nbytes + self.header
        rate = self.rate
        send_time = wire / rate
        port_free = self.port_free[dest_node]
        # Start when the uplink is free and the port will have room for these bytes on arrival.
        start = max(now, self.uplink_free[source_node], port_free - send_time - max(self.queue - wire, 0) / rate)
        at_port = start + send_time
        self.uplink_free[source_node] = at_port
        backlog = max(port_free - at_port, 0.0) * rate + wire
        if backlog > self.port_peak_bytes:
            self.port_peak_bytes = backlog
        departs = max(at_port, port_free) + send_time
        self.port_free[dest_node] = departs
        self.wire_bytes += wire
        return at_port, departs + self.latency
