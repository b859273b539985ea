"""Root, or a user namespace: how a command that needs a virtual cluster gets the privileges for it.

Namespaces, links and mounts need CAP_NET_ADMIN and CAP_SYS_ADMIN.  Without
them, where the kernel lets unprivileged users make user namespaces, the
``mailrail`` command runs itself again inside a new one (``unshare --user
--map-root-user``) together with private mount and PID namespaces: there it
holds those capabilities over namespaces it owns, ``/run`` is a private tmpfs
for the cluster's records, and when the command ends the kernel ends every
process and namespace inside.  Memory cgroups are not available there, so
node memory caps need real root.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Sequence

from mailrail.errors import ClusterError

from . import namespaces
from .virtual import USERNS_VARIABLE

#: Runs inside the new namespaces before the command: a private /run for ``ip netns`` and the records.
_PREPARE = 'mount -t tmpfs -o mode=0755 mailrail-run /run && exec "$@"'


def cluster_privileges() -> str:
    """``"admin"`` (root or the capabilities), ``"userns"`` (must re-run in a user namespace), or ClusterError."""
    if namespaces.has_admin_capabilities():
        return "admin"
    if os.environ.get(USERNS_VARIABLE):
        raise ClusterError(
            "inside MailRail's user namespace without CAP_NET_ADMIN/CAP_SYS_ADMIN: "
            "the kernel refused the capabilities there"
        )
    problem = namespaces.user_namespaces_work()
    if problem is None:
        return "userns"
    raise ClusterError(
        "a virtual cluster needs root (or CAP_NET_ADMIN and CAP_SYS_ADMIN), or a kernel that lets "
        f"unprivileged users create user namespaces, and neither is available here (unshare: "
        f"{problem}); the shared-memory comparison still runs: mailrail compare --cluster off"
    )


def rerun_without_root(mailrail_args: Sequence[str]) -> int | None:
    """Without root: run the command again in a user namespace and return its exit status; with root, None."""
    if cluster_privileges() == "userns":
        return rerun_in_user_namespace(mailrail_args)
    return None


def rerun_in_user_namespace(mailrail_args: Sequence[str]) -> int:
    """Run ``python -m mailrail_tools ARGS`` again inside new user, mount, network and PID namespaces.

    The network namespace is the command's own: ``ip netns add`` returns to it after making a
    node, which it may only do in a namespace this user namespace owns.
    """
    argv = [
        namespaces.tool("unshare"),
        "--user",
        "--map-root-user",
        "--mount",
        "--propagation",
        "private",
        "--net",
        "--pid",
        "--fork",
        "--mount-proc",
        "--kill-child",
        "--",
        "/bin/sh",
        "-c",
        _PREPARE,
        "sh",
        sys.executable,
        "-m",
        "mailrail_tools",
        *mailrail_args,
    ]
    print(
        "mailrail: no root here; building the virtual cluster inside a user namespace (no memory caps there)",
        file=sys.stderr,
        flush=True,
    )
    try:
        return subprocess.run(argv, env=dict(os.environ, **{USERNS_VARIABLE: "1"})).returncode
    except KeyboardInterrupt:
        return 130
