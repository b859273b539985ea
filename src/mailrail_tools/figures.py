"""matplotlib for the tools' figures, on the Agg backend (no display needed) and only when a figure is drawn.

matplotlib is the optional ``plot`` extra: :func:`missing` says why no figure can be drawn without
it, and :func:`pyplot` imports it on demand, so a command that draws nothing never loads it.
"""

from __future__ import annotations

from typing import Any


def missing() -> str | None:
    """Why no figure can be drawn (matplotlib, the ``plot`` extra, is not installed), or None."""
    try:
        import matplotlib  # noqa: F401  (optional and heavy: only probed here)
    except ImportError as error:
        return f"no figure: {error} (pip install 'mailrail[plot]')"
    return None


def pyplot() -> Any:
    """matplotlib.pyplot on the Agg backend (imported on demand: optional, and slow to import)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save(figure: Any, path: str, dpi: float | None = None) -> str:
    """Write *figure* to *path* (its directory made if missing) and close it; returns *path*."""
    import os

    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    figure.savefig(path, dpi=dpi)
    pyplot().close(figure)
    return path
