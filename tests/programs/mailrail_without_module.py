"""``python mailrail_without_module.py MODULE[,MODULE...] -- MAILRAIL ARGS``: the mailrail command as if
MODULE (an optional dependency) were not installed, without uninstalling it (``sys.modules[name] = None``
makes every import of it raise ImportError)."""

import sys

hidden, separator, *command = sys.argv[1:]
assert separator == "--", "usage: mailrail_without_module.py MODULE[,MODULE...] -- MAILRAIL ARGS"
for name in list(sys.modules):
    if any(name == top or name.startswith(top + ".") for top in hidden.split(",")):
        del sys.modules[name]
sys.modules.update(dict.fromkeys(hidden.split(",")))

from mailrail_tools.cli import main  # noqa: E402 (after the module is hidden)

sys.exit(main(command))
