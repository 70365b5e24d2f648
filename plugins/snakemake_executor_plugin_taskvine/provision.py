"""Workers for the run: ``local`` — a TaskVine factory that starts ``vine_worker`` processes on this machine;
``condor`` — a factory that submits them as HTCondor jobs; ``none`` — somebody else starts them. Whatever this module
starts it stops, and the factory removes the workers it made."""

from __future__ import annotations

import shutil
import socket
import subprocess
from pathlib import Path

from snakemake_interface_common.exceptions import WorkflowError

from .taskvine import Factory

WORKER_MODES = ("local", "condor", "none")
CONDOR_CHECK_TIMEOUT_S = 20


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


def start_workers(settings, *, manager_port: int, password_file: Path, run_dir: Path) -> Factory | None:
    """The factory that keeps the run's workers connected to the manager on PORT, or None for ``workers=none``."""
    if settings.workers == "none":
        return None
    features = [f.strip() for f in (settings.worker_features or "").split(",") if f.strip()]
    return Factory(
        batch_type=settings.workers,
        manager_host="127.0.0.1" if settings.workers == "local" else _manager_host(),
        manager_port=manager_port,
        scratch_dir=run_dir / "factory",
        password_file=password_file,
        ssl=settings.ssl,
        min_workers=settings.min_workers,
        max_workers=settings.max_workers,
        cores=settings.worker_cores,
        memory_mb=settings.worker_memory_mb,
        disk_mb=settings.worker_disk_mb,
        features=features,
        condor_requirements=settings.condor_requirements or "",
    )


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
