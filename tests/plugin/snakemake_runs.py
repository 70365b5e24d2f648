"""Running Snakemake with the TaskVine executor the way a user does (the `snakemake` command line), and the small
workflows and process checks the plugin tests share."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import psutil


class Workflow:
    """A workflow directory with a Snakefile, run with `snakemake --executor taskvine`."""

    def __init__(self, root: Path, snakefile: str):
        self.root = root
        root.mkdir(parents=True, exist_ok=True)
        (root / "Snakefile").write_text(textwrap.dedent(snakefile))

    def run(self, *args: str, timeout: float = 300, check: bool = False) -> subprocess.CompletedProcess:
        cmd = [sys.executable, "-m", "snakemake", "--executor", "taskvine", "--jobs", "4", *args]
        done = subprocess.run(cmd, cwd=self.root, capture_output=True, text=True, timeout=timeout)
        if check and done.returncode != 0:
            raise AssertionError(f"snakemake failed ({done.returncode}):\n{done.stderr[-4000:]}")
        return done

    def popen(self, *args: str) -> subprocess.Popen:
        cmd = [sys.executable, "-m", "snakemake", "--executor", "taskvine", "--jobs", "4", *args]
        return subprocess.Popen(cmd, cwd=self.root, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def slow_snakefile(shell: str, n: int = 4) -> str:
    """A workflow of N jobs `out/{i}.txt`, each running SHELL (which must write {output})."""
    return f"""
rule all:
    input: expand("out/{{i}}.txt", i=range({n}))

rule slow:
    output: "out/{{i}}.txt"
    shell: "{shell}"
"""


def alive(proc: psutil.Process) -> bool:
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def workers_under(directory) -> list[psutil.Process]:
    """The vine_worker processes that the run's factory started (the factory runs in DIRECTORY)."""
    found = []
    for proc in psutil.process_iter(["name"]):
        try:
            if proc.info["name"] == "vine_worker" and any(
                parent.cwd().startswith(str(directory)) for parent in proc.parents()
            ):
                found.append(proc)
        except (psutil.Error, OSError):  # gone, a zombie, or not ours
            continue
    return found


def busy(worker: psutil.Process) -> bool:
    try:
        return any(child.name() == "sleep" for child in worker.children(recursive=True))
    except psutil.NoSuchProcess:
        return False


def kill_all(procs) -> None:
    """SIGKILL each of PROCS that is still there."""
    for proc in procs:
        try:
            proc.kill()
        except psutil.NoSuchProcess:
            pass
