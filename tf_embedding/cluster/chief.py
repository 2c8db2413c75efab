"""Ending the chief of a parameter-server cluster (the process running `ClusterCoordinator`).

Once a worker is lost, TensorFlow's coordinator keeps a recovery thread waiting for that worker
to come back (for up to an hour), holding a lock that `ClusterCoordinator.__del__` takes. The
other workers run the lost worker's steps and `join()` returns, but a chief script that then
returns hangs at exit in that destructor. These helpers end the process without TensorFlow's
teardown, after flushing what the program wrote:

    import tf_embedding.cluster.chief

    def main() -> int:
        ...  # connect, train, coordinator.join(), save
        return 0

    if __name__ == "__main__":
        tf_embedding.cluster.chief.run(main)

Nothing of the cluster's state is lost by skipping the teardown: the tables live on the ps
tasks, and checkpoints are written when `save` / `write` returns (call `sync()` first on an
async checkpoint). `atexit` handlers do not run.
"""

import logging
import os
import sys
import traceback
from typing import Callable, NoReturn


def exit_chief(status: int = 0) -> NoReturn:
    """Flushes logging, stdout and stderr, then ends the process with `status`, skipping the
    coordinator's destructor (and every other exit handler)."""
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)  # pylint: disable=protected-access


def run(main: Callable[[], int | None]) -> NoReturn:
    """Runs the chief program `main` and ends the process by `exit_chief`: with `main`'s status
    (0 for None), a `SystemExit`'s code, 130 on Ctrl-C, or 1 after printing the traceback of
    any other exception."""
    try:
        status = main()
    except SystemExit as e:
        status = e.code
    except KeyboardInterrupt:
        status = 130
    except BaseException:  # pylint: disable=broad-except
        traceback.print_exc()
        status = 1
    if status is None:
        status = 0
    elif not isinstance(status, int):  # sys.exit("message") prints the message, exits 1
        print(status, file=sys.stderr)
        status = 1
    exit_chief(status)
