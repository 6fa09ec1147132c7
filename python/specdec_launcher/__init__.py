"""The ``specdec`` console script: Ctrl-C is handled from the first instruction on.

Importing ``specdec`` (NumPy, the C++ core) takes a moment; a Ctrl-C then would otherwise end in
Python's traceback. This launcher, which imports nothing heavy, installs a SIGINT handler that
prints one line and exits 130 before it imports the CLI.
"""

import os
import signal
import sys


def _interrupted(_signum, _frame):
    try:
        sys.stdout.flush()
    except Exception:  # noqa: BLE001 - a closed pipe must not hide the message
        pass
    os.write(2, b"specdec: interrupted\n")
    os._exit(130)


def main() -> int:
    previous = signal.signal(signal.SIGINT, _interrupted)
    from specdec.cli import main as cli_main  # the slow part
    signal.signal(signal.SIGINT, previous)  # the CLI handles Ctrl-C from here on
    return cli_main()
