"""The tools' memory readings: a peak resident set restarted on request, and the refusal said."""

from __future__ import annotations

import builtins

import numpy as np

from mailrail_tools import memory


def test_a_reset_peak_restarts_from_what_the_process_holds():
    # Reset first: a peak this process reached before the test (another test's data) would hide the block's.
    assert memory.reset_peak_rss() is True
    before = memory.peak_rss_bytes()
    block = np.ones(64 << 20, dtype=np.uint8)  # 64 MiB touched (mapped on its own, unmapped when freed)
    high = memory.peak_rss_bytes()
    assert high > before + (48 << 20)
    del block
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
