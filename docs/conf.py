"""Sphinx configuration of MailRail's documentation (``make docs``; warnings are errors).

Pages are MyST Markdown; the API reference comes from the docstrings (autodoc,
which reads the reST roles the code's docstrings use).  The knob, counter and
command tables are written at build time from the code that defines them
(:mod:`mailrail.config`, :mod:`mailrail.counters`, :mod:`mailrail_tools.cli`), into
``_generated/``, so the documentation cannot drift from it.
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(__file__))

import mailrail
from generate import write_generated_pages

project = "MailRail"
author = "the MailRail developers"
copyright = "2026, the MailRail developers"
release = version = mailrail.__version__

extensions = ["myst_parser", "sphinx.ext.autodoc", "sphinx.ext.viewcode"]
myst_enable_extensions = ["colon_fence", "deflist"]
myst_heading_anchors = 3
# "--" stays two hyphens (not an en dash) in prose, so a flag copied from a page works; quotes stay straight.
smartquotes = False
source_suffix = {".md": "markdown"}
exclude_patterns = ["_build", "_generated"]  # _generated: included by the pages, not pages
html_theme = "furo"
html_title = f"MailRail {release}"
html_static_path = ["_static"]
html_css_files = ["mailrail.css"]
autodoc_member_order = "bysource"
autodoc_typehints = "description"
autodoc_default_options = {"members": True, "show-inheritance": True}

write_generated_pages(os.path.join(os.path.dirname(__file__), "_generated"))
