"""Checks of the executor's settings, made once at start-up: every problem found is reported together, each naming
the setting (as the command-line flag) and what to do."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from snakemake_interface_common.exceptions import WorkflowError

from .provision import WORKER_MODES, worker_groups
from .taskvine import SCHEDULERS


def flag(name: str) -> str:
    return "--taskvine-" + name.replace("_", "-")


def problems(settings) -> list[str]:
    """What is wrong with SETTINGS (an ExecutorSettings), as sentences; empty if nothing."""
    found = []
    if not 0 <= settings.port <= 65535:
        found.append(f"{flag('port')} {settings.port}: a TCP port is 0 (any free port) to 65535")
    if settings.workers not in WORKER_MODES:
        found.append(f"{flag('workers')} {settings.workers!r}: choose one of {', '.join(WORKER_MODES)}")
    if settings.scheduler not in SCHEDULERS:
        found.append(f"{flag('scheduler')} {settings.scheduler!r}: choose one of {', '.join(SCHEDULERS)}")
    for name, least in {"worker_cores": 1, "min_workers": 0, "max_workers": 1}.items():
        if getattr(settings, name) < least:
            found.append(f"{flag(name)} {getattr(settings, name)}: must be at least {least}")
    for name in ("worker_memory_mb", "worker_disk_mb", "retries"):
        if getattr(settings, name) < 0:
            found.append(f"{flag(name)} {getattr(settings, name)}: must not be negative (0 = TaskVine's default)")
    if settings.max_workers >= 1 and settings.min_workers > settings.max_workers:
        found.append(f"{flag('min_workers')} {settings.min_workers} is more than {flag('max_workers')} "
                     f"{settings.max_workers}")
    if settings.prefer_wait_s < 0:
        found.append(f"{flag('prefer_wait_s')} {settings.prefer_wait_s}: must not be negative")
    found += worker_groups(settings)[1]
    if settings.password_file is not None:
        found += password_file_problems(Path(settings.password_file))
    return found


def password_file_problems(path: Path) -> list[str]:
    where = f"{flag('password_file')} {path}"
    if not path.is_file():
        return [f"{where}: no such file. Create one (e.g. `openssl rand -hex 32 > {path}; chmod 600 {path}`) "
                "or leave the setting out to get a random password for this run"]
    if not os.access(path, os.R_OK):
        return [f"{where}: not readable by this user"]
    if path.stat().st_size == 0 or not path.read_text(errors="replace").strip():
        return [f"{where}: the file is empty; put the password in it"]
    if path.stat().st_mode & (stat.S_IRWXG | stat.S_IRWXO):
        return [f"{where}: other users can read it; run `chmod 600 {path}`"]
    return []


def validate(settings) -> None:
    found = problems(settings)
    if found:
        raise WorkflowError("The TaskVine executor's settings need fixing:\n  - " + "\n  - ".join(found))
