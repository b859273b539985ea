"""CPU atomics on shared memory (``_atomics.c``): 64-bit counters at ``address + 8 * index``."""

def try_take(address: int, index: int) -> bool:
    """Decrement the counter if it is positive; True if a unit was taken."""

def take_up_to(address: int, index: int, most: int) -> int:
    """Take min(counter, *most*) atomically, never below zero; returns what was taken."""

def fetch_add(address: int, index: int, amount: int) -> int:
    """Add *amount* atomically; returns the old value."""

def load(address: int, index: int) -> int:
    """Read the counter atomically."""
