"""The CountingSet sender's hot-key lookup, compiled (``_hot.pyx``; its reference is ``hot.split_hot_numpy``)."""

import numpy as np
import numpy.typing as npt

def split_hot(
    words: npt.NDArray[np.uint64],
    table: npt.NDArray[np.uint64],
    shift: int,
    held: npt.NDArray[np.float64],
    cold: npt.NDArray[np.int64],
) -> int:
    """Count the batch's hot keys into *held*, write the positions of the others into *cold*; their number."""
