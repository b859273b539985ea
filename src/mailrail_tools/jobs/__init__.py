"""The job runner: how MailRail starts an MPI job, bounds it, ends it as a whole and says why it failed.

Every command that starts a job (``mailrail run``, ``mailrail replay --cluster``, ``compare`` and
``sweep``'s runs) goes through its one entry point, :func:`mailrail_tools.jobs.job.run_job`.  Its modules:

- :mod:`.run`: :class:`~mailrail_tools.jobs.job.Job` (ranks, program, where, time-out, environment) and
  :func:`~mailrail_tools.jobs.job.run_job`, which chooses the launcher and bounds the job;
- :mod:`.launchers`: which MPI runs here (a PyPI wheel or a site MPI), its ``mpiexec``, ``srun`` inside a
  Slurm allocation, and the environment a job gets;
- :mod:`.launch`: :func:`~mailrail_tools.jobs.bounded.run_bounded`, a launcher run so that no process of the job
  outlives it;
- :mod:`.control`: a job ends as a whole: subreaper, parent-death signal, the job's mark, the watchdog of
  a SIGKILLed owner, termination signals;
- :mod:`.rank_runner`: the rank runner, what every rank of ``mailrail run -- PROGRAM`` runs
  (``python -m mailrail_tools.jobs.rank_runner``);
- :mod:`.failure`: a failing rank ends its job (its traceback once, rank-prefixed, then ``MPI_Abort``) and
  records why; the library's :class:`~mailrail.MailRail` uses it, so it imports nothing else of the
  job runner;
- :mod:`.report`: the one line a job's runner says when the job failed;
- :mod:`.launcher_messages`: the MPI's own messages told apart from the ranks' output (no MPI).

Importing this package imports none of them: a rank that imports the library loads :mod:`.failure` only.
"""
