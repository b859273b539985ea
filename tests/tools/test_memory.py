"""The tools' memory readings: a peak resident set restarted on request, and the refusal said."""

from __future__ import annotations

import builtins

import numpy as np

from mailrail_tools import memory


def test_a_reset_peak_restarts_from_what_the_process_holds():
    block = np.ones(64 << 20, dtype=np.uint8)  # 64 MiB touched: the peak grows by about that
    high = memory.peak_rss_bytes()
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
