"""Distributed containers on one rail: the programming model irregular codes are written in.

Each container partitions its keys over the ranks (by a hash of the key's bytes, or in blocks for
:class:`Array`) and is driven by numpy batches: asynchronous operations (``add``, ``insert``,
``reduce``, ``visit``, ``union`` ...) are records sent to the owners through the rail's
:attr:`~mailrail.rail.MailRail.channels`, under its credit flow control; ``rail.barrier()``
completes them all.  Collective operations (``count``, ``get``, ``top``, ``size``, ``find``,
``gather`` ...) are called by every rank and see every asynchronous operation issued before them.
Any number of containers, Coalescers and calls share one rail.  The containers page of the docs
maps each one to YGM's.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

from .partition import BlockPartitioner, HashPartitioner, hash_keys

if TYPE_CHECKING:
    from .array import Array
    from .bag import Bag
    from .counting_set import CountingSet
    from .disjoint_set import DisjointSet
    from .map import Map
    from .set import Set

__all__ = [
    "Array",
    "Bag",
    "CountingSet",
    "DisjointSet",
    "Map",
    "Set",
    "HashPartitioner",
    "BlockPartitioner",
    "hash_keys",
]

_MODULES = {
    "Array": "array",
    "Bag": "bag",
    "CountingSet": "counting_set",
    "DisjointSet": "disjoint_set",
    "Map": "map",
    "Set": "set",
}


def __getattr__(name: str) -> Any:
    # One module per container, imported when first named: a program that uses a CountingSet loads no other.
    module = _MODULES.get(name)
    if module is None:
        raise AttributeError(f"module 'mailrail.containers' has no attribute {name!r}")
    return getattr(import_module(f".{module}", __name__), name)
