"""Workers for the run: ``local`` — a TaskVine factory that starts ``vine_worker`` processes on this machine;
``condor`` — a factory that submits them as HTCondor jobs; ``none`` — somebody else starts them. Whatever this module
starts it stops, and each factory removes the workers it made.

Worker groups (``--taskvine-worker-groups FILE``, a YAML file whose ``worker_groups`` list names each group with its
features, HTCondor requirements and sizes; parsed and checked by ``workergroups.py``) — e.g. one per rack. Every
worker of a group carries the group's features, and its tasks see the group's name in
``SNAKEMAKE_TASKVINE_WORKER_GROUP``. With ``condor`` each group has its own
factory, all started at once. A factory counts every worker connected to the manager, its own or not, so a group's
worker that is lost is replaced only while the manager has fewer workers than that group's maximum; and a factory
started after other groups' workers have connected would start none. Local groups therefore do not use factories:
the plugin starts each group's ``max_workers`` workers itself.

Group names, features and HTCondor requirements, which reach shell commands, are checked before anything starts
(``workergroups.py``). Workers get only the allowed environment (``--taskvine-worker-env``).

The software the tasks run in (``--taskvine-environment FILE``, or the groups file's ``taskvine_environment`` key): a
packed environment (a tarball with ``bin/run_in_env`` at its top: cctools' poncho packages) that goes with every
task, so that workers need nothing installed — also workers this plugin did not start. ``environment_file`` finds
it and checks it before anything starts.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import shutil
import socket
import subprocess
import tarfile
from pathlib import Path

import yaml
from snakemake_interface_common.exceptions import WorkflowError

from . import workergroups
from .kept import Kept, Record, fingerprint
from .tasks import comma_separated
from .taskvine import (
    CONDOR_CLIENT_ENV,
    CONDOR_DEFAULT_MB,
    WORKER_IDLE_S,
    Adopted,
    CondorWorker,
    Factory,
    Worker,
    allowed_environment,
    catalog_address,
    env_patterns,
    start_time,
    stop_all,
)
from .workergroups import WorkerGroup

WORKER_MODES = ("local", "condor", "none")
CONDOR_CHECK_TIMEOUT_S = 20
GROUP_ENV = "SNAKEMAKE_TASKVINE_WORKER_GROUP"
# The key of a groups file (a site config) that names the packed environment, and what TaskVine runs from it.
ENVIRONMENT_KEY = "taskvine_environment"
RUN_IN_ENV = "bin/run_in_env"


def worker_groups(settings) -> tuple[list[WorkerGroup], list[str]]:
    """(groups, problems). Without a groups file, one group made of the plugin's own settings; with one, its
    non-empty ``worker_groups`` list (workergroups.parse), sizes not given there taken from the settings."""
    common = comma_separated(settings.worker_features)
    defaults = dict(
        min_workers=settings.min_workers,
        max_workers=settings.max_workers,
        cores=settings.worker_cores,
        memory_mb=settings.worker_memory_mb,
        disk_mb=settings.worker_disk_mb,
        condor_requirements=settings.condor_requirements or "",
    )
    if not settings.worker_groups:
        return [WorkerGroup(name="workers", features=tuple(common), **defaults)], []
    where = f"--taskvine-worker-groups {settings.worker_groups}"
    try:
        raw = yaml.safe_load(Path(settings.worker_groups).read_text())
    except OSError as e:
        return [], [f"{where}: cannot be read ({e.strerror})"]
    except yaml.YAMLError as e:
        return [], [f"{where}: not valid YAML ({e})"]
    items = raw.get(workergroups.KEY) if isinstance(raw, dict) else None
    if not isinstance(items, list) or not items:
        return [], [f"{where}: needs a non-empty list under the key {workergroups.KEY} (each with at least a name)"]
    return workergroups.parse(items, where, defaults, common)


def check_condor_reachable() -> None:
    """Fail now, with what to do, if no HTCondor schedd answers (rather than waiting forever for workers)."""
    if shutil.which("condor_q") is None:
        raise WorkflowError(
            "--taskvine-workers condor: HTCondor's condor_q is not on PATH. Install the HTCondor client tools "
            "(or run on the pool's access point), or use --taskvine-workers local."
        )
    try:
        probe = subprocess.run(["condor_q", "-totals"], capture_output=True, text=True, timeout=CONDOR_CHECK_TIMEOUT_S)
    except subprocess.TimeoutExpired as e:
        raise WorkflowError(
            f"--taskvine-workers condor: condor_q did not answer within {CONDOR_CHECK_TIMEOUT_S} s; is the "
            "HTCondor schedd up? Check CONDOR_CONFIG, or use --taskvine-workers local."
        ) from e
    if probe.returncode != 0:
        said = (probe.stderr or probe.stdout).strip().splitlines()[-3:]
        raise WorkflowError(
            "--taskvine-workers condor: no HTCondor schedd is reachable (condor_q -totals said: "
            f"{' / '.join(said) or 'nothing'}). Start HTCondor or point CONDOR_CONFIG at the pool, "
            "or use --taskvine-workers local."
        )


def call_memory_mb(settings) -> int:
    """The memory (MB) of one function slot of the workers this plugin starts (a worker's memory over its cores; the
    smallest over the groups); 0 when unknown (someone else's workers, or a worker whose memory TaskVine decides)."""
    if settings.workers == "none":
        return 0
    groups, found = worker_groups(settings)
    if found or not groups or any(g.memory_mb <= 0 for g in groups):
        return 0
    return min(g.memory_mb // g.cores for g in groups)


def run_groups(settings) -> list[WorkerGroup] | None:
    """The worker groups of the workers this plugin starts (parsed once, at the start of the run); None when it starts
    none (someone else's workers: their size is not known)."""
    if settings.workers == "none":
        return None
    groups, found = worker_groups(settings)
    return None if found or not groups else groups


# A job's resources as the messages of a job too large for the workers name them: (its unit, a worker's, how to
# lower it).
RESOURCES = (
    ("cores (its threads)", "", "the rule's threads"),
    ("MB (its mem_mb)", " MB", "the rule's mem_mb"),
    (
        "MB of disk (its disk_mb)",
        " MB",
        "the rule's disk_mb (a workflow may derive it from its input files' sizes: fewer files per job)",
    ),
)
# What the most a worker may grow to is, and the flag that raises it.
_MOST = "a worker started for a larger job may have at most"
MOST_FLAGS = (
    (_MOST, "--taskvine-worker-max-cores"),
    (_MOST, "--taskvine-worker-max-memory-mb"),
    (_MOST, "--taskvine-worker-max-disk-mb"),
)
FIT_WORKER_IDLE_S = 7 * 24 * 3600  # a worker started for larger jobs waits for them: it ends with the run


def most_worker(settings, run_dir: Path) -> tuple[tuple[int, int, int], str]:
    """((cores, memory MB, disk MB), what went wrong) up to which a worker is started for a job larger than the run's
    workers: each the setting's (--taskvine-worker-max-*), else for local workers this machine's cores, memory and
    the run directory's free disk, for HTCondor workers the most that a slot of the pool has (largest_slot; where
    the pool cannot be asked, 1 core and 1 MB, so that a larger job is refused, and what went wrong is said)."""
    given = (settings.worker_max_cores, settings.worker_max_memory_mb, settings.worker_max_disk_mb)
    problem = ""
    if settings.workers == "local":
        pages, page_size = os.sysconf("SC_PHYS_PAGES"), os.sysconf("SC_PAGE_SIZE")
        machine = (os.cpu_count() or 1, pages * page_size // 2**20, shutil.disk_usage(run_dir).free // 2**20)
    elif all(given):
        machine = given
    else:
        machine, problem = largest_slot()
    return tuple(g or m for g, m in zip(given, machine)), problem


def largest_slot() -> tuple[tuple[int, int, int], str]:
    """((cores, memory MB, disk MB), what went wrong): each the most that a slot of the HTCondor pool has (a
    partitionable slot's whole, TotalSlot*), from condor_status; (1, 1, 1) and why when the pool cannot be asked or
    lists no slot."""
    command = ["condor_status", "-af", "TotalSlotCpus", "TotalSlotMemory", "TotalSlotDisk"]
    shown = " ".join(command)
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=CONDOR_CHECK_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired) as e:
        return (1, 1, 1), f"{shown} did not answer ({e})"
    if done.returncode != 0:
        said = " / ".join((done.stderr or done.stdout).strip().splitlines()[-3:]) or "nothing"
        return (1, 1, 1), f"{shown} failed: {said}"
    slots = []
    for line in done.stdout.splitlines():
        try:  # numbers, some written as floats ("28027868.0"); a slot without them says "undefined"
            slots.append([int(float(field)) for field in line.split()])
        except ValueError:
            continue
    slots = [slot for slot in slots if len(slot) == 3]
    if not slots:
        return (1, 1, 1), f"{shown} lists no slot with cores, memory and disk"
    return (max(s[0] for s in slots), max(s[1] for s in slots), max(s[2] for s in slots) // 1024), ""


def needs(spec) -> tuple[int, int, int]:
    """(cores, memory MB, disk MB) the task SPEC needs of a worker: a library call runs in the worker's library and
    takes no disk of its own."""
    return spec.cores, spec.memory_mb, 0 if spec.function else spec.disk_mb


def covers(size: tuple[int, int, int], spec) -> bool:
    """Whether a worker of SIZE (0: TaskVine decides, i.e. what the machine has) can take the task SPEC."""
    return all(not most or need <= most for need, most in zip(needs(spec), size))


def grown(size: tuple[int, int, int], spec) -> tuple[int, int, int]:
    """SIZE grown to take the task SPEC too (0 stays 0: TaskVine gives such a worker what the machine has)."""
    cores, memory_mb, disk_mb = needs(spec)
    return max(size[0], cores), size[1] and max(size[1], memory_mb), size[2] and max(size[2], disk_mb)


def requested(settings, size: tuple[int, int, int]) -> tuple[int, int, int]:
    """SIZE as a worker started for a larger job asks for it: for an HTCondor job, memory and disk that SIZE leaves
    to TaskVine (0) are vine_factory's default request (CONDOR_DEFAULT_MB), and said to the worker, which would
    otherwise offer the whole machine's; a local worker keeps 0 (this machine's)."""
    if settings.workers == "local":
        return size
    return size[0], size[1] or CONDOR_DEFAULT_MB, size[2] or CONDOR_DEFAULT_MB


def able_groups(groups: list[WorkerGroup], spec) -> list[WorkerGroup]:
    """The groups of GROUPS whose workers have every feature the task SPEC needs."""
    return [g for g in groups if set(spec.features) <= set(g.features)]


def fitting_worker(
    settings,
    group: WorkerGroup,
    size: tuple[int, int, int],
    *,
    manager_port: int,
    password_file: Path,
    directory: Path,
) -> Worker | CondorWorker:
    """A worker of GROUP (its name, features and HTCondor requirements) of SIZE (cores, memory MB, disk MB; see
    ``requested``) for the jobs larger than the run's other workers, in DIRECTORY: a local one, or an HTCondor job of
    its own. It waits for them (no idle timeout) and ends with the run."""
    group = dataclasses.replace(group, cores=size[0], memory_mb=size[1], disk_mb=size[2])
    if settings.workers == "local":
        return local_worker(
            settings,
            group,
            manager_port=manager_port,
            password_file=password_file,
            workspace=directory,
            idle_s=FIT_WORKER_IDLE_S,
        )
    try:
        return CondorWorker(
            manager_host=_manager_host(),
            manager_port=manager_port,
            directory=directory,
            **_told(settings, group, password_file),
            condor_requirements=group.condor_requirements,
            worker_env={GROUP_ENV: group.name},
            worker_env_allow=env_patterns(settings.worker_env),
            idle_s=FIT_WORKER_IDLE_S,
        )
    except (ValueError, RuntimeError) as e:
        raise WorkflowError(f"cannot start an HTCondor worker of {size[0]} cores: {e}") from e


def _told(settings, group: WorkerGroup, password_file: Path) -> dict:
    """What each worker this plugin starts for GROUP is told, whoever starts it: how to log in, its size, features."""
    return dict(
        password_file=password_file,
        ssl=settings.ssl,
        cores=group.cores,
        memory_mb=group.memory_mb,
        disk_mb=group.disk_mb,
        features=group.features,
    )


def local_worker(
    settings,
    group: WorkerGroup,
    *,
    manager_port: int,
    password_file: Path,
    workspace: Path,
    idle_s: int = WORKER_IDLE_S,
) -> Worker:
    """A vine_worker on this machine of GROUP's size and features, in WORKSPACE."""
    return Worker(
        manager_host="127.0.0.1",
        manager_port=manager_port,
        workspace=workspace,
        **_told(settings, group, password_file),
        env={GROUP_ENV: group.name},
        env_allow=env_patterns(settings.worker_env),
        idle_s=idle_s,
    )


def start_workers(
    settings, *, manager_port: int, password_file: Path, run_dir: Path, private_dir: Path, kept: Kept | None = None
) -> list[Factory | Worker]:
    """What keeps the run's workers connected to the manager on PORT: a factory per worker group, or for local
    worker groups the workers themselves (nothing for ``workers=none``). Factories work in PRIVATE_DIR (their
    files include a copy of the password); their logs go to RUN_DIR. With KEPT (--taskvine-keep-workers-s), the
    factories are kept ones, working in KEPT's directory: an earlier command's, if they were started with the same
    settings and still run (else those are stopped), and written down for the next command."""
    if settings.workers == "none":
        return []
    groups, found = worker_groups(settings)
    if found:  # validated at start-up already; a file changed since would land here
        raise WorkflowError("; ".join(found))
    allow = env_patterns(settings.worker_env)
    started: list[Factory | Worker] = []
    try:
        if settings.workers == "local" and settings.worker_groups:
            for group in groups:
                for i in range(group.max_workers):
                    workspace = run_dir / "workers" / f"{group.name}-{i}"
                    started.append(
                        local_worker(
                            settings, group, manager_port=manager_port, password_file=password_file, workspace=workspace
                        )
                    )
            return started
        host = "127.0.0.1" if settings.workers == "local" else _manager_host()
        made = dict(settings=settings, host=host, manager_port=manager_port, password_file=password_file, allow=allow)
        if kept is not None:
            return _kept_factories(kept, groups, made, run_dir, started)
        for group in groups:
            started.append(
                _factory(
                    group=group,
                    scratch_dir=private_dir / "factory" / group.name,
                    log=run_dir / "factory" / group.name / "factory.log",
                    **made,
                )
            )
        return started
    except ValueError as e:  # a path or name the TaskVine binaries cannot take safely
        stop_all(started)
        raise WorkflowError(f"cannot start the TaskVine workers: {e}") from e


def _kept_factories(kept: Kept, groups: list[WorkerGroup], made: dict, run_dir: Path, started: list) -> list[Factory]:
    """The factories of GROUPS kept for the next command (start_workers; MADE: what each is made with), appended to
    STARTED: the ones KEPT has written down, when started with the same (and all running), else new ones."""
    settings = made["settings"]
    wanted = fingerprint(
        {
            "factories": [dict(made, settings=None, group=dataclasses.asdict(g)) for g in groups],
            "keep_s": settings.keep_workers_s,
            "ssl": settings.ssl,
            "workers": settings.workers,
            "catalog": catalog_address(),
            "environment": allowed_environment([*made["allow"], *CONDOR_CLIENT_ENV]),
            # (vine_factory copies the password when it starts: a file changed since is another password)
            "password": hashlib.sha256(Path(made["password_file"]).read_bytes()).hexdigest(),
        }
    )
    records = {r.group: r for r in kept.records} if kept.adoptable(wanted) else {}
    if set(records) != {g.name for g in groups}:  # (the kept ones are not these: stopped, and new ones started)
        kept.stop()
        records = {}
    try:
        for group in groups:
            record = records.get(group.name)
            started.append(
                _factory(
                    group=group,
                    scratch_dir=kept.factory_scratch(group.name),
                    log=run_dir / "factory" / group.name / "factory.log",
                    keep_s=settings.keep_workers_s,
                    job_tag=record.tag if record else None,
                    process=Adopted(record.pid, record.started) if record else None,
                    **made,
                )
            )
    except BaseException:  # (a factory that would outlive this command unwritten: none is kept)
        stop_all(started)
        kept.forget()
        raise
    kept.save(
        made["manager_port"],
        wanted,
        [Record(g.name, f.proc.pid, start_time(f.proc.pid) or 0, f.job_tag) for g, f in zip(groups, started)],
    )
    return started


def _factory(
    *,
    settings,
    group: WorkerGroup,
    host: str,
    manager_port: int,
    password_file: Path,
    allow: list[str],
    scratch_dir: Path,
    log: Path,
    keep_s: int = 0,
    job_tag: str | None = None,
    process: Adopted | None = None,
) -> Factory:
    """GROUP's factory; KEEP_S, JOB_TAG and PROCESS for a kept one (see Factory)."""
    return Factory(
        batch_type=settings.workers,
        manager_host=host,
        manager_port=manager_port,
        scratch_dir=scratch_dir,
        log=log,
        **_told(settings, group, password_file),
        min_workers=group.min_workers,
        max_workers=group.max_workers,
        condor_requirements=group.condor_requirements,
        worker_env={GROUP_ENV: group.name},
        worker_env_allow=allow,
        keep_s=keep_s,
        job_tag=job_tag,
        process=process,
    )


def _manager_host() -> str:
    """The address that workers in the pool use to reach this manager: the interface HTCondor itself is bound to
    (NETWORK_INTERFACE, e.g. loopback for a personal pool), else this host's fully qualified name."""
    try:
        out = subprocess.run(
            ["condor_config_val", "NETWORK_INTERFACE"], capture_output=True, text=True, timeout=CONDOR_CHECK_TIMEOUT_S
        )
        value = out.stdout.strip() if out.returncode == 0 else ""
    except (OSError, subprocess.TimeoutExpired):
        value = ""
    return value if value and value != "*" else socket.getfqdn()


def environment_file(settings) -> tuple[Path | None, list[str]]:
    """(the packed environment every task runs in, problems): --taskvine-environment, else the groups file's
    ``taskvine_environment`` (relative to the working directory, as the groups file's own path is); (None, [])
    when neither names one (the tasks then use whatever Python the workers have)."""
    if settings.environment:
        path, where = Path(settings.environment), f"--taskvine-environment {settings.environment}"
    elif settings.worker_groups:
        try:
            raw = yaml.safe_load(Path(settings.worker_groups).read_text())
        except (OSError, yaml.YAMLError):
            return None, []  # worker_groups() reports it
        value = raw.get(ENVIRONMENT_KEY) if isinstance(raw, dict) else None
        if value is None:
            return None, []
        where = f"--taskvine-worker-groups {settings.worker_groups}: {ENVIRONMENT_KEY} {value!r}"
        if not isinstance(value, str) or not value:
            return None, [
                f"{where}: give the path of a tarball with bin/run_in_env at its top (cctools' "
                "poncho_package_create makes one)"
            ]
        path = Path(value)
    else:
        return None, []
    return path.absolute(), environment_problems(path, where)


def environment_problems(path: Path, where: str) -> list[str]:
    """What keeps the file at PATH from being a packed environment: it must be a readable tarball with
    ``bin/run_in_env`` (a packer that writes it first lets this read little of a large file)."""
    make = (
        "make one in the environment that runs the workflow (cctools' poncho_package_create, or the workflow's own "
        "packer)"
    )
    if not path.is_file():
        return [f"{where}: no such file; {make}"]
    try:
        with tarfile.open(path, "r:*") as tar:
            for member in tar:
                if member.name.lstrip("./") == RUN_IN_ENV:
                    return []
    except (OSError, tarfile.TarError) as e:
        return [f"{where}: not a readable tarball ({e}); {make}"]
    return [f"{where}: has no {RUN_IN_ENV}, which TaskVine runs every task under; {make}"]
