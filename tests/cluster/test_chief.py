"""tf_embedding.cluster.chief: a chief program that lost a worker finishes and exits
(tools/lost_worker.py on a loopback cluster), and `run` ends the process with its program's
status."""

import os
import subprocess
import sys

import pytest

from helpers.paths import REPO_ROOT

pytestmark = [pytest.mark.cluster, pytest.mark.slow]


def test_a_chief_that_lost_a_worker_finishes_every_step_and_exits():
    # Without tf_embedding.cluster.chief.run the chief hangs at exit in ClusterCoordinator.__del__:
    # --timeout turns that into status "hung" and exit status 1.
    result = subprocess.run(
        [sys.executable, os.path.join(REPO_ROOT, "tools", "lost_worker.py"), "--trials", "1",
         "--steps", "100", "--timeout", "180"],
        capture_output=True, text=True, timeout=400)
    assert result.returncode == 0, result.stdout + result.stderr[-5000:]
    row = result.stdout.splitlines()[-1].split()
    status, scheduled, completed, first_block, last_block = (row[2], *map(float, row[4:8]))
    assert status == "0"
    # Every scheduled step ran to the end, and its update reached both blocks, at least once
    # (the lost worker's step runs again on the other: TF's at-least-once rule).
    assert scheduled == 100
    assert min(completed, first_block, last_block) >= 100


@pytest.mark.parametrize("body, status, stderr", [
    ("return None", 0, ""),
    ("return 3", 3, ""),
    ("sys.exit(4)", 4, ""),
    ("sys.exit('no data')", 1, "no data"),
    ("raise ValueError('bad table')", 1, "ValueError: bad table"),
    ("raise KeyboardInterrupt", 130, ""),
])
def test_run_exits_with_the_programs_status(body, status, stderr):
    program = ("import sys\nimport tf_embedding.cluster.chief\n"
               f"def main():\n    print('output kept', flush=False)\n    {body}\n"
               "tf_embedding.cluster.chief.run(main)\n")
    result = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == status
    assert result.stdout == "output kept\n"
    assert stderr in result.stderr
