"""Snakemake job → TaskVine task: the command, the resources, and (without a shared filesystem) the files to ship.

Resources: ``threads`` → cores, ``mem_mb`` → memory, ``disk_mb`` → disk, ``runtime`` (minutes) → time limit, and
the job resource ``taskvine_features`` (comma-separated) → features the worker must have, and ``taskvine_prefer`` →
features the worker should have (the dispatcher drops them when the job has waited too long while others idle).

With a shared filesystem the task runs in the workflow directory. Without one, the task runs in its worker
sandbox: the workflow's sources (Snakefile, included files, scripts, config files) and the job's local inputs are
sent as TaskVine files under their paths relative to the workflow directory, and its outputs and logs come back.
Remote inputs (``root://``, ``https://`` ...) are read by the job itself.
"""

from __future__ import annotations

import os
import shlex
import uuid
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Iterable, Mapping

from snakemake_interface_common.exceptions import WorkflowError
from snakemake_interface_executor_plugins.jobs import JobExecutorInterface

from .taskvine import TaskSpec

# What a job's process runs instead of `python -m snakemake ARGS`: the same main, and then the timers that the job's
# scheduler armed are cancelled. It arms one of --max-jobs-per-timespan's span (1 s) after each scheduling round,
# and Python waits for such threads before it exits: ~1 s of a short job's ~2.3 s, for nothing.
JOB_MAIN = """import sys, threading, snakemake.cli
try:
    snakemake.cli.main(sys.argv[1:])
finally:
    for thread in threading.enumerate():
        if isinstance(thread, threading.Timer):
            thread.cancel()
"""


def task_tag(job: JobExecutorInterface) -> str:
    """A key unique within the run that names the job's rule, so a user can find a job's task in TaskVine's logs."""
    return f"{job.name}-{job.jobid}-{uuid.uuid4().hex[:8]}"


def comma_separated(value) -> list[str]:
    """'a, b,,c' → ['a', 'b', 'c']; None or '' → []."""
    return [f.strip() for f in str(value or "").split(",") if f.strip()]


def features(job: JobExecutorInterface, resource: str = "taskvine_features") -> list[str]:
    return comma_separated(job.resources.get(resource, ""))


def _int_resource(job: JobExecutorInterface, name: str) -> int:
    value = job.resources.get(name, 0)
    try:
        number = int(value or 0)
    except (TypeError, ValueError) as e:
        raise WorkflowError(f"rule {job.name}: resource {name}={value!r} is not a whole number") from e
    if number < 0:
        raise WorkflowError(f"rule {job.name}: resource {name}={number} is negative")
    return number


def _inside(path: str, workdir: str) -> str | None:
    """PATH relative to WORKDIR, or None where it lies outside."""
    rel = os.path.relpath(os.path.abspath(path), workdir)
    return None if rel.startswith(".." + os.sep) or rel == ".." or os.path.isabs(rel) else rel


def relative_name(path: str, workdir: str, job: JobExecutorInterface, what: str) -> str:
    """PATH as a name inside the task's sandbox: relative to the workflow directory, never above it."""
    rel = _inside(path, workdir)
    if rel is None:
        raise WorkflowError(
            f"rule {job.name}: {what} {path} lies outside the workflow directory {workdir}, so it cannot be sent "
            "to a TaskVine worker without a shared filesystem. Move it under the workflow directory, or run with "
            "a shared filesystem (drop --shared-fs-usage none)."
        )
    return rel


@dataclass(frozen=True)
class Sources:
    """The workflow's source files as a job without a shared filesystem is sent them: {absolute path: sandbox name}
    of those that are files (NAMES), and those that lie outside the workflow directory (OUTSIDE, which no job can be
    sent). The same for every job of a run: the executor makes it once (``Sources.of``), not once a job (the
    workflow's ~500 sources, each stat'ed and named: a few milliseconds a job)."""

    names: Mapping[str, str] = field(default_factory=dict)
    outside: tuple[str, ...] = ()

    @classmethod
    def of(cls, paths: Iterable[str], workdir: str) -> Sources:
        """The sources among PATHS that are files, named relative to WORKDIR (each stat'ed once)."""
        names, outside = {}, []
        for path in paths:
            if os.path.isfile(path):
                rel = _inside(path, workdir)
                if rel is None:
                    outside.append(path)
                else:
                    names[os.path.abspath(path)] = rel
        return cls(MappingProxyType(names), tuple(outside))


def is_remote(path: str) -> bool:
    return "://" in str(path)


def shipped_files(
    job: JobExecutorInterface, sources: Sources, workdir: str
) -> tuple[list[tuple[str, str]], list[tuple[str, str]], list[tuple[str, str]]]:
    """(sources, inputs, outputs) of a job run without a shared filesystem, as (local path, sandbox name) pairs. A
    group job's inputs are its members' inputs not made inside the group (and not sources); its outputs are all its
    members' outputs."""
    members = list(job.jobs) if job.is_group() else [job]
    produced = {os.path.abspath(str(p)) for member in members for p in member.output}
    shipped_sources = sources.names
    for path in sources.outside:
        relative_name(path, workdir, job, "workflow source")  # says where it lies and what to do
    inputs: dict[str, str] = {}
    for path in (p for member in members for p in member.input):
        path = str(path)
        if is_remote(path) or os.path.abspath(path) in produced or os.path.abspath(path) in shipped_sources:
            continue  # read by the job itself, made inside this (group) job, or shipped as a source
        if os.path.isdir(path):
            raise WorkflowError(
                f"rule {job.name}: input {path} is a directory; without a shared filesystem the TaskVine executor "
                "sends files only. Declare the files inside it as inputs, or use a shared filesystem."
            )
        inputs[os.path.abspath(path)] = relative_name(path, workdir, job, "input")
    outputs = {
        os.path.abspath(str(p)): relative_name(str(p), workdir, job, "output")
        for member in members
        for p in [*member.output, *member.log]
        if not is_remote(str(p))
    }
    return sorted(shipped_sources.items()), sorted(inputs.items()), sorted(outputs.items())


def job_task(
    job: JobExecutorInterface,
    command: str,
    *,
    shared_fs: bool,
    workdir: str,
    retries: int,
    sources: Sources = Sources(),
    function: bool = False,
    call_memory_mb: int = 0,
    env: dict[str, str] | None = None,
) -> TaskSpec:
    """The TaskVine task that runs JOB's COMMAND (its ``python -m snakemake ...`` line), as a process of its own or
    as a call of the workers' library (FUNCTION). A call takes one function slot (a core) and nothing limits its
    memory, so only a job of one core whose mem_mb is at most CALL_MEMORY_MB (a slot's share of a worker's memory;
    0: unknown, not checked) is sent as a call; the others run as processes with their cores and memory. ENV: the
    job's environment variables, sent with the task (not on its command line)."""
    cores = max(1, int(job.resources.get("_cores", job.threads) or 1))
    memory_mb = _int_resource(job, "mem_mb")
    function = function and call_fits(cores, memory_mb, call_memory_mb)
    shipped: list[tuple[str, str]] = []
    inputs: list[tuple[str, str]] = []
    outputs: list[tuple[str, str]] = []
    if not shared_fs:
        shipped, inputs, outputs = shipped_files(job, sources, workdir)
    elif not function:  # a library call is given the directory instead
        command = f"cd {shlex.quote(workdir)} && {command}"
    if not function:
        command = command.replace(" -m snakemake ", f" -c {shlex.quote(JOB_MAIN)} ", 1)
    runtime_min = _int_resource(job, "runtime")
    return TaskSpec(
        command=command,
        tag=task_tag(job),
        category=job.name,
        cores=cores,
        memory_mb=memory_mb,
        disk_mb=_int_resource(job, "disk_mb"),
        time_max_s=runtime_min * 60,
        features=features(job),
        preferred=features(job, "taskvine_prefer"),
        retries=retries,
        sources=shipped,
        inputs=inputs,
        outputs=outputs,
        function=function,
        directory=workdir if shared_fs and function else "",
        env=dict(env or {}),
    )


def call_fits(cores: int, memory_mb: int, call_memory_mb: int) -> bool:
    """Whether a job of CORES and MEMORY_MB may run as a library call, whose slot is one core and CALL_MEMORY_MB
    (0: unknown)."""
    return cores <= 1 and (call_memory_mb <= 0 or memory_mb <= call_memory_mb)
