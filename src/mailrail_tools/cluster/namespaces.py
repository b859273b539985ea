"""The machine side of a virtual cluster: namespaces, links, processes, privileges.

Every change goes through iproute2 (``ip``, ``tc``) and util-linux
(``unshare``, ``nsenter``, ``umount``): the commands an administrator would type
to build or inspect the same thing, present on every Linux machine, with no
Python dependency.  Each failure is a :class:`ClusterError` naming the command
and what it printed.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Callable, Sequence

from mailrail.errors import ClusterError

from ..jobs import control

#: Where ``ip netns`` keeps its named network namespaces.
NETNS_DIR = "/var/run/netns"
TOOLS = {
    "ip": "iproute2",
    "tc": "iproute2",
    "unshare": "util-linux",
    "nsenter": "util-linux",
    "umount": "util-linux",
    "cat": "coreutils",
}
_CAP_NET_ADMIN, _CAP_SYS_ADMIN = 12, 21


def tool(name: str) -> str:
    """The path of *name*, or a ClusterError saying which package provides it."""
    for directory in (None, "/usr/sbin", "/sbin", "/usr/bin", "/bin"):
        found = shutil.which(name, path=directory)
        if found:
            return found
    raise ClusterError(
        f"the virtual cluster needs `{name}` ({TOOLS.get(name, 'a system package')}), "
        f"which is not installed or not on PATH"
    )


def run(argv: Sequence[str], step: str) -> str:
    """Run one command; its output, or a ClusterError with the command and its error text.

    A termination signal waits for the command to finish: interrupted inside ``Popen`` or half-way
    through ``ip netns add``, it would leave a namespace (or a child) that the teardown's listing missed.
    The command runs in a process group of its own, so a signal to this command's group (a terminal's
    Ctrl-C) reaches this process alone, which holds it until the command is done.
    """
    argv = [tool(argv[0]), *argv[1:]]
    with control.deferred_signals():
        # a process group of its own: a terminal's Ctrl-C (to the foreground group) does not kill it midway
        completed = subprocess.run(argv, capture_output=True, text=True, process_group=0)
    if completed.returncode != 0:
        detail = (completed.stderr or completed.stdout).strip() or f"exit status {completed.returncode}"
        raise ClusterError(f"{step}: `{' '.join(argv)}` failed: {detail}")
    return completed.stdout


# -- privileges ---------------------------------------------------------------------


def has_admin_capabilities() -> bool:
    """CAP_NET_ADMIN and CAP_SYS_ADMIN in effect, as root has them (what namespaces, links and mounts need)."""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("CapEff:"):
                    caps = int(line.split()[1], 16)
                    return bool(caps >> _CAP_NET_ADMIN & 1 and caps >> _CAP_SYS_ADMIN & 1)
    except OSError:
        pass
    return os.geteuid() == 0


def user_namespaces_work() -> str | None:
    """None when this user can make a user namespace with its own network; else why not."""
    try:
        unshare = tool("unshare")
    except ClusterError as error:
        return str(error)
    completed = subprocess.run(
        [unshare, "--user", "--map-root-user", "--mount", "--net", "true"], capture_output=True, text=True
    )
    if completed.returncode == 0:
        return None
    return (completed.stderr or f"exit status {completed.returncode}").strip()


# -- network namespaces ----------------------------------------------------------------


def netns_path(name: str) -> str:
    return os.path.join(NETNS_DIR, name)


def list_netns(prefix: str = "") -> list[str]:
    try:
        return sorted(n for n in os.listdir(NETNS_DIR) if n.startswith(prefix))
    except FileNotFoundError:
        return []


def add_netns(name: str) -> None:
    if os.path.exists(netns_path(name)):
        raise ClusterError(
            f"network namespace {name} exists already: a cluster of that name is up (mailrail cluster down removes it)"
        )
    run(["ip", "netns", "add", name], f"creating network namespace {name}")
    run(["ip", "-n", name, "link", "set", "lo", "up"], f"bringing up loopback in {name}")


def delete_netns(name: str) -> None:
    if os.path.exists(netns_path(name)):
        run(["ip", "netns", "delete", name], f"removing network namespace {name}")


def pids_in_netns(name: str) -> list[int]:
    """Processes whose network namespace is *name* (the same test as ``ip netns pids``, without setns)."""
    try:
        target = os.stat(netns_path(name))
    except OSError:
        return []
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                info = os.stat(f"/proc/{entry}/ns/net")
            except OSError:
                continue  # gone, or a kernel thread
            if (info.st_dev, info.st_ino) == (target.st_dev, target.st_ino):
                found.append(int(entry))
    return found


def link_statistics(netns: str, device: str) -> dict[str, int]:
    """Bytes and packets *device* in *netns* sent and received (the kernel's interface counters)."""
    output = run(
        ["ip", "-n", netns, "-json", "-statistics", "link", "show", "dev", device],
        f"reading the counters of {device} in {netns}",
    )
    stats = json.loads(output)[0]["stats64"]
    return {
        "tx_bytes": stats["tx"]["bytes"],
        "rx_bytes": stats["rx"]["bytes"],
        "tx_packets": stats["tx"]["packets"],
        "rx_packets": stats["rx"]["packets"],
        "tx_dropped": stats["tx"]["dropped"],
        "rx_dropped": stats["rx"]["dropped"],
    }


def tcp_segments(netns: str) -> dict[str, int]:
    """TCP segments *netns* sent and sent again since it was made (its own ``/proc/net/snmp``)."""
    return parse_tcp_segments(
        run(["nsenter", f"--net={netns_path(netns)}", "cat", "/proc/net/snmp"], f"reading the TCP counters of {netns}")
    )


def parse_tcp_segments(snmp: str) -> dict[str, int]:
    """``out_segs`` and ``retrans_segs`` from the text of ``/proc/net/snmp`` (its two ``Tcp:`` lines)."""
    rows = [line.split()[1:] for line in snmp.splitlines() if line.startswith("Tcp:")]
    if len(rows) != 2 or len(rows[0]) != len(rows[1]):
        raise ClusterError(f"/proc/net/snmp has no Tcp: header and values: {snmp[:200]!r}")
    values = dict(zip(rows[0], rows[1], strict=True))
    try:
        return {"out_segs": int(values["OutSegs"]), "retrans_segs": int(values["RetransSegs"])}
    except (KeyError, ValueError):
        raise ClusterError(f"/proc/net/snmp's Tcp: line has no OutSegs and RetransSegs counts: {values}") from None


def qdisc_drops(netns: str, device: str) -> int:
    """Packets the queueing discipline at *device*'s egress in *netns* dropped (its root's count, which
    includes its children's)."""
    output = run(
        ["tc", "-n", netns, "-s", "-json", "qdisc", "show", "dev", device], f"reading {device}'s queue in {netns}"
    )
    return sum(int(qdisc.get("drops", 0)) for qdisc in json.loads(output) if qdisc.get("root"))


# -- UTS namespaces (a node's own host name) ------------------------------------------------


def add_uts(path: str, hostname: str) -> None:
    """A persistent UTS namespace at *path* (a bind mount) whose host name is *hostname*."""
    with open(path, "w"):
        pass
    # The host name is written by the kernel's own file: no dependency on a `hostname` program.
    run(
        ["unshare", f"--uts={path}", "/bin/sh", "-c", f"echo {hostname} > /proc/sys/kernel/hostname"],
        f"creating the UTS namespace of {hostname}",
    )


def remove_uts(path: str) -> None:
    if not os.path.exists(path):
        return
    if _is_mount_point(path):
        run(["umount", path], f"releasing the UTS namespace {path}")
    os.unlink(path)


def _is_mount_point(path: str) -> bool:
    real = os.path.realpath(path)
    try:
        with open("/proc/self/mountinfo") as mounts:
            return any(line.split()[4] == real for line in mounts)
    except OSError:
        return False


# -- processes ---------------------------------------------------------------------------


def end_processes(find: Callable[[], set[int]]) -> set[int]:
    """SIGKILL the processes ``find()`` returns (asked again until none is left; no grace: every process of a
    cluster is ours), and wait until each is out of the process table: ``find()`` stops finding a killed
    process as soon as it leaves its namespaces and cgroups, while it is still exiting, and a daemon orphaned
    to init is a zombie until init collects it (``pgrep`` lists it until then).  Returns those still there
    after the job runner's bound (:func:`mailrail_tools.jobs.control.end_processes`)."""
    return control.end_processes(find, grace=0.0)
