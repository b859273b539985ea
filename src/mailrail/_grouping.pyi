"""Type stubs for the compiled grouping by rank (see _grouping.pyx): channels.py's counting sort in C."""

from typing import Any

import numpy as np
import numpy.typing as npt

def group_by_rank(
    dests: npt.NDArray[np.int64],
    data: npt.NDArray[np.uint8],
    record_size: int,
    counts: npt.NDArray[np.int64],
    out: npt.NDArray[Any],
) -> int:
    """Count each rank's records into *counts*; unless one rank has them all, copy them into *out* grouped by rank."""
