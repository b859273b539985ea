"""Reading a virtual node's network namespace: its TCP counters."""

from __future__ import annotations

import pytest

from mailrail.errors import ClusterError
from mailrail_tools.cluster.namespaces import parse_tcp_segments

SNMP = (  # this machine's, shortened
    "Ip: Forwarding DefaultTTL InReceives\nIp: 1 64 2574526\n"
    "Tcp: RtoAlgorithm RtoMin RtoMax MaxConn ActiveOpens InSegs OutSegs RetransSegs InErrs\n"
    "Tcp: 1 200 120000 -1 108053 2574526 2565177 1526 0\n"
    "Udp: InDatagrams NoPorts\nUdp: 10 2\n"
)


def test_tcp_segments_are_read_from_a_namespaces_snmp_table():
    assert parse_tcp_segments(SNMP) == {"out_segs": 2565177, "retrans_segs": 1526}


@pytest.mark.parametrize("text", ["", "Tcp: OutSegs\nTcp: 1 2\n", "Tcp: InSegs\nTcp: 5\n"])
def test_a_snmp_table_without_tcp_counts_is_a_clear_error(text):
    with pytest.raises(ClusterError, match="/proc/net/snmp"):
        parse_tcp_segments(text)
