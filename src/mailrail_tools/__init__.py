"""MailRail's tools: the ``mailrail`` command and what it runs, apart from the library (:mod:`mailrail`).

- :mod:`.cli`: the command (``mailrail``, also ``python -m mailrail_tools``): the dispatcher, ``mailrail run``,
  ``info`` and ``cluster``;
- :mod:`.jobs`: the job runner: how a job starts, is bounded, ends as a whole and says why it failed;
- :mod:`.cluster`: virtual clusters (nodes as network namespaces on one machine);
- :mod:`.bench`, :mod:`.apps`, :mod:`.replay`: the benchmarks, the applications and the trace tools;
- beside them, what the tools share: :mod:`.flags` (range-checked flags, one-line usage errors), :mod:`.output`
  (tables and JSON), :mod:`.figures` (matplotlib on demand), :mod:`.memory`, :mod:`.incast` (the adversarial
  incast's plan), :mod:`.alltoallv` (the bulk-synchronous peer's exchange), :mod:`.mpi_facts`.

The tools import the library; the library imports no tool (``make lint``: lint-imports).  The model of MailRail
at scale is a distribution of its own (``mailrail-simulate``, ``simulate/`` in the repository).
"""
