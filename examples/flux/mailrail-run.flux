#!/bin/sh
# A MailRail program as a Flux batch job (UNTESTED: no Flux in MailRail's CI; the Slurm templates in
# ../slurm are the tested ones):
#
#     flux batch examples/flux/mailrail-run.flux python app.py [ARGS...]
#
# Flux starts the ranks itself with `flux run`, through PMI (Flux's PMI-1 server: MPICH and Open MPI
# built with Flux support read it; the PyPI Open MPI wheel needs `-o pmi=pmix` where the Flux
# installation has the pmix shell plugin).  `mailrail run` has no Flux launcher: call flux run directly.
#
#FLUX: --job-name=mailrail
#FLUX: --nodes=2
#FLUX: --ntasks=4
#FLUX: --time-limit=10m
#FLUX: --output=mailrail-{{id}}.out
set -eu
exec flux run --ntasks=4 --nodes=2 "${PYTHON:-python3}" -m mpi4py "$@"
