"""The experiments that measure the model's parameters on this machine, each an MPI job of its own: what a
receive costs as MPI's unexpected-message queue grows (:mod:`.matching`), and what idle ranks cost a busy one
on shared cores (:mod:`.idle`)."""
