"""Virtual clusters: nodes as network namespaces on one machine, joined by TCP links (``mailrail cluster``).

:class:`VirtualCluster` (a context manager) builds one and runs MPI jobs on it;
:class:`ClusterSpec` and :class:`Link` describe its shape.  See the documentation page
"The virtual cluster".
"""

from .spec import ClusterSpec, Link
from .virtual import ClusterJob, VirtualCluster

__all__ = ["ClusterSpec", "Link", "VirtualCluster", "ClusterJob"]
