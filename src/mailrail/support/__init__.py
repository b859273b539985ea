"""The tools' support: what the tools (bench, apps, replay, simulate, cluster and the ``mailrail`` command) share,
apart from any one tool.

- :mod:`.flags`: range-checked argparse types, one-line usage errors, MailRail's knobs as flags;
- :mod:`.output`: tables for people, JSON documents for programs;
- :mod:`.mpi`: the MPI library's name for those documents;
- :mod:`.memory`: a node's memory need checked before a run, a process's peak resident set;
- :mod:`.exchange`: the ``Alltoallv`` exchange, the bulk-synchronous peer of the applications;
- :mod:`.incast`: the adversarial incast's victims and send plans (the benchmark's and the model's);
- :mod:`.figures`: matplotlib on demand (the optional ``plot`` extra).

A tool imports these and the library; nothing here imports a tool, and the library imports nothing here.
"""
