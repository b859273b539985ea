"""What the tools' JSON documents say of the MPI at hand (mpi4py imported on demand: parsing flags starts none)."""

from __future__ import annotations


def mpi_library() -> str:
    """The first line of the MPI library's version (Open MPI's ends in a NUL byte, dropped here)."""
    from mailrail._mpi import MPI

    return MPI.Get_library_version().replace("\x00", "").strip().splitlines()[0]
