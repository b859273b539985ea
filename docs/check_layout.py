"""The built documentation as a reader's browser lays it out: headless Chromium at 1,200 px.

``make docs-check`` runs it after ``make docs``.  For every page it loads a copy of the page with a
script that measures, once laid out: code blocks wider than the text column (a reader would scroll
sideways), and figures shown at less than ``MIN_FIGURE_SCALE`` of their pixels (text in them too small
to read).  It writes screenshots of a few pages to ``docs/_build/screenshots`` to look at, prints one
line per problem and exits 1 if there is any.

Usage: ``python docs/check_layout.py [SITE_DIR] [--width PX]``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

#: The window a reader on a laptop has.
WIDTH = 1200
#: A figure drawn at N pixels and shown at fewer than this fraction of N has text too small to read.
MIN_FIGURE_SCALE = 0.7
#: Pages whose screenshot is kept (the front page, the first steps, a page of long commands).
SCREENSHOT_PAGES = ("index", "getting-started", "cli")
#: What the injected script measures: it writes its findings, as JSON, into an element the DOM dump shows.
MEASURE = """
<script>
window.addEventListener("load", () => {
  const found = [];
  for (const pre of document.querySelectorAll("article pre")) {
    if (pre.scrollWidth > pre.clientWidth + 1) {
      found.push({kind: "code", text: pre.textContent.split("\\n")[0].slice(0, 80),
                  width: pre.scrollWidth, shown: pre.clientWidth});
    }
  }
  for (const img of document.querySelectorAll("article img")) {
    if (img.naturalWidth && img.clientWidth < img.naturalWidth * SCALE) {
      found.push({kind: "figure", text: img.getAttribute("src"), width: img.naturalWidth, shown: img.clientWidth});
    }
  }
  const out = document.createElement("pre");
  out.id = "layout-check";
  out.textContent = JSON.stringify(found);
  document.body.appendChild(out);
});
</script>
"""


def chromium() -> str | None:
    """Debian's ``chromium`` (or another Chromium or Chrome on the PATH)."""
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    return None


def _browser(binary: str, *args: str) -> subprocess.CompletedProcess[str]:
    argv = [binary, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", *args]
    return subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)


def measure(binary: str, page: str, width: int) -> list[dict]:
    """What is wrong with *page*'s layout at *width* pixels (see :data:`MEASURE`)."""
    with open(page, encoding="utf-8") as source:
        html = source.read()
    script = MEASURE.replace("SCALE", str(MIN_FIGURE_SCALE))
    # beside the page, so its relative links (styles, images) resolve
    with tempfile.NamedTemporaryFile("w", suffix=".html", dir=os.path.dirname(page), delete=False) as copy:
        copy.write(html.replace("</body>", script + "</body>"))
    try:
        done = _browser(
            binary, f"--window-size={width},900", "--virtual-time-budget=5000", "--dump-dom", f"file://{copy.name}"
        )
    finally:
        os.unlink(copy.name)
    found = re.search(r'<pre id="layout-check">(.*?)</pre>', done.stdout, re.S)
    if found is None:
        raise RuntimeError(f"{page}: the browser did not lay the page out: {done.stderr[-500:]}")
    return json.loads(
        found.group(1).replace("&quot;", '"').replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("site", nargs="?", default=os.path.join(os.path.dirname(__file__), "_build", "html"))
    parser.add_argument("--width", type=int, default=WIDTH)
    args = parser.parse_args(argv)
    binary = chromium()
    if binary is None:
        print("check_layout: no Chromium here (Debian: apt-get install chromium)", file=sys.stderr)
        return 2
    pages = sorted(
        name
        for name in os.listdir(args.site)
        if name.endswith(".html") and name not in ("genindex.html", "search.html", "py-modindex.html")
    )
    problems = 0
    for name in pages:
        for item in measure(binary, os.path.join(args.site, name), args.width):
            problems += 1
            print(f"{name}: {item['kind']} {item['text']!r} is {item['width']} px wide, shown in {item['shown']} px")
    shots = os.path.join(os.path.dirname(os.path.abspath(args.site)), "screenshots")
    os.makedirs(shots, exist_ok=True)
    for page in SCREENSHOT_PAGES:
        target = os.path.join(shots, f"{page}.png")
        _browser(
            binary,
            f"--window-size={args.width},2000",
            f"--screenshot={target}",
            f"file://{os.path.abspath(os.path.join(args.site, page + '.html'))}",
        )
    print(f"check_layout: {len(pages)} pages at {args.width} px, {problems} problem(s); screenshots in {shots}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
