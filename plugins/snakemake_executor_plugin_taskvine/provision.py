"""Workers for the run: ``local`` — a TaskVine factory that starts ``vine_worker`` processes on this machine;
``condor`` — a factory that submits them as HTCondor jobs; ``none`` — somebody else starts them. Whatever this module
starts it stops, and each factory removes the workers it made.

Worker groups (``--taskvine-worker-groups FILE``, a YAML file whose ``worker_groups`` list names each group with its
features, HTCondor requirements and sizes) — e.g. one per rack. Every worker of a group carries the group's features,
and its tasks see the group's name in ``SNAKEMAKE_TASKVINE_WORKER_GROUP``. With ``condor`` each group has its own
factory, all started at once. A factory counts every worker connected to the manager, its own or not, so a group's
worker that is lost is replaced only while the manager has fewer workers than that group's maximum; and a factory
started after other groups' workers have connected would start none. Local groups therefore do not use factories:
the plugin starts each group's ``max_workers`` workers itself.
"""

from __future__ import annotations

import dataclasses
import shutil
import socket
import subprocess
from pathlib import Path

import yaml
from snakemake_interface_common.exceptions import WorkflowError

from .tasks import comma_separated
from .taskvine import Factory, Worker

WORKER_MODES = ("local", "condor", "none")
CONDOR_CHECK_TIMEOUT_S = 20
GROUP_ENV = "SNAKEMAKE_TASKVINE_WORKER_GROUP"


@dataclasses.dataclass(frozen=True)
class WorkerGroup:
    """Workers started by one factory; sizes not given in the groups file come from the plugin's settings."""

    name: str
    features: tuple[str, ...] = ()
    condor_requirements: str = ""
    min_workers: int = 1
    max_workers: int = 1
    cores: int = 1
    memory_mb: int = 0
    disk_mb: int = 0


GROUP_KEYS = {f.name for f in dataclasses.fields(WorkerGroup)}
SIZES = {"min_workers": 0, "max_workers": 1, "cores": 1, "memory_mb": 0, "disk_mb": 0}


def worker_groups(settings) -> tuple[list[WorkerGroup], list[str]]:
    """(groups, problems). Without a groups file, one group made of the plugin's own settings."""
    common = comma_separated(settings.worker_features)
    defaults = dict(min_workers=settings.min_workers, max_workers=settings.max_workers, cores=settings.worker_cores,
                    memory_mb=settings.worker_memory_mb, disk_mb=settings.worker_disk_mb,
                    condor_requirements=settings.condor_requirements or "")
    if not settings.worker_groups:
        return [WorkerGroup(name="workers", features=tuple(common), **defaults)], []
    where = f"--taskvine-worker-groups {settings.worker_groups}"
    try:
        raw = yaml.safe_load(Path(settings.worker_groups).read_text())
    except OSError as e:
        return [], [f"{where}: cannot be read ({e.strerror})"]
    except yaml.YAMLError as e:
        return [], [f"{where}: not valid YAML ({e})"]
    items = raw.get("worker_groups") if isinstance(raw, dict) else None
    if not isinstance(items, list) or not items:
        return [], [f"{where}: needs a non-empty list under the key worker_groups (each with at least a name)"]
    groups, found = [], []
    for i, item in enumerate(items):
        if not isinstance(item, dict) or not isinstance(item.get("name"), str):
            found.append(f"{where}: worker_groups[{i}] needs a name")
            continue
        unknown = sorted(set(item) - GROUP_KEYS)
        if unknown:
            found.append(f"{where}: group {item['name']}: unknown key(s) {', '.join(unknown)}; "
                         f"known: {', '.join(sorted(GROUP_KEYS))}")
        for key, least in SIZES.items():
            value = item.get(key, defaults[key])
            if not isinstance(value, int) or value < least:
                found.append(f"{where}: group {item['name']}: {key} {value!r} must be a whole number >= {least}")
        features = item.get("features", [])
        if not isinstance(features, list) or not all(isinstance(f, str) for f in features):
            found.append(f"{where}: group {item['name']}: features must be a list of names")
            features = []
        if not found:
            groups.append(WorkerGroup(**{**defaults, **{k: v for k, v in item.items() if k in GROUP_KEYS},
                                         "features": tuple(features) + tuple(common)}))
    names = [g.name for g in groups]
    found += [f"{where}: group {n} appears more than once" for n in sorted({n for n in names if names.count(n) > 1})]
    return groups, found


def check_condor_reachable() -> None:
    """Fail now, with what to do, if no HTCondor schedd answers (rather than waiting forever for workers)."""
    if shutil.which("condor_q") is None:
        raise WorkflowError(
            "--taskvine-workers condor: HTCondor's condor_q is not on PATH. Install the HTCondor client tools "
            "(or run on the pool's access point), or use --taskvine-workers local."
        )
    try:
        probe = subprocess.run(["condor_q", "-totals"], capture_output=True, text=True,
                               timeout=CONDOR_CHECK_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise WorkflowError(
            f"--taskvine-workers condor: condor_q did not answer within {CONDOR_CHECK_TIMEOUT_S} s; is the "
            "HTCondor schedd up? Check CONDOR_CONFIG, or use --taskvine-workers local."
        )
    if probe.returncode != 0:
        said = (probe.stderr or probe.stdout).strip().splitlines()[-3:]
        raise WorkflowError(
            "--taskvine-workers condor: no HTCondor schedd is reachable (condor_q -totals said: "
            f"{' / '.join(said) or 'nothing'}). Start HTCondor or point CONDOR_CONFIG at the pool, "
            "or use --taskvine-workers local."
        )


def start_workers(settings, *, manager_port: int, password_file: Path, run_dir: Path) -> list[Factory | Worker]:
    """What keeps the run's workers connected to the manager on PORT: a factory per worker group, or for local
    worker groups the workers themselves (nothing for ``workers=none``)."""
    if settings.workers == "none":
        return []
    groups, found = worker_groups(settings)
    if found:  # validated at start-up already; a file changed since would land here
        raise WorkflowError("; ".join(found))
    if settings.workers == "local" and settings.worker_groups:
        return [
            Worker(manager_host="127.0.0.1", manager_port=manager_port,
                   workspace=run_dir / "workers" / f"{group.name}-{i}", password_file=password_file,
                   ssl=settings.ssl, cores=group.cores, memory_mb=group.memory_mb, disk_mb=group.disk_mb,
                   features=group.features, env={GROUP_ENV: group.name})
            for group in groups for i in range(group.max_workers)
        ]
    host = "127.0.0.1" if settings.workers == "local" else _manager_host()
    return [
        Factory(
            batch_type=settings.workers,
            manager_host=host,
            manager_port=manager_port,
            scratch_dir=run_dir / "factory" / group.name,
            password_file=password_file,
            ssl=settings.ssl,
            min_workers=group.min_workers,
            max_workers=group.max_workers,
            cores=group.cores,
            memory_mb=group.memory_mb,
            disk_mb=group.disk_mb,
            features=group.features,
            condor_requirements=group.condor_requirements,
            worker_env={GROUP_ENV: group.name},
        )
        for group in groups
    ]


def _manager_host() -> str:
    """The address that workers in the pool use to reach this manager: the interface HTCondor itself is bound to
    (NETWORK_INTERFACE, e.g. loopback for a personal pool), else this host's fully qualified name."""
    try:
        out = subprocess.run(["condor_config_val", "NETWORK_INTERFACE"], capture_output=True, text=True,
                             timeout=CONDOR_CHECK_TIMEOUT_S)
        value = out.stdout.strip() if out.returncode == 0 else ""
    except (OSError, subprocess.TimeoutExpired):
        value = ""
    return value if value and value != "*" else socket.getfqdn()
