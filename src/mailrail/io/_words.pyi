"""Lines split into words, compiled (``_words.pyx``; the reference is ``words.split_words_arrow``)."""

from typing import Any

import numpy as np
import numpy.typing as npt

def split_words(
    offsets: npt.NDArray[Any],
    data: npt.NDArray[np.uint8],
    validity: npt.NDArray[np.uint8],
    first_bit: int,
    wide: bool = False,
) -> tuple[npt.NDArray[Any], npt.NDArray[np.uint8]]:
    """The words of the lines packed in *offsets* and *data*, as their offsets and bytes."""
