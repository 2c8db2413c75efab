"""Running a test script in fresh Python processes, for settings a process fixes once: TF's
thread pools, the op library's ISA choice and huge-page switch (read on first use)."""

import os
import subprocess
import sys
from typing import Mapping, Sequence


def last_printed_words(script: str,
                       runs: Sequence[tuple[Sequence[str], Mapping[str, str]]]) -> list[str]:
    """Runs `script` once per (arguments, extra environment), all at once, and returns the last
    word each run printed. A run that fails fails the test with its stderr."""
    processes = [subprocess.Popen([sys.executable, "-c", script, *arguments],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                  env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", **environment))
                 for arguments, environment in runs]
    words = []
    for process in processes:
        stdout, stderr = process.communicate()
        assert process.returncode == 0, stderr
        words.append(stdout.split()[-1])
    return words


def fresh_process_output(script: str) -> str:
    """What `script` printed, run in a fresh Python process (one that has imported nothing);
    a failure fails the test with its stderr."""
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                            env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"))
    assert result.returncode == 0, result.stderr
    return result.stdout
