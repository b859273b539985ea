"""Builds the optional compiled modules; MailRail falls back to Python (and MPI atomics) without them.

mailrail._atomics (C): CPU atomics for node credit pools.  mailrail._engine and mailrail._ledger
(Cython): the compiled transport and its credit ledger.  None needs MPI headers (see
mailrail.transport.compiled).
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
    built = [Extension("mailrail._atomics", ["src/mailrail/_atomics.c"], optional=True)]
    try:
        from Cython.Build import cythonize
    except ImportError:  # Cython is a build requirement; without it only the Python transport runs
        print("warning: Cython not found; the compiled transport is not built")
        return built
    cython_modules = [Extension("mailrail._ledger", ["src/mailrail/_ledger.pyx"], optional=True),
                      Extension("mailrail._engine", ["src/mailrail/_engine.pyx"], optional=True)]
    return built + cythonize(cython_modules, include_path=["src"], compiler_directives={"language_level": 3})


setup(ext_modules=extensions(), cmdclass={"build_ext": OptionalBuildExt})
