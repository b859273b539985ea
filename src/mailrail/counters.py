"""What ``MailRail.stats()`` reports: every counter defined once, with its meaning.

The :class:`~mailrail.protocol.Endpoint` counts all of :data:`COUNTERS` (its
message counters, its deferred queues' and its flow control's), on both
transports: the compiled one compiles that same Endpoint.  :data:`RAIL_FACTS`
describe the rail.  The documentation's counter table is generated from them.
"""

from __future__ import annotations

#: The messages and buffers of this rank.
MESSAGE_COUNTERS: dict[str, str] = {
    "messages_sent": "messages the application handed to send(), deferred ones included",
    "bytes_sent": "payload bytes of those messages",
    "messages_received": "messages receive() returned",
    "bytes_received": "payload bytes of those messages",
    "messages_released": "messages given back with release_receive_buffer()",
    "reserve_failures": "times reserve_send_buffer() returned None (backpressure)",
    "held_high_water": "most messages the application held (received, not released) at once",
    "credit_messages_sent": "credit messages this rank sent (returns and grants; adaptive: requests, revokes too)",
    "credit_messages_received": "credit messages this rank received",
    "credits_returned": "credits the returns and grants it sent carried (piggybacked ones not included)",
    "send_buffers_reserved": "send buffers reserve_send_buffer() handed out and not yet passed to send() (now)",
}

#: Credits and deferral: the Endpoint's deferred queues and flow control.
CREDIT_COUNTERS: dict[str, str] = {
    "credits_piggybacked": "credits returned in the tags of payloads (rank mode)",
    "deferred_sends": "sends that waited for credit (total)",
    "deferred_now": "sends waiting for credit now",
    "deferred_high_water": "most sends waiting for credit at once",
    "credit_window_high_water": "most payloads arrived here whose credits were not yet returned",
    "credit_requests_sent": "adaptive: requests for credit this rank sent for its node",
    "credit_requests_received": "adaptive: requests for credit this rank received",
    "credits_reclaimed": "adaptive: released credits kept in the free slots because other nodes waited",
    "credit_revokes_sent": "adaptive: revokes sent to nodes that might hold credits they do not use",
    "credits_given_back": "adaptive: credits nodes gave back after a revoke",
    "leases_now": "adaptive: nodes that hold credits of this rank now",
    "leases_high_water": "adaptive: most nodes holding credits of this rank, or asking, at once",
    "waiting_high_water": "adaptive: most nodes waiting for this rank's credits at once",
    "credit_state_bytes": "private credit state of this rank",
    "shared_credit_bytes": "the node's shared credit pool and rank-to-node map (counted once per node)",
}

#: Every counter ``stats()`` reports, in its order.
COUNTERS: dict[str, str] = {**MESSAGE_COUNTERS, **CREDIT_COUNTERS}

#: Facts about the rail; ``nodes`` and ``atomics`` only in node mode.
RAIL_FACTS: dict[str, str] = {
    "implementation": "the implementation in use (its Endpoint, ledger and transport): compiled or python",
    "flow_control": "none, rank, node or adaptive",
    "credits_per_pair": "credits per (sender rank or node, receiver rank); adaptive: the most one grant carries; "
    "0 when unconstrained",
    "recv_pool_bytes": "bytes of the receive pool",
    "send_pool_bytes": "bytes of the send pool",
    "nodes": "nodes the ranks form (node and adaptive modes)",
    "atomics": "how node credits are updated: cpu or mpi (node and adaptive modes)",
}
