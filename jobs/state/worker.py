"""A state worker: `python -m jobs.state.worker`, started by the driver's `StatePool`.

Reads its config, then groups, on stdin; writes each group's result on stdout
(jobs/state/step.py `serve`). Ends when stdin ends.
"""

from __future__ import annotations

import os
import sys

from jobs.state.step import serve


def main() -> None:
    """Serve groups; anything else written to stdout (a plugin's print) goes to stderr."""
    answers = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    serve(sys.stdin.buffer, answers)


if __name__ == "__main__":
    main()
