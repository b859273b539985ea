"""Builds the optional compiled modules; MailRail falls back to Python (and MPI atomics) without them.

Each sits beside its Python half: mailrail.flow._atomics (C): CPU atomics for node credit pools
(flow/node_memory.py); mailrail.flow._ledger (Cython): flow/'s credit accounting; mailrail._protocol
(Cython): protocol.py's Endpoint; mailrail.transport._compiled (Cython): the compiled transport
(transport/compiled.py resolves its MPI).  None needs MPI headers.
"""

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext


class OptionalBuildExt(build_ext):
    def run(self):
        try:
            super().run()
        except Exception as error:  # no compiler: the portable MPI path still works
            print(f"warning: compiled modules not built ({error}); MailRail uses its Python fallbacks")

    def build_extension(self, ext):
        try:
            super().build_extension(ext)
        except Exception as error:
            print(f"warning: {ext.name} not built ({error}); MailRail uses its Python fallback")


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
        Extension("mailrail.transport._compiled", ["src/mailrail/transport/_compiled.pyx"], optional=True),
    ]
    return built + cythonize(cython_modules, include_path=["src"], compiler_directives={"language_level": 3})


setup(ext_modules=extensions(), cmdclass={"build_ext": OptionalBuildExt})
