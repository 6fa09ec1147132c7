"""``python -m specdec``.

With ``-m``, Python puts the working directory first on ``sys.path``, so a module planted there
(a ``matplotlib.py``, or the module a ``"module:Class"`` custom proposer names) would be imported
by a later import. That entry is dropped here, before the command runs. ``specdec`` itself and
what its ``__init__`` imports (NumPy, the C++ core) were found before this file runs: in a
directory you do not trust, run the ``specdec`` launcher or ``python -I -m specdec`` (or ``-P``),
which never put the directory on the path.
"""

import os
import sys


def _drop_working_directory() -> None:
    """Removes the entry ``-m`` prepends (the working directory), unless -P / -I left it out."""
    if getattr(sys.flags, "safe_path", False) or not sys.path:
        return
    if sys.path[0] in ("", os.curdir) or os.path.abspath(sys.path[0]) == os.getcwd():
        del sys.path[0]


_drop_working_directory()

from specdec.cli import main  # noqa: E402 - after the path is fixed

sys.exit(main())
