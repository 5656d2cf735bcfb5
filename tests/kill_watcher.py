"""SIGKILLs process PID as soon as PATH exists: `python tests/kill_watcher.py PATH PID`.

A separate process, so that nothing (such as the GIL of the process it watches) stands between
seeing PATH and the kill: the kill tests use it to land inside a checkpoint write, whose
`_temp` directory exists for milliseconds. It exits without a kill if PID is no longer its
parent (the watched process ended otherwise).
"""

import os
import signal
import sys


def main(path, pid):
    while not os.path.exists(path):  # Busy: a sleep would let a short write slip by.
        if os.getppid() != pid:
            return
    os.kill(pid, signal.SIGKILL)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
