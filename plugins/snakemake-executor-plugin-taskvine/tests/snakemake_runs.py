"""Running Snakemake with the TaskVine executor the way a user does (the `snakemake` command line), and the small
workflows and process checks the plugin tests share."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import psutil

# Workers and jobs small enough for the sandbox's VM: workers of 1,000 MB of memory and disk, jobs of 100 MB and 10 MB.
SMALL = (
    "--taskvine-worker-memory-mb",
    "1000",
    "--taskvine-worker-disk-mb",
    "1000",
    "--default-resources",
    "mem_mb=100",
    "disk_mb=10",
)


def condor_jobs(condor_env: dict, constraint: str) -> list[str]:
    """'cluster.proc status' of each HTCondor job of any user that matches CONSTRAINT (a ClassAd expression)."""
    done = subprocess.run(
        ["condor_q", "-allusers", "-constraint", constraint, "-af:j", "JobStatus"],
        capture_output=True,
        text=True,
        env=condor_env,
        timeout=60,
        check=True,
    )
    return done.stdout.splitlines()


def condor_jobs_under(condor_env: dict, root: str) -> list[str]:
    """'cluster.proc status' of each HTCondor job whose working directory is under ROOT (a factory's scratch
    directory: its workers)."""
    return condor_jobs(condor_env, f'regexp("^{root}", Iwd)')


class Workflow:
    """A workflow directory with a Snakefile, run with `snakemake --executor taskvine`."""

    def __init__(self, root: Path, snakefile: str):
        self.root = root
        root.mkdir(parents=True, exist_ok=True)
        (root / "Snakefile").write_text(textwrap.dedent(snakefile))

    def command(self, *args: str) -> list[str]:
        return [sys.executable, "-m", "snakemake", "--executor", "taskvine", "--jobs", "4", *args]

    def run(self, *args: str, timeout: float = 300, check: bool = False) -> subprocess.CompletedProcess:
        """Run snakemake with ARGS. One still running after TIMEOUT seconds is interrupted the way a user would
        (SIGINT: the plugin stops its workers) and the test fails with what it printed and TaskVine's last events."""
        proc = subprocess.Popen(
            self.command(*args), cwd=self.root, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        try:
            stdout, stderr = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGINT)
            try:
                stdout, stderr = proc.communicate(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                stdout, stderr = proc.communicate()
            raise AssertionError(
                f"snakemake still running after {timeout} s:\n{stderr[-4000:]}\n"
                f"TaskVine's last events:\n{self.taskvine_events()}"
            ) from None
        done = subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)
        if check and done.returncode != 0:
            raise AssertionError(f"snakemake failed ({done.returncode}):\n{done.stderr[-4000:]}")
        return done

    def taskvine_events(self, lines: int = 40) -> str:
        """The last LINES of the manager's transaction logs of this workflow's runs."""
        logs = sorted(self.root.glob(".snakemake/taskvine/**/transactions"))
        return "\n".join(line for log in logs for line in log.read_text(errors="replace").splitlines()[-lines:])

    def popen(self, *args: str) -> subprocess.Popen:
        return subprocess.Popen(
            self.command(*args), cwd=self.root, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )


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


def workers_of(pid: int) -> list[psutil.Process]:
    """The vine_worker processes that the run with PID started (through its factory or directly)."""
    try:
        descendants = psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []
    found = []
    for proc in descendants:
        try:
            if proc.name() == "vine_worker":
                found.append(proc)
        except psutil.NoSuchProcess:
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
