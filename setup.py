"""Builds the optional compiled helpers; MailRail falls back to Python (and MPI atomics) without them.

mailrail._atomics: CPU atomics for node credit pools.  mailrail._engine: the per-message path and its
credit ledger.
Neither needs MPI headers (see mailrail.fastpath).
"""

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext


class OptionalBuildExt(build_ext):
    def run(self):
        try:
            super().run()
        except Exception as error:  # no compiler: the portable MPI path still works
            print(f"warning: compiled helpers not built ({error}); MailRail uses its Python fallbacks")

    def build_extension(self, ext):
        try:
            super().build_extension(ext)
        except Exception as error:
            print(f"warning: {ext.name} not built ({error}); MailRail uses its Python fallback")


setup(
    ext_modules=[Extension("mailrail._atomics", ["src/mailrail/_atomics.c"], optional=True),
                 Extension("mailrail._engine", ["src/mailrail/_engine.c", "src/mailrail/_ledger.c"],
                           depends=["src/mailrail/_ledger.h"], optional=True)],
    cmdclass={"build_ext": OptionalBuildExt},
)
