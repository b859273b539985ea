"""The reductions containers apply: the named ones, and every binary ufunc of numpy's namespace, by code.

A reduction travels to its owner as a small code, its place in :data:`UFUNCS` (every rank builds the same list
from the same numpy): an :class:`~mailrail.containers.array.Array` update carries it in the top bits of its
target, a :class:`~mailrail.containers.map.Map` reduction in a field of its record.  A binary ufunc outside
numpy's namespace has no code (a Map sends it by reference, in calls).
"""

from __future__ import annotations

import numpy as np

__all__ = ["REDUCTIONS", "UFUNCS", "code_of", "ufunc_of"]

#: The named reductions of ``reduce(..., op)`` and the ufunc each one is.
REDUCTIONS: dict[str, np.ufunc] = {"add": np.add, "min": np.minimum, "max": np.maximum}


def ufunc_of(op: str | np.ufunc, where: str) -> np.ufunc:
    """The binary ufunc *op* names (``"add"``, ``"min"``, ``"max"``, or a numpy ufunc such as ``np.bitwise_or``)."""
    if isinstance(op, np.ufunc):
        if op.nin != 2 or op.nout != 1:
            raise ValueError(f"{where}: op {op.__name__} is not a binary ufunc (it takes {op.nin} inputs)")
        return op
    if isinstance(op, str) and op in REDUCTIONS:
        return REDUCTIONS[op]
    raise ValueError(f"{where}: unknown op {op!r}: use 'add', 'min', 'max' or a binary numpy ufunc")


def _binary_ufuncs() -> list[np.ufunc]:
    """Every reduction a record can name: add, min, max, then numpy's other binary ufuncs by name.

    Every rank builds the same list from the same numpy, so a ufunc travels as its position in it.
    """
    named = list(REDUCTIONS.values())
    # By the ufunc's own name: aliases (np.atan2 is np.arctan2) count once.  From numpy's namespace as it is:
    # getattr over dir(np) would import numpy's lazy submodules (f2py, testing...), a tenth of a second.
    others = {
        value.__name__: value
        for value in list(vars(np).values())
        if isinstance(value, np.ufunc)
        and value.nin == 2
        and value.nout == 1
        and value.signature is None  # matmul and the like reduce nothing
    }
    return named + [others[name] for name in sorted(others) if others[name] not in named]


#: Every reduction by code: ``UFUNCS[code]`` (fewer than 2**15, so a code fits any record's field).
UFUNCS: list[np.ufunc] = _binary_ufuncs()
_CODES: dict[np.ufunc, int] = {ufunc: code for code, ufunc in enumerate(UFUNCS)}


def code_of(ufunc: np.ufunc) -> int | None:
    """*ufunc*'s code (its place in :data:`UFUNCS`), or None for a ufunc outside numpy's namespace."""
    return _CODES.get(ufunc)
