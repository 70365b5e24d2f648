"""The manager's process (dispatcher.py) starts lean and ends with its parent. It is a new interpreter that imports the
dispatcher module alone: neither the parent's main module (multiprocessing's spawn ran Snakemake's again) nor Snakemake
(a library's manager names Snakemake's command line for the library without importing it) — 0.4 s that came before
the manager listened, and so before any worker was asked for. Real TaskVine managers, on loopback."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time

import psutil
import pytest

pytestmark = pytest.mark.sandbox

# A parent of a dispatcher: the main module of its process, which notes each time it is imported (as __main__ or as
# another process's __mp_main__), starts a dispatcher of a library's manager, prints its process's pid and waits.
PARENT = """
import os, sys, time
with open(sys.argv[1], "a") as marks:
    marks.write(f"{__name__} {os.getpid()}\\n")
if __name__ == "__main__":
    from pathlib import Path
    from snakemake_executor_plugin_taskvine import taskvine
    from snakemake_executor_plugin_taskvine.dispatcher import Dispatcher
    private = taskvine.private_directory()
    dispatcher = Dispatcher(dict(
        port=0, name=None, password_file=taskvine.write_password_file(private), ssl=False,
        run_info_dir=Path(sys.argv[2]), scheduler="files", library=True, library_preload=(),
        secrets_dir=private, environment=None, credential_files={},
    ))
    port = dispatcher.start()
    print(dispatcher._process.pid, port, flush=True)
    if sys.argv[3] == "stop":
        dispatcher.stop()
        taskvine.remove_private_directory(private)
    else:
        time.sleep(600)
"""


def start_parent(tmp_path, then: str) -> tuple[subprocess.Popen, int]:
    script = tmp_path / "parent.py"
    script.write_text(textwrap.dedent(PARENT))
    parent = subprocess.Popen(
        [sys.executable, str(script), str(tmp_path / "marks"), str(tmp_path / "run-info"), then],
        stdout=subprocess.PIPE,
        text=True,
    )
    line = parent.stdout.readline()
    assert line, f"the parent did not start its dispatcher (exit {parent.wait()})"
    return parent, int(line.split()[0])


def ended(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def test_the_manager_process_does_not_run_its_parents_main_module_again(tmp_path):
    parent, child = start_parent(tmp_path, "stop")
    assert parent.wait(60) == 0
    marks = (tmp_path / "marks").read_text().splitlines()
    assert marks == [f"__main__ {parent.pid}"], f"the parent's main module ran in another process too: {marks}"
    assert child != parent.pid and ended(child)


def test_a_library_manager_does_not_import_snakemake(tmp_path):
    """The library it installs still imports Snakemake's command line first (test_library runs jobs through it)."""
    probe = textwrap.dedent(
        """
        import json, sys
        from pathlib import Path
        from snakemake_executor_plugin_taskvine import taskvine
        private = taskvine.private_directory()
        manager = taskvine.Manager(port=0, password_file=taskvine.write_password_file(private),
                                   run_info_dir=Path(sys.argv[1]), library=True)
        print(json.dumps(sorted(m for m in sys.modules if m.split(".")[0] == "snakemake")))
        manager.close()
        taskvine.remove_private_directory(private)
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", probe, str(tmp_path / "run-info")], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout.splitlines()[-1]) == [], "the manager's process imported Snakemake"
    scripts = list((tmp_path / "run-info").rglob("library_code.py"))  # (in the manager's cache directory)
    assert len(scripts) == 1, f"the library's script: {scripts}"
    assert "import snakemake.cli" in scripts[0].read_text().splitlines()


def test_the_manager_process_ends_when_its_parent_is_killed(tmp_path):
    parent, child = start_parent(tmp_path, "wait")
    os.kill(parent.pid, signal.SIGKILL)
    parent.wait()
    deadline = time.monotonic() + 15  # it sees the end of its requests between two waits of a second
    while time.monotonic() < deadline and not ended(child):
        time.sleep(0.2)
    gone = ended(child)
    if not gone:
        os.kill(child, signal.SIGKILL)
    assert gone, "the manager's process outlived its parent by 15 s"


def test_a_manager_that_cannot_listen_is_an_error_naming_why(tmp_path):
    from snakemake_executor_plugin_taskvine.dispatcher import Dispatcher, DispatcherError

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        dispatcher = Dispatcher(
            dict(port=port, password_file=None, run_info_dir=tmp_path / "run-info", library=False),
        )
        with pytest.raises(DispatcherError, match="could not start") as raised:
            dispatcher.start()
    assert str(port) in str(raised.value)
    assert ended(dispatcher._process.pid)
