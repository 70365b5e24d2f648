"""The manager's process (dispatcher.py) starts lean, ends with its parent, and says why it could not start. It is a
new interpreter that imports the plugin's package and TaskVine: neither the parent's main module again
(multiprocessing's spawn ran Snakemake's) nor Snakemake (a library's manager names Snakemake's command line for the
library without importing it) — 0.4 s that came before the manager listened, and so before any worker was asked
for. Real TaskVine managers, on loopback."""

from __future__ import annotations

import contextlib
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

from snakemake_executor_plugin_taskvine import dispatcher as dispatcher_module
from snakemake_executor_plugin_taskvine.dispatcher import Dispatcher, DispatcherError

pytestmark = pytest.mark.sandbox

# A parent of a dispatcher: the main module of its process, which notes each time it is imported (as __main__, or as
# another process's __mp_main__). It starts the dispatcher of a library's manager, whose process writes the Snakemake
# modules it imported when it ends, prints that process's pid and then stops it, or waits to be killed.
PARENT = """
import os, sys, time
with open(sys.argv[1], "a") as marks:
    marks.write(f"{__name__} {os.getpid()}\\n")
if __name__ == "__main__":
    from pathlib import Path
    from snakemake_executor_plugin_taskvine import dispatcher as d, taskvine
    d.CHILD += (
        "; import json; snakemake = sorted(m for m in sys.modules if m.split('.')[0] == 'snakemake')"
        "; open(%r, 'w').write(json.dumps(snakemake))" % sys.argv[2]
    )
    private = taskvine.private_directory()
    dispatcher = d.Dispatcher(dict(
        port=0, name=None, password_file=taskvine.write_password_file(private), ssl=False,
        run_info_dir=Path(sys.argv[3]), scheduler="files", library=True, library_preload=(),
        secrets_dir=private, environment=None, credential_files={},
    ))
    dispatcher.start()
    print(dispatcher._process.pid, flush=True)
    if sys.argv[4] == "stop":
        dispatcher.stop()
        taskvine.remove_private_directory(private)
    else:
        time.sleep(600)
"""


@contextlib.contextmanager
def parent_of_a_dispatcher(tmp_path, then: str):
    """(the parent's process, its manager's process) of PARENT run with THEN ("stop" or "wait"); the parent is
    killed afterwards if it still runs."""
    script = tmp_path / "parent.py"
    script.write_text(textwrap.dedent(PARENT))
    argv = [str(tmp_path / "marks"), str(tmp_path / "child-modules"), str(tmp_path / "run-info"), then]
    parent = subprocess.Popen([sys.executable, str(script), *argv], stdout=subprocess.PIPE, text=True)
    try:
        line = parent.stdout.readline()
        assert line, f"the parent did not start its dispatcher (exit {parent.wait()})"
        yield parent, psutil.Process(int(line))
    finally:
        parent.stdout.close()
        if parent.poll() is None:
            parent.kill()
        parent.wait()


def ended(process: psutil.Process) -> bool:
    try:
        return process.status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def test_the_manager_process_imports_neither_its_parents_main_module_nor_snakemake(tmp_path):
    with parent_of_a_dispatcher(tmp_path, "stop") as (parent, child):
        assert parent.wait(60) == 0
    assert child.pid != parent.pid
    marks = (tmp_path / "marks").read_text().splitlines()
    assert marks == [f"__main__ {parent.pid}"], f"the parent's main module ran in another process too: {marks}"
    assert json.loads((tmp_path / "child-modules").read_text()) == [], "the manager's process imported Snakemake"
    # The library it installed imports Snakemake's command line first (test_library runs jobs through it).
    scripts = list((tmp_path / "run-info").rglob("library_code.py"))  # (in the manager's cache directory)
    assert len(scripts) == 1, f"the library's script: {scripts}"
    assert "import snakemake.cli" in scripts[0].read_text().splitlines()


def test_the_manager_process_ends_when_its_parent_is_killed(tmp_path):
    with parent_of_a_dispatcher(tmp_path, "wait") as (parent, child):
        parent.send_signal(signal.SIGKILL)
        parent.wait()
        try:
            child.wait(15)  # it sees the end of its requests between two waits of a second
        except psutil.TimeoutExpired:
            child.kill()
            pytest.fail("the manager's process outlived its parent by 15 s")


def plain(tmp_path, port: int = 0) -> Dispatcher:
    return Dispatcher(dict(port=port, password_file=None, run_info_dir=tmp_path / "run-info", library=False))


def test_a_manager_that_cannot_listen_is_an_error_naming_why(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        dispatcher = plain(tmp_path, port)
        with pytest.raises(DispatcherError, match=f"could not start: .*{port}"):
            dispatcher.start()
    assert dispatcher._process.returncode is not None


def test_a_manager_process_that_ends_before_it_starts_is_an_error_naming_how(tmp_path, monkeypatch):
    monkeypatch.setattr(dispatcher_module, "CHILD", "import sys; sys.exit(3)")
    with pytest.raises(DispatcherError, match=r"could not start: its process ended \(exit status 3\)"):
        plain(tmp_path).start()


def test_once_it_listens_the_manager_writes_to_a_file_not_to_its_parents_output(tmp_path):
    """So that a caller reading Snakemake's output through a pipe has its end when Snakemake exits, not when a manager
    left to end by itself (a run that keeps its workers) does; and a manager that dies says where its output is."""
    dispatcher = plain(tmp_path)
    dispatcher.start()
    try:
        child = dispatcher._process.pid
        log = tmp_path / "run-info" / dispatcher_module.OUTPUT
        assert wait_for(lambda: all(os.readlink(f"/proc/{child}/fd/{fd}") == str(log) for fd in (1, 2)), 10), [
            os.readlink(f"/proc/{child}/fd/{fd}") for fd in (1, 2)
        ]
        os.kill(child, signal.SIGKILL)
        dispatcher._process.wait()
        dispatcher.collect()
        assert dispatcher.error == (
            f"the TaskVine manager process ended unexpectedly (killed by SIGKILL); what it wrote is in {log}"
        )
    finally:
        dispatcher.stop()


def wait_for(check, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.05)
    return check()
