"""Checks of the executor's settings, made once at start-up: every problem found is reported together, each naming
the setting (as the command-line flag) and what to do."""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path

from snakemake_interface_common.exceptions import WorkflowError

from .provision import WORKER_MODES, worker_groups
from .tasks import comma_separated
from .taskvine import ENV_NAME, SAFE_NAME, SAFE_PATH, SCHEDULERS, bad_env_patterns, env_patterns
from .workergroups import NAME_RULE, requirements_problems

MODULE_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")


def flag(name: str) -> str:
    return "--taskvine-" + name.replace("_", "-")


def port_range(value: str | None) -> tuple[int, int] | None:
    """'LOW-HIGH' → (LOW, HIGH); None or '' → None. Raises ValueError for anything else."""
    if not value:
        return None
    low, sep, high = str(value).partition("-")
    if not sep or not low.strip().isdigit() or not high.strip().isdigit():
        raise ValueError(value)
    return int(low), int(high)


def credential_names(setting: str | None) -> list[str]:
    """The variables --taskvine-credential-env names ('none': none)."""
    names = comma_separated(setting)
    return [] if names == ["none"] else names


def problems(settings) -> list[str]:
    """What is wrong with SETTINGS (an ExecutorSettings), as sentences; empty if nothing."""
    found = []
    if not 0 <= settings.port <= 65535:
        found.append(f"{flag('port')} {settings.port}: a TCP port is 0 (any free port) to 65535")
    try:
        ports = port_range(settings.port_range)
    except ValueError:
        ports = (0, -1)
    if ports is not None:
        if not 1 <= ports[0] <= ports[1] <= 65535:
            found.append(
                f"{flag('port_range')} {settings.port_range!r}: write LOW-HIGH, two TCP ports with "
                "1 <= LOW <= HIGH <= 65535 (e.g. 9100-9199)"
            )
        elif settings.port:
            found.append(f"{flag('port_range')} and {flag('port')} {settings.port} are both set; keep one")
    for feature in comma_separated(settings.worker_features):
        if not SAFE_NAME.match(feature):
            found.append(f"{flag('worker_features')}: feature {feature!r}: {NAME_RULE}")
    if settings.condor_requirements:
        found += requirements_problems(settings.condor_requirements, flag("condor_requirements"))
    bad = bad_env_patterns([p for p in env_patterns(settings.worker_env)])
    if bad:
        found.append(
            f"{flag('worker_env')}: {', '.join(map(repr, bad))}: give variable names (letters, digits, _) "
            "or prefixes ending in * (e.g. XRD_*), separated by commas; 'default' stands for the default "
            "list"
        )
    bad = [n for n in credential_names(settings.credential_env) if not ENV_NAME.match(n)]
    if bad:
        found.append(
            f"{flag('credential_env')}: {', '.join(map(repr, bad))}: give variable names (letters, digits, _) "
            "separated by commas, or 'none'"
        )
    if settings.workers not in WORKER_MODES:
        found.append(f"{flag('workers')} {settings.workers!r}: choose one of {', '.join(WORKER_MODES)}")
    if settings.scheduler not in SCHEDULERS:
        found.append(f"{flag('scheduler')} {settings.scheduler!r}: choose one of {', '.join(SCHEDULERS)}")
    for name, least in {"worker_cores": 1, "min_workers": 0, "max_workers": 1}.items():
        if getattr(settings, name) < least:
            found.append(f"{flag(name)} {getattr(settings, name)}: must be at least {least}")
    for name in (
        "worker_memory_mb",
        "worker_disk_mb",
        "worker_max_cores",
        "worker_max_memory_mb",
        "worker_max_disk_mb",
        "retries",
    ):
        if getattr(settings, name) < 0:
            found.append(f"{flag(name)} {getattr(settings, name)}: must not be negative (0: see its --help)")
    if settings.max_workers >= 1 and settings.min_workers > settings.max_workers:
        found.append(
            f"{flag('min_workers')} {settings.min_workers} is more than {flag('max_workers')} {settings.max_workers}"
        )
    for name in ("prefer_wait_s", "straggler_min_s", "max_tasks"):
        if getattr(settings, name) < 0:
            found.append(f"{flag(name)} {getattr(settings, name)}: must not be negative")
    if settings.straggler_factor != 0 and settings.straggler_factor <= 1:
        found.append(
            f"{flag('straggler_factor')} {settings.straggler_factor}: must be more than 1 (a copy of every "
            "task slower than the median would double half the work), or 0 for no copies"
        )
    for name in ("library_preload", "local_preload"):
        bad = [m for m in comma_separated(getattr(settings, name)) if not MODULE_NAME.match(m)]
        if bad:
            found.append(
                f"{flag(name)}: {', '.join(map(repr, bad))}: give module names (e.g. coffea.processor), "
                "separated by commas"
            )
    if settings.keep_workers_s < 0:
        found.append(f"{flag('keep_workers_s')} {settings.keep_workers_s}: must not be negative (0: keep none)")
    elif settings.keep_workers_s and (
        settings.workers == "none" or (settings.workers == "local" and settings.worker_groups)
    ):
        found.append(
            f"{flag('keep_workers_s')} keeps the workers that factories start: use it with {flag('workers')} "
            f"condor, or local without {flag('worker_groups')}"
        )
    found += worker_groups(settings)[1]
    if settings.password_file is not None:
        found += password_file_problems(Path(settings.password_file))
    return found


def password_file_problems(path: Path) -> list[str]:
    where = f"{flag('password_file')} {path}"
    if not SAFE_PATH.match(str(path.absolute())):
        return [
            f"{where}: TaskVine's factory pastes this path into shell commands; move the file to a path made "
            "of letters, digits and _ . / + - only"
        ]
    if not path.is_file():
        return [
            f"{where}: no such file. Create one (e.g. `openssl rand -hex 32 > {path}; chmod 600 {path}`) "
            "or leave the setting out to get a random password for this run"
        ]
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
