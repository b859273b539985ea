"""The trace tools: the commands that work on a recorded or generated trace (tools side, above the library).

- ``mailrail replay TRACE_DIR`` (:mod:`.replay`): replay a trace over MailRail and verify delivery;
  :mod:`.packing` cuts its messages into datagrams, :mod:`.spool` parks a JSON trace's decoded events.
- ``mailrail trace stats TRACE_DIR`` (:mod:`.stats`): what a trace holds, and a heatmap.
- ``mailrail trace generate OUT_DIR`` (:mod:`.generate`): synthetic traces in YGM's binary format.

They read and write traces through :mod:`mailrail.trace`, the library package, which imports none of them.
"""
