"""The ``specdec`` console script: Ctrl-C is handled from the first instruction on.

Importing ``specdec`` (NumPy, the C++ core) takes a moment; a Ctrl-C then would otherwise end in
Python's traceback. This launcher, which imports nothing heavy, installs a SIGINT handler that
prints one line and exits 130 before it imports the CLI (SIGTERM: 143, as the CLI does).
"""

import os
import signal
import sys


def _interrupted(signum, _frame):
    try:
        sys.stdout.flush()
    except Exception:  # noqa: BLE001 - a closed pipe must not hide the message
        pass
    term = signum == signal.SIGTERM
    os.write(2, b"specdec: terminated\n" if term else b"specdec: interrupted\n")
    os._exit(143 if term else 130)


def main() -> int:
    previous = signal.signal(signal.SIGINT, _interrupted)
    previous_term = signal.signal(signal.SIGTERM, _interrupted)
    from specdec.cli import main as cli_main  # the slow part
    signal.signal(signal.SIGINT, previous)  # the CLI handles Ctrl-C and SIGTERM from here on
    signal.signal(signal.SIGTERM, previous_term)
    return cli_main()
