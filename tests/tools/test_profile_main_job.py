"""tools/profile_main_job.py profiles a short `tf-embedding train` and splits its steps' time by
part of the model: the step's large parts show up, and the shares add up."""

import os
import re
import subprocess
import sys

import pytest

from helpers.paths import REPO_ROOT

sys.path.insert(0, os.path.join(REPO_ROOT, "tools"))
import profile_main_job  # pylint: disable=wrong-import-position

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def test_the_profile_splits_a_step_into_the_jobs_parts():
    result = subprocess.run(
        # The timed window (steps 500 to 1000, between the first two checkpoints) and the
        # profile (from the second checkpoint, for 2 s) fall inside the 2000 steps (3-20 ms each
        # on 2-core machines); the job stops with a checkpoint: no evaluation, no export.
        # (Timed from the process's start, it missed the steps on a slower machine, whose setup
        # took longer.)
        [sys.executable, os.path.join(REPO_ROOT, "tools", "profile_main_job.py"), "--start", "0",
         "--seconds", "2", "--steps", "100000", "--stop-at-step", "2000", "--batch-size", "512"],
        capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-5000:]
    assert re.search(r"^\d+ examples/s over 500 steps, [\d.]+ CPU µs per example$",
                     result.stdout, re.M), result.stdout
    steps = re.search(r"^(\d+) steps profiled, ([\d.]+) ms wall per step$", result.stdout, re.M)
    assert steps and int(steps.group(1)) > 0, result.stdout
    parts = {name: (float(ms), int(share)) for name, ms, share in re.findall(
        r"^\| ([a-z ]+) \| ([\d.]+) \| (\d+)% \|$", result.stdout, re.M)}
    # The step's large parts are found by their ops, and every listed part is one of the
    # tool's. The table lists only the parts whose ops took time in the profile: the metrics'
    # few scalar updates (~0.05 ms a step) were missing from one loaded CI run's profile.
    assert {"embedding", "dense model", "dense optimizer",
            "input pipeline"} <= set(parts) <= set(profile_main_job.PARTS), result.stdout
    # Rounded shares of one total.
    assert 100 - len(parts) <= sum(share for _, share in parts.values()) <= 100 + len(parts)
