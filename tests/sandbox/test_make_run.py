"""``make run CMD='...'`` hands the command to the shell exactly as typed: make must not expand ``$`` in it (it did,
when CMD reached the recipe through make's exported environment: ``echo $HOME`` printed ``OME``, and ``$(...)``
was evaluated by make itself).

The run target's own recipe is exercised, with its sandbox parts stubbed out: ``-o sandbox`` keeps make from
building the sandbox, and WITH_SERVICES names a stand-in for sandbox/with-services.sh that runs the command here
(we already are inside the sandbox, and entering it needs root) after checking that the recipe asked to keep the
services up. What is left is make's handling of CMD and the recipe's ``bash -c``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
MAKE = shutil.which("make")

pytestmark = pytest.mark.skipif(
    MAKE is None, reason="GNU make is not installed here (in the sandbox: add `make` to sandbox/packages.txt)"
)

COMMANDS = [
    "echo $HOME",
    "echo ${HOME}/x $USER",
    'echo "$(echo command substitution) $((6 * 7))"',
    "echo `echo backquotes`",
    "echo 'single $HOME' \"double $HOME\"",
    'printf "[%s]" a\\ b "c  d" \'e  f\'',
    "echo $$ | wc -w",
    "echo a # a comment",
    'echo "two\nlines"',
    "echo one; echo two && false || echo three",
]


# with-services.sh --keep-services COMMAND...: make run holds the session lock and leaves the services up.
STAND_IN = """#!/bin/sh
[ "$1" = --keep-services ] || { echo "make run did not pass --keep-services: $1" >&2; exit 97; }
shift
exec "$@"
"""


def make_run(cmd: str | None, tmp_path: Path) -> subprocess.CompletedProcess:
    stand_in = tmp_path / "with-services.sh"
    stand_in.write_text(STAND_IN)
    stand_in.chmod(0o755)
    args = [MAKE, "--no-print-directory", "-o", "sandbox", "run", f"WITH_SERVICES={stand_in}"]
    # A clean environment of make's own variables: the suite itself may run under a make.
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MAKELEVEL", "MFLAGS", "CMD")}
    return subprocess.run(
        args + ([f"CMD={cmd}"] if cmd is not None else []), cwd=REPO, env=env, capture_output=True, text=True
    )


@pytest.mark.parametrize("cmd", COMMANDS)
def test_command_reaches_the_shell_unchanged(cmd, tmp_path):
    expected = subprocess.run(["bash", "-c", cmd], capture_output=True, text=True)
    done = make_run(cmd, tmp_path)
    assert (done.stdout, done.returncode) == (expected.stdout, expected.returncode), done.stderr


def test_make_functions_in_the_command_are_not_evaluated_by_make(tmp_path):
    # `$(shell ...)` and `$(error ...)` are make's functions; in CMD they are the shell's business (here: a command
    # named `shell`, which does not exist). Make evaluating them would create the file or stop with "boom".
    marker = tmp_path / "evaluated-by-make"
    done = make_run(f"echo $(shell touch {marker}) $(error boom) end", tmp_path)
    assert not marker.exists()
    assert "boom" not in done.stderr and done.stdout == "end\n", (done.stdout, done.stderr)


def test_a_failing_command_fails_the_target_and_no_command_is_a_usage_error(tmp_path):
    failed = make_run("echo before; exit 3", tmp_path)
    assert failed.returncode != 0 and failed.stdout == "before\n" and "Error 3" in failed.stderr
    usage = make_run(None, tmp_path)
    assert usage.returncode != 0 and "usage: make run CMD=" in usage.stderr
