"""Every command in tools/ answers --help: its usage, and no crash (argparse formats each help
string with %, so a bare % in one breaks --help for the whole command). Each runs in a process
of its own."""

import glob
import os
import subprocess
import sys

import pytest

from helpers.paths import REPO_ROOT

pytestmark = pytest.mark.integration


def _is_command(path: str) -> bool:
    with open(path, encoding="utf-8") as f:
        return '__name__ == "__main__"' in f.read()


# The scripts, and the lab (tools/netlab, run as a directory).
COMMANDS = sorted(path for path in glob.glob(os.path.join(REPO_ROOT, "tools", "*.py"))
                  if _is_command(path)) + [os.path.join(REPO_ROOT, "tools", "netlab")]


def test_the_tools_have_commands():
    assert len(COMMANDS) >= 10


@pytest.mark.parametrize("path", COMMANDS, ids=os.path.basename)
def test_help_prints_usage(path):
    result = subprocess.run([sys.executable, path, "--help"], capture_output=True, text=True,
                            cwd=REPO_ROOT, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("usage: "), result.stdout
