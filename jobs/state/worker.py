"""A state worker: `python -m jobs.state.worker`, started by the driver's `StatePool`.

Reads its config, then groups, on stdin; writes each group's result on stdout
(jobs/state/step.py `serve`). Ends when stdin ends.
"""

from __future__ import annotations

import os
import signal
import sys

from jobs.state.step import serve


def main() -> None:
    """Serve groups; anything else written to stdout (a plugin's print) goes to stderr.

    Ctrl-C and SIGTERM are the driver's to act on (a supervisor may signal every process of
    the job at once): it finishes its batch, then ends the worker's input, which ends it.
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    answers = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    serve(sys.stdin.buffer, answers)


if __name__ == "__main__":
    main()
