"""Builds the optional compiled modules; MailRail falls back to Python (and MPI atomics) without them.

Each sits beside its Python half: mailrail.flow._atomics (C): CPU atomics for node credit pools
(flow/node_memory.py); mailrail.flow._ledger (Cython): flow/'s credit accounting; mailrail._protocol
(Cython): protocol.py's Endpoint; mailrail._grouping (Cython): channels.py's records grouped by rank; mailrail._futures
(Cython): futures.py's Future, untracked by the garbage collector;
mailrail.transport._compiled (Cython): the compiled transport
(transport/compiled.py resolves its MPI); mailrail.containers._hot (Cython): the CountingSet sender's hot-key
lookup (containers/hot.py); mailrail.containers._varkeys (Cython): the hash and the hash table of variable-size
keys (containers/varkeys.py); mailrail.containers._table (Cython): one-word keys' probes of the containers' hash
table (containers/table.py); mailrail.io._words (Cython): lines split into words (io/words.py).  None needs MPI
headers.
"""

import glob
import os

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext
from setuptools.modified import newer_group


class OptionalBuildExt(build_ext):
    def finalize_options(self):
        super().finalize_options()
        if not self.parallel:  # the modules compile independently: one at a time per core
            self.parallel = os.cpu_count() or 1

    def run(self):
        try:
            super().run()
        except Exception as error:  # no compiler: the portable MPI path still works
            print(f"warning: compiled modules not built ({error}); MailRail uses its Python fallbacks")

    def build_extension(self, ext):
        if self.reuse_source_tree_build(ext):
            return
        try:
            super().build_extension(ext)
        except Exception as error:
            print(f"warning: {ext.name} not built ({error}); MailRail uses its Python fallback")

    def reuse_source_tree_build(self, ext) -> bool:
        """Copies the module an editable install of this checkout already compiled and left in the source tree
        (setuptools puts it there), while it is newer than every source it was built from: `make test` installs
        the checkout into four environments of one Python, and each would compile the same modules again
        (CONTRIBUTING.md: the time it saves).  A build from
        the sdist has no such copy and compiles."""
        package, _, _ = ext.name.rpartition(".")
        package_dir = self.get_finalized_command("build_py").get_package_dir(package)
        compiled = os.path.join(package_dir, os.path.basename(self.get_ext_filename(ext.name)))
        if not os.path.exists(compiled) or newer_group(self.written_sources(ext), compiled):
            return False
        target = self.get_ext_fullpath(ext.name)
        if os.path.abspath(target) != os.path.abspath(compiled):  # (an in-place build: nothing to copy)
            self.mkpath(os.path.dirname(target))
            self.copy_file(compiled, target)
        print(f"{ext.name}: reusing {compiled} (newer than its sources)")
        return True

    @staticmethod
    def written_sources(ext) -> list[str]:
        """What *ext* is compiled from as written: its .pyx rather than the C Cython generates from it (which
        Cython writes again whenever the .pxd files it ships are newer, as they are in every fresh build
        environment), every .pxd of the package, and this file."""
        sources = []
        for source in ext.sources:
            stem, _ = os.path.splitext(source)
            sources.append(stem + ".pyx" if os.path.exists(stem + ".pyx") else source)
        return [*sources, *ext.depends, *glob.glob("src/**/*.pxd", recursive=True), "setup.py"]


def extensions() -> list[Extension]:
    built = [Extension("mailrail.flow._atomics", ["src/mailrail/flow/_atomics.c"], optional=True)]
    try:
        from Cython.Build import cythonize
    except ImportError:  # Cython is a build requirement; without it only the Python transport runs
        print("warning: Cython not found; the compiled transport is not built")
        return built
    cython_modules = [
        Extension("mailrail.flow._ledger", ["src/mailrail/flow/_ledger.pyx"], optional=True),
        Extension("mailrail._protocol", ["src/mailrail/_protocol.pyx"], optional=True),
        Extension("mailrail._grouping", ["src/mailrail/_grouping.pyx"], optional=True),
        Extension("mailrail._futures", ["src/mailrail/_futures.pyx"], optional=True),
        Extension("mailrail.transport._compiled", ["src/mailrail/transport/_compiled.pyx"], optional=True),
        Extension("mailrail.containers._hot", ["src/mailrail/containers/_hot.pyx"], optional=True),
        Extension("mailrail.containers._varkeys", ["src/mailrail/containers/_varkeys.pyx"], optional=True),
        Extension("mailrail.containers._table", ["src/mailrail/containers/_table.pyx"], optional=True),
        Extension("mailrail.io._words", ["src/mailrail/io/_words.pyx"], optional=True),
    ]
    return built + cythonize(cython_modules, include_path=["src"], compiler_directives={"language_level": 3})


setup(ext_modules=extensions(), cmdclass={"build_ext": OptionalBuildExt})
