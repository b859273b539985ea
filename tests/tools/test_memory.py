"""The tools' memory readings: a peak resident set restarted on request, and the refusal said."""

from __future__ import annotations

import builtins
import mmap

import numpy as np

from mailrail_tools import memory


def test_a_reset_peak_restarts_from_what_the_process_holds():
    # Reset first: a peak this process reached before the test (another test's data) would hide the block's.
    assert memory.reset_peak_rss() is True
    before = memory.peak_rss_bytes()
    # A mapping of its own, not a numpy array: malloc may serve a large array from freed heap pages still resident
    # (a worker that ran other tests holds hundreds of MiB), and the resident set would not grow.
    block = mmap.mmap(-1, 64 << 20, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    np.frombuffer(block, dtype=np.uint8)[:] = 1  # every page touched
    high = memory.peak_rss_bytes()
    assert high > before + (48 << 20), (before, high)
    block.close()
    assert memory.reset_peak_rss() is True
    assert memory.peak_rss_bytes() < high - (32 << 20)


def test_a_kernel_that_refuses_the_reset_is_reported(monkeypatch):
    real_open = builtins.open

    def refusing(path, *args, **kwargs):
        if str(path) == "/proc/self/clear_refs":
            raise PermissionError(13, "Permission denied", path)
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(builtins, "open", refusing)
    assert memory.reset_peak_rss() is False
