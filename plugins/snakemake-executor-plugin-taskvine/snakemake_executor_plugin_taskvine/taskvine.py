"""The adapter that owns every TaskVine call: the manager (``ndcctools.taskvine``), and the ``vine_factory`` and
``vine_worker`` processes it provisions. Nothing else in the plugin imports ``ndcctools`` or starts a TaskVine binary.

Everything points at a catalog on loopback unless told otherwise: TaskVine's default is a public catalog server.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import fnmatch
import functools
import gc
import os
import re
import secrets
import select
import shlex
import shutil
import signal
import subprocess
import tempfile
import time
import types
import warnings
from datetime import datetime, timezone
from pathlib import Path
from typing import Mapping, Sequence

from . import credentials, warm

LOOPBACK_CATALOG = "127.0.0.1:9097"
# TaskVine's scheduling modes (VINE_SCHEDULE_<NAME>): files = where the task's input files already are.
SCHEDULERS = ("files", "time", "fcfs", "rand", "worst")
STOP_TIMEOUT_S = 30.0
REMOVE_TIMEOUT_S = 10.0  # for one condor_rm of a factory's jobs
SUBMIT_TIMEOUT_S = 30.0  # for the condor_submit of one worker's job
CONDOR_IDLE = 1  # an HTCondor job's JobStatus while it waits for a slot
# The ClassAd attribute that tags the HTCondor worker jobs of one factory, or one CondorWorker: stopping it removes
# them in one condor_rm.
JOB_TAG = "TaskVineWorkerTag"
# What vine_factory asks of HTCondor for a worker's memory and disk (MB) that TaskVine decides (0).
CONDOR_DEFAULT_MB = 1024
WORKER_STOP_GRACE_S = 5.0
FACTORY_PERIOD_S = 30  # how often vine_factory looks at its manager (7.14.5 has no --factory-period)
# A kept factory's --factory-timeout is its workers' time plus this: it counts from the last look that found the
# manager (up to a period and a look's own time before the manager went), so it never ends before its workers' time is
# up (kept.ADOPT_MARGIN_S before it, a next command takes them); it ends up to twice this after.
KEPT_FACTORY_SLACK_S = FACTORY_PERIOD_S + 10
KEPT_BACKOFF_S = 1  # how often a kept worker looks for the next manager
WORKER_IDLE_S = 300  # a worker with nothing to do for this long ends; one that finds no manager for this long too
# How often the workflow's sources (~500 files, the same for every job) are looked at for a change (Manager._changed):
# a task submitted this long after a source changed gets the new one.
SOURCES_LOOK_S = 1.0
# cctools 7.14.0-7.14.5 crash the manager (SIGSEGV: it frees the worker while still handling its message; cctools
# #4065, fixed in 7.14.6 and 7.15.0) when it lets go a worker that asked to leave after sitting idle for its idle
# timeout. Reproduced with Debian trixie's 7.14.5: six workers with --timeout=5 killed it in 4 runs of 4 (with
# --idle-timeout=2 in 3 of 3), and a job waiting for a larger worker lost its run so. With such a cctools the workers
# never ask: the run ends them.
IDLE_LEAVE_FIXED_IN = (7, 14, 6)
NEVER_IDLE_S = 10 * 365 * 24 * 3600
LIBRARY_NAME = "snakemake-jobs"
LIBRARY_SCRIPT = "library_code.py"  # what TaskVine's library command runs (`python library_code.py`)
LIBRARY_CLIENT = "vine_warm.py"  # warm.py, as a kept worker's library's sandbox holds it
# What every task's and the library's command line becomes (own_group). cctools' worker makes a task the leader of a
# process group of its own from its side of the fork only (setpgid after fork(), unchecked); a task that execs before
# it does stays in the worker's group, and the worker's kill (kill(-pid): a task cancelled, the manager gone) then
# signals no one and waits for the task's natural end, serving nothing meanwhile (seen on 6 of 1,000 workers stopped
# at once on this 2-core machine; docs/upstream/cctools-task-kill-race.md). So the worker's shell execs (same pid)
# into this one, which, if it is still in its parent's (the worker's) group, makes itself a session (setsid execs in
# place: no fork, as it leads no group) before it execs the task's words: the pid the worker kills leads a group.
# Anything it cannot read (no /proc) leaves the task as it is. It takes its parent for the worker: true as long as no
# wrapper (TaskVine's resource monitor, which the plugin does not turn on) comes between them.
OWN_GROUP = (
    'read -r me 2> /dev/null < /proc/$$/stat && read -r up 2> /dev/null < /proc/"$PPID"/stat || exec "$@"; '
    'me=${me##*") "}; me=${me#* }; me=${me#* }; group=${me%% *}; up=${up##*") "}; up=${up#* }; up=${up#* }; '
    'up=${up%% *}; case "$group:$up" in *[!0-9:]* | :* | *:) exec "$@" ;; esac; '
    'if [ "$group" != $$ ] && [ "$group" = "$up" ]; then command -v setsid > /dev/null && exec setsid "$@"; '
    'echo "task: no setsid: this task stays in its worker\'s process group, where its kill may miss it" >&2; fi; '
    'exec "$@"'
)
# A task's environment (TaskSpec.env) arrives as this file in its sandbox, which the task's shell sources first:
# TaskVine's own set_env_var would write each value into the manager's debug log.
ENV_FILE = ".taskvine-task-env"
# The variables that name the user's credential files (the X.509 proxy; the WLCG bearer token's file), each task
# gets as a file (--taskvine-credential-env), named credential-<variable, lower case> in its sandbox.
CREDENTIAL_ENV = ("X509_USER_PROXY", "BEARER_TOKEN_FILE")
CREDENTIAL_PREFIX = "credential-"
GAVE_UP_LOST = "lost workers"  # TaskResult.result of a task given up after losing more workers than its retries
# TaskResult.result of a task cancelled past its time limit (TaskSpec.time_max_s). The dispatcher enforces the limit,
# not TaskVine: the workers of TaskVine 7.14.5 end every task that has a limit (Task.set_time_max) at their first
# check, ~5 s after it starts, whatever the limit (measured: a limit of 60 s, "max wall time" after 5.0 s).
TIME_LIMIT = "time limit"
# A worker killed outright can leave its tasks' processes holding its connection open, so the manager does not see
# it go; keepalives find it: one every KEEPALIVE_INTERVAL_S, and a worker silent for KEEPALIVE_TIMEOUT_S is dropped
# (its tasks are dispatched again). TaskVine's defaults (2 and 15 minutes) would stall a run that long.
KEEPALIVE_INTERVAL_S = 5
# Local files (sources, inputs, the packed environment) go from the manager to each worker, never from one worker to
# another: TaskVine 7.14.5 may tell a worker to fetch a file from a peer in the same instant as it starts sending the
# file to that peer; the fetch fails, the worker keeps the failure for that file, and every task needing it is
# forsaken there again and again (seen with two workers taking their first tasks at once).
PEER_TRANSFER = False
KEEPALIVE_TIMEOUT_S = 20
# A manager on any port (0, or a range) that fails to listen is created again, after a random pause, this many times
# in all: with port 0 every manager scans ports from 1024 up with SO_REUSEADDR, so two started in the same instant
# can bind the same port and the second then fails to listen ("Could not create manager on port 0"; seen with two
# campaigns started together). A fixed port that fails is the user's to change: not retried.
LISTEN_ATTEMPTS = 5
PRIVATE_PREFIX = "snakemake-vine-"
# vine_factory pastes paths unquoted into shell commands (`cp PASSWORD SCRATCH/pwfile`) and the workers' command
# line (run through `eval` in the HTCondor job): every path handed to it must be made of these characters. Every
# pattern here ends in \Z, not $ ($ also matches before a final line break, which would let "name\n" through).
SAFE_PATH = re.compile(r"^[A-Za-z0-9_./+-]+\Z")
# Host names and addresses (host, host:port, IPv6) that reach the same command lines: the manager's, the catalog's.
SAFE_HOST = re.compile(r"^[A-Za-z0-9_.:\[\]-]+\Z")
# Names (worker groups, features) that reach vine_factory's and vine_worker's command lines and submit files.
SAFE_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]*\Z")
# An HTCondor requirements expression as vine_factory writes it into the submit description (`requirements = (...)`):
# ClassAd operators, names, numbers and "strings", on one line; no $ (condor_submit expands $(...) and $ENV(...)),
# no \ (line continuation), no line breaks, no ', ` or ;. It reaches no shell (an argument of vine_factory, then a
# line of the submit description), so the quotes and && of an expression are harmless.
SAFE_REQUIREMENTS = re.compile(r"^[A-Za-z0-9_ .,:()<>=!&|+*/%?\"-]*\Z")
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*\Z")
ENV_PATTERN = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*\*?\Z")  # a variable name, or a prefix ending in *
# What the workers' environment is made of unless --taskvine-worker-env says otherwise: finding programs and
# libraries (PATH, LD_LIBRARY_PATH, a venv or conda environment, Python's own variables), the user's home and locale,
# X509 proxies and CA directories, bearer-token *files* (WLCG token discovery), XRootD's client and security
# settings, and TaskVine's catalog. Not BEARER_TOKEN itself: a value in the environment of an HTCondor job is in its
# job ad, which every user of the pool can read (condor_q -l); hand tokens over as files.
DEFAULT_WORKER_ENV = (
    "PATH",
    "LD_LIBRARY_PATH",
    "HOME",
    "USER",
    "LOGNAME",
    "LANG",
    "LC_*",
    "TZ",
    "VIRTUAL_ENV",
    "CONDA_PREFIX",
    "CONDA_DEFAULT_ENV",
    "PYTHONPATH",
    "PYTHONHOME",
    "X509_USER_PROXY",
    "X509_CERT_DIR",
    "X509_VOMS_DIR",
    "X509_VOMSES",
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
    "BEARER_TOKEN_FILE",
    "XDG_RUNTIME_DIR",
    "XRD_*",
    "XrdSec*",
    "CATALOG_HOST",
    "CATALOG_PORT",
)
# What the HTCondor command-line tools that vine_factory runs need (the factory's own environment, not the jobs').
CONDOR_CLIENT_ENV = ("PATH", "HOME", "USER", "LOGNAME", "CONDOR_CONFIG", "_CONDOR_*")


def own_group(command: str) -> str:
    """COMMAND (a simple command: words a worker may append arguments to, as it does to the library's) as a command
    line whose process leads its own group (OWN_GROUP)."""
    return f"exec /bin/sh -c {shlex.quote(OWN_GROUP)} task {command}"


def import_taskvine():
    """``ndcctools.taskvine``, or an error that says how to get it (it is not on PyPI)."""
    try:
        with warnings.catch_warnings():  # "DaskVine not available": this plugin does not use TaskVine's Dask part
            warnings.filterwarnings("ignore", message="DaskVine not available")
            import ndcctools.taskvine as vine
    except ImportError as e:
        raise ImportError(
            "TaskVine's Python bindings (ndcctools.taskvine) are missing: install cctools — on Debian trixie "
            "`apt-get install python3-workqueue coop-computing-tools python3-cloudpickle`, elsewhere "
            "`conda install -c conda-forge ndcctools` — and use a Python that sees them "
            "(a venv made with --system-site-packages)."
        ) from e
    return vine


def catalog_address() -> str:
    """The catalog server every manager, factory and worker reports to: $CATALOG_HOST[:$CATALOG_PORT] (TaskVine's
    own variables), else a catalog on loopback — never TaskVine's public default."""
    host = os.environ.get("CATALOG_HOST")
    if not host:
        return LOOPBACK_CATALOG
    port = os.environ.get("CATALOG_PORT")
    return _safe_host(host if ":" in host or not port else f"{host}:{port}", "$CATALOG_HOST[:$CATALOG_PORT]")


@functools.cache
def manager_version() -> tuple[int, ...]:
    """The version of the TaskVine manager library (cctools), e.g. (7, 14, 5)."""
    return tuple(int(part) for part in re.findall(r"\d+", import_taskvine().__version__)[:3])


def _timeout_options(connect_s: int, idle_s: int) -> list[str]:
    """vine_worker's timeouts: CONNECT_S to find its manager, IDLE_S of idleness after which it asks to leave (never,
    with a manager that would crash then: IDLE_LEAVE_FIXED_IN). The last option given wins in vine_worker, so these
    may follow vine_factory's own -t."""
    idle = idle_s if manager_version() >= IDLE_LEAVE_FIXED_IN else NEVER_IDLE_S
    return [f"--connect-timeout={connect_s}", f"--idle-timeout={idle}"]


def private_directory() -> Path:
    """A new directory that only this user can enter (mode 0700, made by ``mkdtemp``: a fresh random name, unique
    even for two runs in the same second) in the temporary directory, outside the checkout, whose ACLs may let
    others in. It holds the run's secrets and the factories' files (which include a copy of the password)."""
    return Path(tempfile.mkdtemp(prefix=PRIVATE_PREFIX))


def remove_private_directory(directory: Path) -> None:
    """Remove DIRECTORY (made by private_directory) and everything in it; a directory already gone is fine."""
    try:
        shutil.rmtree(directory)
    except FileNotFoundError:
        pass


def write_password_file(directory: Path | None = None) -> Path:
    """A fresh random password in DIRECTORY/vine.password (default: a new private_directory()), readable by its owner
    only. Never overwrites nor follows a link: the file is created here or this fails. The password is never
    printed or logged; workers are given the file's path."""
    if directory is None:
        directory = private_directory()
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    path = directory / "vine.password"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(secrets.token_hex(32) + "\n")
    return path


def env_patterns(value: str | Sequence[str] | None) -> list[str]:
    """The names and NAME* prefixes of a --taskvine-worker-env value ('a,B_*'); the word 'default' stands for
    DEFAULT_WORKER_ENV, None or '' for DEFAULT_WORKER_ENV alone."""
    items = [v.strip() for v in (value.split(",") if isinstance(value, str) else (value or ())) if v.strip()]
    if not items:
        return list(DEFAULT_WORKER_ENV)
    expanded: list[str] = []
    for item in items:
        for name in DEFAULT_WORKER_ENV if item == "default" else (item,):
            if name not in expanded:
                expanded.append(name)
    return expanded


def bad_env_patterns(patterns: Sequence[str]) -> list[str]:
    """The entries of PATTERNS that are neither a variable name nor a NAME* prefix."""
    return [p for p in patterns if not ENV_PATTERN.match(p)]


def allowed_environment(patterns: Sequence[str], environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The variables of ENVIRON (default: this process's) whose names PATTERNS allow (exact names, NAME* prefixes;
    case-sensitive)."""
    environ = os.environ if environ is None else environ
    allowed = {k: v for k, v in environ.items() if any(fnmatch.fnmatchcase(k, p) for p in patterns)}
    # Never this node's warm server (warm.serve): a worker's jobs are not its commands.
    return {k: v for k, v in allowed.items() if k not in (warm.VARIABLE, warm.SOCKET_VARIABLE)}


def self_signed_certificate(directory: Path) -> tuple[str, str]:
    """(key, certificate): a fresh self-signed TLS certificate for the manager, in DIRECTORY (a private one)."""
    key, cert = directory / "manager.key", directory / "manager.cert"
    try:
        subprocess.run(
            [
                "openssl",
                "req",
                "-x509",
                "-newkey",
                "rsa:3072",
                "-keyout",
                str(key),
                "-out",
                str(cert),
                "-sha256",
                "-days",
                "7",
                "-nodes",
                "-batch",
                "-subj",
                "/CN=snakemake-taskvine-manager",
            ],
            check=True,
            capture_output=True,
            text=True,
        )
    except FileNotFoundError as e:
        raise RuntimeError(
            "--taskvine-ssl needs the openssl command to make the run's certificate; install "
            "openssl or leave out --taskvine-ssl"
        ) from e
    except subprocess.CalledProcessError as e:
        raise RuntimeError(f"--taskvine-ssl: openssl could not make the run's certificate: {e.stderr.strip()}") from e
    return str(key), str(cert)


def _safe_host(host: str, what: str) -> str:
    if not SAFE_HOST.match(host):
        raise ValueError(
            f"{what} {host!r}: vine_factory and vine_worker paste it into shell commands; give a host "
            "name or address (letters, digits and _ . : - [ ] only)"
        )
    return host


def _safe_path(path: Path | str, what: str) -> str:
    text = str(path)
    if not SAFE_PATH.match(text):
        raise ValueError(
            f"{what} {text!r}: vine_factory and vine_worker paste it into shell commands; use a path "
            "made of letters, digits and _ . / + - only"
        )
    return text


@dataclasses.dataclass(frozen=True)
class TaskSpec:
    """One shell command to run on a worker, with its resources. Zero means "not set"."""

    command: str
    tag: str = ""
    # Tasks of one category (a rule) are peers: TaskVine keeps statistics per category, and a task that runs far
    # longer than its peers is a straggler (stragglers.py).
    category: str = ""
    cores: int = 0
    memory_mb: int = 0
    disk_mb: int = 0
    time_max_s: int = 0  # on a worker longer than this, the task is cancelled and fails (enforced by the dispatcher)
    features: Sequence[str] = ()
    # Features the task prefers: asked for like FEATURES at first; the dispatcher may drop them (see dispatcher).
    preferred: Sequence[str] = ()
    # Environment variables of the task (which may be secrets): sent as a file the task sources, never on its command
    # line nor in a log.
    env: dict[str, str] = dataclasses.field(default_factory=dict)
    retries: int = 0
    priority: int = 0  # higher runs first
    # Run COMMAND as a call of the library's run_job (see library.py) instead of a process of its own, in DIRECTORY
    # (default: the call's sandbox). Cores, memory and disk are then the library's: one call per function slot.
    function: bool = False
    directory: str = ""
    # (local path, name in the task's sandbox) pairs. Sources (the workflow's) and inputs are sent to the worker (and
    # cached there for the whole run); outputs are brought back to the local path when the task ends.
    sources: Sequence[tuple[str, str]] = ()
    inputs: Sequence[tuple[str, str]] = ()
    outputs: Sequence[tuple[str, str]] = ()


@dataclasses.dataclass(frozen=True)
class TaskResult:
    """What came back from one task."""

    task_id: int
    tag: str
    successful: bool
    exit_code: int | None
    result: str
    output: str
    hostname: str
    lost_workers: int = 0  # how often the task's worker was lost under it before this result
    category: str = ""
    run_s: float = 0.0  # from its last dispatch to its end (sending inputs, running, bringing outputs back)
    credentials_renewed: bool = False  # a credential file it carried has been renewed since it was given it


@dataclasses.dataclass
class _Losses:
    """How often a task's worker was lost under it, as seen from outside TaskVine by looking at the task now and
    then: a dispatch seen earlier is over while the task has no result (its commit time changed or was cleared),
    or the time TaskVine books on failed attempts grew (time_workers_execute_failure, which only a worker's removal
    adds to). At most one loss is counted per look: two that both happen between two looks count as one."""

    retries: int
    lost: int = 0
    commit_start: int = 0
    failed_us: int = 0

    def observe(self, commit_start: int, failed_us: int) -> None:
        if (self.commit_start and commit_start != self.commit_start) or failed_us > self.failed_us:
            self.lost += 1
        self.commit_start, self.failed_us = commit_start, failed_us


class LostWorkers:
    """Loss accounting: how often each task's worker was lost under it (one _Losses per task), and which tasks lost
    more workers than their spec's retries allow. TaskVine itself sends a task again after every lost worker, without
    limit (its retries count resource exhaustion only), so the count is kept here by looking at each task now and
    then. It only reads the tasks' metrics; submitting and cancelling are the Manager's."""

    def __init__(self) -> None:
        self._losses: dict[int, _Losses] = {}

    def track(self, task_id: int, retries: int) -> None:
        """Count the losses of TASK_ID from now on; it may lose RETRIES workers and still be sent again."""
        self._losses[task_id] = _Losses(retries=retries)

    def forget(self, task_id: int) -> int:
        """Stop counting for TASK_ID (it ended or was cancelled); how many workers it lost (0 if not tracked)."""
        losses = self._losses.pop(task_id, None)
        return losses.lost if losses is not None else 0

    def over_retries(self, tasks: Mapping[int, object]) -> list[TaskResult]:
        """Look at each of TASKS (TaskVine's tasks by id, all tracked) once more, and return as failed results the
        ones whose worker was lost more often than their retries; the caller cancels them."""
        given_up = []
        for task_id, t in tasks.items():
            losses = self._losses[task_id]
            losses.observe(t.get_metric("time_when_commit_start"), t.get_metric("time_workers_execute_failure"))
            if losses.lost > losses.retries:
                given_up.append(
                    TaskResult(
                        task_id=task_id,
                        tag=t.tag or "",
                        successful=False,
                        exit_code=None,
                        result=GAVE_UP_LOST,
                        hostname=t.hostname or "",
                        lost_workers=losses.lost,
                        output=f"The task's worker was lost under it {losses.lost} times; TaskVine would have sent it "
                        "to another worker again.\n",
                    )
                )
        return given_up


def listening(make, kwargs: dict, attempts: int, pause_s: tuple[float, float] = (0.05, 0.5)):
    """MAKE(**KWARGS) (a TaskVine manager), made again after a random pause of PAUSE_S seconds if it fails, up to
    ATTEMPTS times in all; the last failure is raised."""
    for attempt in range(1, attempts + 1):
        try:
            return make(**kwargs)
        except Exception:  # cctools raises a bare Exception when the manager cannot listen
            if attempt == attempts:
                raise
            time.sleep(secrets.SystemRandom().uniform(*pause_s))


class Manager:
    """Submission and collection: a TaskVine manager listening on loopback or any interface, password-protected,
    reporting to the catalog on loopback (and only when it has a name). It turns each TaskSpec into a TaskVine task
    (declaring each file, environment file and the packed environment once), hands back each finished task as a
    TaskResult, cancels tasks, and answers questions about them and the workers. Counting lost workers is
    LostWorkers' job."""

    def __init__(
        self,
        *,
        port: int | tuple[int, int] = 0,
        name: str | None = None,
        password_file: Path | None = None,
        ssl: bool = False,
        run_info_dir: Path | None = None,
        scheduler: str = "files",
        library: bool = False,
        library_preload: Sequence[str] = (),
        kept: bool = False,
        secrets_dir: Path | None = None,
        environment: Path | None = None,
        credential_files: Mapping[str, str] | None = None,
        port_wait_s: float = 0,
    ):
        """KEPT: the workers are kept between commands (the workflow's sources, and the library's imports, stay with
        them for the next command). PORT_WAIT_S: how long a given PORT is tried again while it is taken (the kept
        workers' port, which the previous command's manager may still hold for a second: it is not waited for)."""
        vine = import_taskvine()
        from ndcctools.taskvine import cvine

        self._vine = vine
        # With ssl=True TaskVine writes its key into the run-info directory; with SECRETS_DIR (a private directory)
        # the key and certificate are made there instead.
        tls = None
        if ssl:
            tls = self_signed_certificate(secrets_dir) if secrets_dir is not None else True
        kwargs = {"port": port, "ssl": tls}
        if run_info_dir is not None:
            kwargs["run_info_path"] = str(run_info_dir)
        pause_s = (0.1, 0.2) if port_wait_s else (0.05, 0.5)
        attempts = 1 + round(port_wait_s / sum(pause_s) * 2) if isinstance(port, int) and port else LISTEN_ATTEMPTS
        self._m = listening(vine.Manager, kwargs, attempts, pause_s)
        self._m.set_catalog_servers(catalog_address())
        self._m.set_keepalive_interval(KEEPALIVE_INTERVAL_S)
        self._m.set_keepalive_timeout(KEEPALIVE_TIMEOUT_S)
        if name:
            self._m.set_name(name)
        if password_file is not None:
            self._m.set_password_file(str(password_file))
        self._m.set_scheduler(getattr(cvine, f"VINE_SCHEDULE_{scheduler.upper()}"))
        self._tasks: dict[int, object] = {}
        self._lost = LostWorkers()
        self._files: dict[str, object] = {}
        # Each local input's and source's (inode, mtime, size) when a task was first given it (_changed), and when
        # the sources were last looked at (never yet).
        self._input_states: dict[str, tuple[int, int, int]] = {}
        self._sources_looked_at = float("-inf")
        self._kept = kept
        self._env_files: dict[str, object] = {}
        # Each credential: the variable naming its file here, that file, and (its stat when read, its declaration,
        # when it expires or None). The generation counts the declarations; each task keeps the one it was given.
        self._credential_paths = dict(credential_files or {})
        self._credentials: dict[str, tuple[tuple, object, float | None]] = {}
        self._credential_generation = 0
        self._generation_of: dict[int, int] = {}
        self._environment = self._declare_environment(environment) if environment is not None else None
        if library:
            self._install_library(library_preload, kept)

    def _declare_environment(self, path: Path):
        """The packed environment at PATH (a tarball with ``bin/run_in_env`` at its top) as
        TaskVine's execution context: declared once; each worker gets the tarball once (from the manager or a peer),
        unpacks it once in a mini-task that also runs its set-up (``run_in_env`` without arguments), and keeps it
        for the run; every task then runs under its ``run_in_env``. Sent by the manager only (PEER_TRANSFER)."""
        tarball = self._m.declare_file(str(path), cache="workflow", peer_transfer=PEER_TRANSFER)
        return self._m.declare_poncho(tarball, cache="workflow", peer_transfer=PEER_TRANSFER)

    def _install_library(self, preload: Sequence[str] = (), kept: bool = False) -> None:
        """One library per worker that has imported Snakemake (and the modules of PRELOAD, for the calls' warm
        commands); calls are forked from it (library.py). It takes the whole worker, with one function slot per
        core. KEPT (workers kept between commands; no packed environment): a worker's library leaves a server behind
        that the worker's next libraries are forked from, imports and all (warm.serve_library): their command is
        warm.py's client. In a packed environment (whose files the worker links into each library's sandbox, where
        the server would not see them change) the libraries start as they are."""
        from . import library

        forked = kept and self._environment is None
        lib = self._m.create_library_from_functions(
            LIBRARY_NAME,
            library.run_job,
            add_env=False,
            # The library imports Snakemake's command line first (TaskVine writes `import <name>` of each module
            # given): named by a module object that stands for it, as this process need not import Snakemake (0.3 s
            # before the manager listens).
            hoisting_modules=[types.ModuleType("snakemake.cli")],
            exec_mode="fork",
            library_context_info=[library.warm, [list(preload), forked], {}],
        )
        if self._environment is not None:  # the library's `python` is the environment's
            lib.add_environment(self._environment)
        command = lib.command
        if forked:  # (`python library_code.py`: the same library, through warm.py's client)
            client = self._m.declare_file(warm.__file__, cache="workflow", peer_transfer=PEER_TRANSFER)
            lib.add_input(client, LIBRARY_CLIENT)
            command = command.replace(
                f"python {LIBRARY_SCRIPT}", f"python {LIBRARY_CLIENT} {warm.LIBRARY} {LIBRARY_SCRIPT}", 1
            )
        # A simple command (no init_command), to which the worker appends the library's arguments.
        lib.set_command(own_group(command))
        self._m.tune("watch-library-logfiles", 1)  # its log comes back to the run directory (library-logs/)
        self._m.install_library(lib)

    @property
    def port(self) -> int:
        return self._m.port

    def submit(self, spec: TaskSpec) -> int:
        credentials = self._credential_inputs()
        if spec.function:  # the call's environment is set by run_job in its forked child
            files = {var: name for var, _, name in credentials}
            t = self._vine.FunctionCall(LIBRARY_NAME, "run_job", spec.command, spec.directory, dict(spec.env), files)
        else:
            sourced = spec.env or credentials
            # One simple command (TaskVine puts `run_in_env` in front of the command line as it is, so that all of
            # it, the env file, the cd and the job, runs inside the environment), then made to lead its own group.
            t = self._vine.Task(
                f"/bin/sh -c {shlex.quote(f'. ./{ENV_FILE} && {spec.command}' if sourced else spec.command)}"
            )
            if self._environment is not None:
                t.add_environment(self._environment)
            t.set_command(own_group(t.command))
            if sourced:
                t.add_input(self._env_file(spec.env, [(var, name) for var, _, name in credentials]), ENV_FILE)
            if spec.cores:
                t.set_cores(spec.cores)
            if spec.memory_mb:
                t.set_memory(spec.memory_mb)
            if spec.disk_mb:
                t.set_disk(spec.disk_mb)
        if spec.tag:
            t.set_tag(spec.tag)
        if spec.category:
            t.set_category(spec.category)
        if spec.retries:
            t.set_retries(spec.retries)  # TaskVine's own retries: after resource exhaustion only
        if spec.priority:
            t.set_priority(spec.priority)
        for feature in (*spec.features, *spec.preferred):
            t.add_feature(feature)
        for _, declared, name in credentials:
            t.add_input(declared, name)
        if spec.sources and time.monotonic() - self._sources_looked_at >= SOURCES_LOOK_S:
            self._sources_looked_at = time.monotonic()
            for local, _ in spec.sources:
                self._changed(local, source=True)
        for local, remote in spec.sources:
            t.add_input(self._file(local, source=True), remote)
        for local, remote in spec.inputs:
            self._changed(local)
            t.add_input(self._file(local), remote)
        for local, remote in spec.outputs:
            Path(local).parent.mkdir(parents=True, exist_ok=True)
            t.add_output(self._file(local), remote)
        task_id = self._m.submit(t)
        self._tasks[task_id] = t
        self._lost.track(task_id, spec.retries)
        if credentials:
            self._generation_of[task_id] = self._credential_generation
        return task_id

    def _env_file(self, env: dict[str, str], credentials: Sequence[tuple[str, str]] = ()):
        """ENV as a shell file of ``export NAME='value'`` lines, declared once per distinct ENV (a buffer: nothing
        on the manager's disk), cached on the workers for the run and never passed from one worker to another. Each
        of CREDENTIALS (variable, name in the task's sandbox) is made readable by its owner only and the variable
        set to its path in the sandbox."""
        for name in [*env, *(var for var, _ in credentials)]:
            if not ENV_NAME.match(name):
                raise ValueError(f"environment variable name {name!r}: use letters, digits and _ only")
        text = "".join(f"export {name}={shlex.quote(value)}\n" for name, value in sorted(env.items()))
        text += "".join(f'chmod 0600 ./{name} && export {var}="$PWD/{name}"\n' for var, name in credentials)
        if text not in self._env_files:
            self._env_files[text] = self._m.declare_buffer(text, cache="workflow", peer_transfer=False)
        return self._env_files[text]

    def _credential_inputs(self) -> list[tuple[str, object, str]]:
        """(variable, declared file, name in the task's sandbox) of each credential file: read and declared again
        whenever its file changed since (renewed: a new buffer has a new name in the workers' caches, so no worker
        serves the old one to a new task; running tasks keep theirs). A buffer: the credential is never written on
        the manager's disk, and never passed from one worker to another. A file that has gone keeps its last
        declaration. One stat a task."""
        found = []
        for var, path in self._credential_paths.items():
            try:
                st = os.stat(path)
                key = (st.st_ino, st.st_mtime_ns, st.st_size)
                if self._credentials.get(var, ((),))[0] != key:
                    with open(path, "rb") as f:
                        data = f.read()
                    declared = self._m.declare_buffer(data, cache="workflow", peer_transfer=False)
                    self._credentials[var] = (key, declared, credentials.expires_at(data))
                    self._credential_generation += 1
            except OSError:
                if var not in self._credentials:
                    continue
            found.append((var, self._credentials[var][1], f"{CREDENTIAL_PREFIX}{var.lower()}"))
        return found

    def expired_credentials(self, now: float | None = None) -> list[str]:
        """The credentials whose file (read again if it changed) has expired, each as "$VAR (path) expired at
        <UTC time>": tasks given them now would be refused by the storage."""
        self._credential_inputs()
        now = time.time() if now is None else now
        return [
            f"${var} ({self._credential_paths[var]}) expired at "
            f"{datetime.fromtimestamp(expiry, timezone.utc):%Y-%m-%d %H:%M:%S} UTC"
            for var, (_, _, expiry) in self._credentials.items()
            if expiry is not None and expiry <= now
        ]

    def _renewed_since(self, task_id: int) -> bool:
        """Whether a credential was renewed (its file changed) since task TASK_ID, now done, was given its own."""
        given = self._generation_of.pop(task_id, None)
        if given is None:
            return False
        self._credential_inputs()
        return given < self._credential_generation

    def _file(self, local: str, source: bool = False):
        """The run's one declaration of a local file: a file used by many tasks, or made by one task and read by
        others, is declared once, so that workers keep it in their cache for the whole run; the manager sends it to
        each worker that needs it (PEER_TRANSFER). A SOURCE of the workflow, on workers kept between commands, is
        kept by them for the next command too, named by its contents, so that the next manager sends only the sources
        that have changed (~500 files of this repository: up to 0.5 s before a kept worker's first job). Its cache
        is TaskVine's "forever": a worker that changes managers deletes what is cached for less (cctools 7.14's
        vine_cache_load), and deletes its whole cache when it ends. (A source that a job also makes is declared
        apart as that job's output: its later contents are not the source's.)"""
        path = os.path.abspath(local)
        key = self._declared_as(path, source)
        if key not in self._files:
            cache = "forever" if source and self._kept else "workflow"
            self._files[key] = self._m.declare_file(path, cache=cache, peer_transfer=PEER_TRANSFER)
        return self._files[key]

    def _declared_as(self, path: str, source: bool) -> str:
        """The key of the file at PATH (absolute) in ``_files``: a SOURCE on kept workers is declared apart from the
        same file given as a job's input (``_file``)."""
        return f"source:{path}" if source and self._kept else path

    def _changed(self, local: str, source: bool = False) -> None:
        """A job's local input, or a SOURCE of the workflow (which git-tracked files are, an analysis among them),
        declared again (``_file``) when the file changed since a task was first given it (its inode, mtime or size:
        an analysis file edited during the run): TaskVine names a file by its contents when it is declared and keeps
        that name, so a worker that cached it would give the tasks after the change the old contents, and a worker
        that had not would cache the new ones under the old name (cctools notes the change in its debug log and sends
        it all the same). Declared again, the tasks submitted after the change get the new contents on every worker,
        as jobs run by Snakemake itself read the file as it is when they start (the sources, the same for every job,
        are looked at every ``SOURCES_LOOK_S``); tasks already submitted may get either (a workflow that must know
        records what its jobs read). A file a task of the run makes is first given to a task once it is made
        (Snakemake submits a job after the jobs it needs), and then changes no more. One stat a task's input."""
        path = os.path.abspath(local)
        try:
            st = os.stat(path)
        except OSError:
            return  # (gone: TaskVine fails the task when it sends it, naming the file)
        state = (st.st_ino, st.st_mtime_ns, st.st_size)
        if self._input_states.setdefault(path, state) != state:
            self._input_states[path] = state
            self._files.pop(self._declared_as(path, source), None)

    def wait(self, timeout_s: int = 1) -> TaskResult | None:
        """The next finished task, or None after TIMEOUT_S (>= 1: ``wait(0)`` makes no network progress)."""
        t = self._m.wait(max(1, int(timeout_s)))
        if t is None or self._tasks.pop(t.id, None) is None:
            return None  # nothing finished, or a task that was cancelled
        lost_workers = self._lost.forget(t.id)
        successful, exit_code = bool(t.successful()), t.exit_code if t.completed() else None
        if isinstance(t, self._vine.FunctionCall):
            returned = t.output if successful else None
            if isinstance(returned, dict):  # run_job's {"exit_code", "output"}
                exit_code, output = returned["exit_code"], returned["output"]
                successful = exit_code == 0
            else:
                output, successful = f"the function call returned no result ({returned!r})", False
        else:
            output = t.output or ""
        dispatched_us, done_us = t.get_metric("time_when_commit_start"), t.get_metric("time_when_done")
        return TaskResult(
            task_id=t.id,
            tag=t.tag or "",
            successful=successful,
            exit_code=exit_code,
            result=str(t.result),
            output=output,
            hostname=t.hostname or "",
            lost_workers=lost_workers,
            category=t.category or "",
            run_s=max(0.0, (done_us - dispatched_us) / 1e6) if dispatched_us and done_us else 0.0,
            credentials_renewed=self._renewed_since(t.id),
        )

    def give_up_lost(self) -> list[TaskResult]:
        """Cancel the tasks whose worker was lost more often than their spec's retries (LostWorkers), and return them
        as failed; call this every second or so."""
        given_up = self._lost.over_retries(self._tasks)
        for result in given_up:
            self.cancel(result.task_id)
        return given_up

    def cancel(self, task_id: int) -> None:
        self._m.cancel_by_task_id(task_id)
        self._tasks.pop(task_id, None)
        self._lost.forget(task_id)
        self._generation_of.pop(task_id, None)

    def running_s(self, task_id: int, now: float) -> float | None:
        """How long the task has been on a worker at NOW (seconds since the epoch): since its current dispatch
        began; None while it is queued (or unknown)."""
        t = self._tasks.get(task_id)
        dispatched_us = t.get_metric("time_when_commit_start") if t is not None else 0
        return now - dispatched_us / 1e6 if dispatched_us else None

    def hostname(self, task_id: int) -> str:
        t = self._tasks.get(task_id)
        return (t.hostname or "") if t is not None else ""

    def is_waiting(self, task_id: int) -> bool:
        """Whether the task is still queued at the manager, not yet sent to any worker."""
        t = self._tasks.get(task_id)
        return t is not None and t.state == "READY"

    def workers_idle(self) -> int:
        return self._m.stats.workers_idle

    def workers_connected(self) -> int:
        return self._m.stats.workers_connected

    def cores_connected(self) -> int:
        """The cores of the workers connected now."""
        return self._m.stats.total_cores

    def workers_joined(self) -> int:
        return self._m.stats.workers_joined

    def close(self, keep: bool = False) -> int:
        """End the run's work with its workers now: every task it holds is cancelled and every worker still
        connected told to exit (TaskVine's "exit" goes to idle workers only, hence the cancelling first), whether or
        not its HTCondor job has been removed yet; returns how many were told. Then the manager itself ends (its
        port closed), which releases the workers that could not be told: those running the library (a worker's
        library instance is never a task of ours) or a task in flight; a released worker ends (--single-shot on
        every worker we start). Done when the run ends, while what was provisioned is being stopped (issue 36: with
        1,000 worker jobs, HTCondor's removal alone left workers running for minutes). With KEEP no worker is told
        to exit: each is released, and a kept one (started with keep_s) looks for the next manager at once. Nothing
        may be asked of it after."""
        for task_id in list(self._tasks):
            self.cancel(task_id)
        told = 0 if keep else self._m.workers_shutdown(0)
        # The bindings end the manager (vine_delete: release every worker, close the port) when their Manager is
        # freed, and each task submitted refers to it and it to each task: a cycle that only the collector frees.
        self._m = None
        gc.collect()
        return told


class Adopted:
    """A process that an earlier command started (a kept factory), stopped as ``subprocess.Popen`` stops its own:
    ``poll``, ``wait``, ``send_signal``, ``kill``; only while it is the same process (its pid and start time)."""

    def __init__(self, pid: int, started: int):
        self.pid = pid
        self.started = started
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None and start_time(self.pid) != self.started:
            self.returncode = 0  # (not our child: its exit status is not ours to read)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        try:
            handle = os.pidfd_open(self.pid)
        except OSError:
            handle = None
        try:
            while self.poll() is None:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    raise subprocess.TimeoutExpired(f"pid {self.pid}", timeout)
                if handle is None:
                    time.sleep(min(0.1, left or 0.1))
                else:
                    select.select([handle], [], [], min(1.0, left) if left is not None else 1.0)
        finally:
            if handle is not None:
                os.close(handle)
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            try:
                os.kill(self.pid, sig)
            except ProcessLookupError:
                pass

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


class _Process:
    """A TaskVine binary we started, stopped by its own pid."""

    # How long a SIGTERM is given before SIGKILL: a factory removes its HTCondor jobs on the way out.
    stop_grace_s = STOP_TIMEOUT_S

    def __init__(self, argv: list[str], log: Path, env: dict[str, str] | None = None, process=None):
        """Start ARGV (its output appended to LOG), or take PROCESS (one an earlier command started with the same
        ARGV: a kept factory, Adopted) as this one."""
        self.argv = argv
        self.log = log
        self.env = env
        self.group_killed = False
        if process is not None:
            self.proc = process
            return
        log.parent.mkdir(parents=True, exist_ok=True)
        with open(log, "ab") as out:
            self.proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)

    def stop(self) -> int:
        """SIGTERM, then SIGKILL after its grace; returns the exit status. Whatever it started on this machine
        (a local factory's workers) is in its process group, and is ended with it."""
        stop_all([self])
        return self.proc.returncode

    def after_sigterm(self) -> None:
        """What ``stop_all`` does for it right after the SIGTERM, before waiting out its grace: nothing here."""

    def kill_group(self) -> None:
        """SIGKILL to it (if it still runs) and to what is left of its process group; once (its pid, reaped, is
        not ours any more after that)."""
        if self.group_killed:
            return
        self.proc.kill()
        self.proc.wait()
        if isinstance(self.proc, Adopted):  # its pid was never ours: what it started is ended by its start time
            self.group_killed = True  # (stop_all's _kill_left)
            return
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)  # the group keeps the leader's pid, which was ours
        except ProcessLookupError:
            pass  # nothing of the group is left
        self.group_killed = True


def start_time(pid: int) -> int | None:
    """The start time of process PID, which tells it from a later process given the same pid; None when none runs."""
    found = warm.parent_and_start(pid)
    return None if found is None else found[1]


def _process_table() -> dict[int, tuple[int, int]]:
    """Every process of this machine as pid -> (parent pid, start time in clock ticks), from /proc."""
    table = {}
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            found = warm.parent_and_start(entry.name)
            if found is not None:  # (else ended meanwhile)
                table[int(entry.name)] = found
    return table


def _descendants(roots: set[int], table: dict[int, tuple[int, int]] | None = None) -> dict[int, int]:
    """The processes descended from ROOTS now (in TABLE, else read afresh), as pid -> start time (which tells a pid
    reused later apart)."""
    table = _process_table() if table is None else table
    children: dict[int, list[int]] = {}
    for pid, (ppid, _) in table.items():
        children.setdefault(ppid, []).append(pid)
    found, stack = {}, list(roots)
    while stack:
        for child in children.get(stack.pop(), ()):
            if child not in found:
                found[child] = table[child][1]
                stack.append(child)
    return found


def _kill_left(known: dict[int, int]) -> None:
    """SIGKILL to each of KNOWN (pid -> start time) still running as the same process, and to what it started."""
    table = _process_table()
    alive = {pid for pid, start in known.items() if table.get(pid, (0, -1))[1] == start}
    for pid in alive | set(_descendants(alive, table)):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def stop_all(processes: Sequence[_Process | CondorWorker]) -> None:
    """Stop PROCESSES together, in a bounded time whatever their number or state (connected, still connecting,
    busy): SIGTERM to each at once, then SIGKILL to each still running after its grace (a vine_worker in the middle
    of connecting may not heed SIGTERM), then SIGKILL to what is left of each one's process group once it has ended
    (what it started and did not end: a vine_worker's forked helpers, which do not heed SIGTERM either; a local
    factory's workers), and to what each had started at the SIGTERM, wherever its group (a worker's tasks run in
    groups of their own: a worker killed before it ended them would leave them running, reparented). Right after the
    SIGTERM each does what it must at once (``after_sigterm``: an HTCondor factory's jobs removed together), and
    the HTCondor worker jobs among them (CondorWorker) are removed, all together."""
    jobs = [p for p in processes if isinstance(p, CondorWorker)]
    processes = [p for p in processes if not isinstance(p, CondorWorker)]
    started = _descendants({p.proc.pid for p in processes if p.proc.poll() is None})
    for process in processes:
        if process.proc.poll() is None:
            process.proc.send_signal(signal.SIGTERM)
    signalled = time.monotonic()
    acting = [p.after_sigterm for p in processes if type(p).after_sigterm is not _Process.after_sigterm]
    acting += [job.remove for job in jobs]
    if acting:  # together: each may wait on a batch system
        with concurrent.futures.ThreadPoolExecutor(len(acting)) as pool:
            list(pool.map(lambda act: act(), acting))
    for process in sorted(processes, key=lambda p: p.stop_grace_s):
        try:
            process.proc.wait(max(0.0, signalled + process.stop_grace_s - time.monotonic()))
        except subprocess.TimeoutExpired:
            process.proc.kill()
    for process in processes:
        process.kill_group()
    _kill_left(started)


def still_running(processes: Sequence[_Process | CondorWorker]) -> int:
    """How many of PROCESSES' process groups have something running (after ``stop_all``: should be none); HTCondor
    worker jobs are not counted here."""
    left = 0
    for process in processes:
        if isinstance(process, CondorWorker):
            continue
        try:
            os.killpg(process.proc.pid, 0)
            left += 1
        except ProcessLookupError:
            pass
    return left


def _catalog_env() -> dict[str, str]:
    """TaskVine's catalog variables pointing where catalog_address() says."""
    host, _, port = catalog_address().partition(":")
    return {"CATALOG_HOST": host, "CATALOG_PORT": port or "9097"}


def _worker_env_list(patterns: Sequence[str], extra: Mapping[str, str]) -> str:
    """PATTERNS and the names of EXTRA as an HTCondor ``getenv`` match list."""
    names = list(patterns) + [k for k in (*_catalog_env(), *extra) if k not in patterns]
    return ", ".join(names)


def _worker_options(
    password_file: Path | None, ssl: bool, memory_mb: int, disk_mb: int, features: Sequence[str]
) -> list[str]:
    """The options that vine_worker and vine_factory share for the workers they start."""
    options = [f"--password={_safe_path(password_file, 'password file')}"] if password_file is not None else []
    if ssl:
        options.append("--ssl")
    if memory_mb:
        options.append(f"--memory={memory_mb}")
    if disk_mb:
        options.append(f"--disk={disk_mb}")
    for f in features:
        if not SAFE_NAME.match(f):  # validated with the settings already; this is the last line of defence
            raise ValueError(f"worker feature {f!r}: use letters, digits and _ . - only")
    return options + [f"--feature={f}" for f in features]


def remove_tagged_jobs(tag: str, env: Mapping[str, str] | None) -> bool:
    """Remove every HTCondor job tagged TAG with one condor_rm (one transaction of the schedd, whatever their number),
    run in ENV; whether any was found and removed."""
    try:
        done = subprocess.run(
            ["condor_rm", "-constraint", f'{JOB_TAG} == "{tag}"'],
            env=env,
            capture_output=True,
            text=True,
            timeout=REMOVE_TIMEOUT_S,
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


class Factory(_Process):
    """``vine_factory``: keeps between MIN and MAX workers in a batch system (``condor`` for HTCondor, ``local``)
    connected to the manager at HOST:PORT. Stopping it removes the workers it submitted.

    The workers' environment is WORKER_ENV_ALLOW (names and NAME* prefixes) of this process's, plus WORKER_ENV and
    the catalog's variables; nothing else. vine_factory writes ``getenv = true`` into each HTCondor submit
    description (the job gets the environment of condor_submit, i.e. the factory's): so the factory runs with the
    allowed variables and HTCondor's own client variables only, and the submit description's ``getenv`` is
    replaced by the allow-list (a later line wins), which leaves the HTCondor client variables out too. Its
    SCRATCH_DIR holds a copy of the password: give it a private directory.

    KEEP_S > 0 makes it a factory kept between commands (kept.py): it does not end with this process; its workers
    look for the next manager every second once theirs has gone, and end once they have found none for KEEP_S; the
    factory ends once it has seen no manager for KEEP_S + KEPT_FACTORY_SLACK_S (it looks every FACTORY_PERIOD_S).
    Such a factory is started with a JOB_TAG given (its record's), and an earlier command's may be taken as this one
    (PROCESS, see _Process), given the same arguments."""

    def __init__(
        self,
        *,
        batch_type: str,
        manager_host: str,
        manager_port: int,
        scratch_dir: Path,
        password_file: Path | None = None,
        ssl: bool = False,
        min_workers: int = 1,
        max_workers: int = 1,
        cores: int = 1,
        memory_mb: int = 0,
        disk_mb: int = 0,
        features: Sequence[str] = (),
        condor_requirements: str = "",
        worker_env: dict[str, str] | None = None,
        worker_env_allow: Sequence[str] = DEFAULT_WORKER_ENV,
        worker_timeout_s: int = WORKER_IDLE_S,
        log: Path | None = None,
        keep_s: int = 0,
        job_tag: str | None = None,
        process=None,
    ):
        worker_env = dict(worker_env or {})
        if keep_s:  # ended by its own timeout, not this process's end; its workers look for the next manager
            lifetime = [f"--factory-timeout={keep_s + KEPT_FACTORY_SLACK_S}"]
            worker_end = [*_timeout_options(keep_s, worker_timeout_s), f"--max-backoff={KEPT_BACKOFF_S}"]
        else:
            # After the factory's own -t in each worker's command: the idle timeout a safe one (_timeout_options);
            # and a worker ends with its manager's connection, as ours do, instead of looking for it again for its
            # connect timeout (a worker the ended manager released, issue 36).
            lifetime = ["--parent-death"]
            worker_end = [*_timeout_options(worker_timeout_s, worker_timeout_s), "--single-shot"]
        argv = [
            "vine_factory",
            f"--batch-type={batch_type}",
            f"--catalog={catalog_address()}",
            f"--scratch-dir={_safe_path(scratch_dir, 'factory scratch directory')}",
            f"--min-workers={min_workers}",
            f"--max-workers={max_workers}",
            f"--workers-per-cycle={max_workers}",
            f"--cores={cores}",
            f"--timeout={worker_timeout_s}",
            *lifetime,
            *_worker_options(password_file, ssl, memory_mb, disk_mb, features),
            "--extra-options=" + " ".join(worker_end),
        ]
        if condor_requirements:
            if not SAFE_REQUIREMENTS.match(condor_requirements):  # validated with the settings already
                raise ValueError(
                    f"HTCondor requirements {condor_requirements!r}: one line of a ClassAd expression "
                    "without $, \\, ', ` or ;"
                )
            argv.append(f"--condor-requirements={condor_requirements}")
        # Its HTCondor jobs carry a tag of their own, so that stopping it removes them all in one condor_rm.
        self.job_tag = (job_tag or secrets.token_hex(8)) if batch_type == "condor" else None
        if self.job_tag:
            # vine_factory writes --batch-options into each submit description, \n read as a line break.
            argv.append(
                f"--batch-options=getenv = {_worker_env_list(worker_env_allow, worker_env)}"
                f'\\n+{JOB_TAG} = "{self.job_tag}"'
            )
        # Workers report to the same loopback catalog as the factory.
        argv += [f"--env={key}={value}" for key, value in _catalog_env().items()]
        if worker_env:  # the factory's --env does not reach workers of the local batch type; a wrapper does
            assignments = [shlex.quote(f"{key}={value}") for key, value in worker_env.items()]
            argv.append("--wrapper=env " + " ".join(assignments))
        argv += [_safe_host(manager_host, "manager host"), str(manager_port)]
        own = CONDOR_CLIENT_ENV if batch_type == "condor" else ()
        env = {**allowed_environment([*worker_env_allow, *own]), **_catalog_env()}
        super().__init__(argv, log or scratch_dir / "factory.log", env=env, process=process)

    @classmethod
    def adopted(cls, pid: int, started: int, job_tag: str | None) -> Factory:
        """A factory that an earlier command kept (its PID and start time; JOB_TAG: its HTCondor jobs', None for a
        local one), to be stopped (stop_all) with its workers."""
        factory = cls.__new__(cls)
        env = {**allowed_environment(CONDOR_CLIENT_ENV), **_catalog_env()}
        _Process.__init__(factory, [], Path(os.devnull), env=env, process=Adopted(pid, started))
        factory.job_tag = job_tag
        return factory

    def after_sigterm(self) -> None:
        """An HTCondor factory's jobs are removed at once, here: vine_factory would remove them one condor_rm at a
        time on its way out (~0.3 s each: its whole grace at 100 jobs), which is then all it had left to do, so it
        is killed at once; a job it submitted in the meantime is removed by a second condor_rm. The jobs of a
        factory that had ended already (crashed) are removed too. A factory whose jobs cannot be removed so (no
        schedd answers in REMOVE_TIMEOUT_S, none found) is left the rest of its grace to remove them itself."""
        if self.job_tag is None or not remove_tagged_jobs(self.job_tag, self.env) or self.proc.poll() is not None:
            return
        self.kill_group()
        remove_tagged_jobs(self.job_tag, self.env)


class Worker(_Process):
    """One ``vine_worker`` on this machine connected to the manager at HOST:PORT; it ends when it has found no manager
    for CONNECT_S, or has had nothing to do for IDLE_S (see _timeout_options)."""

    stop_grace_s = WORKER_STOP_GRACE_S  # it keeps nothing worth waiting for: its tasks are cancelled with the run

    def __init__(
        self,
        *,
        manager_host: str,
        manager_port: int,
        workspace: Path,
        password_file: Path | None = None,
        ssl: bool = False,
        cores: int = 1,
        memory_mb: int = 0,
        disk_mb: int = 0,
        features: Sequence[str] = (),
        idle_s: int = WORKER_IDLE_S,
        connect_s: int = WORKER_IDLE_S,
        env: dict[str, str] | None = None,
        env_allow: Sequence[str] = DEFAULT_WORKER_ENV,
    ):
        argv = [
            "vine_worker",
            f"--workspace={workspace}",
            f"--cores={cores}",
            *_timeout_options(connect_s, idle_s),
            "--single-shot",
            "--parent-death",
            *_worker_options(password_file, ssl, memory_mb, disk_mb, features),
            _safe_host(manager_host, "manager host"),
            str(manager_port),
        ]
        super().__init__(
            argv,
            workspace.parent / f"{workspace.name}.log",
            env={**allowed_environment(env_allow), **_catalog_env(), **(env or {})},
        )


class CondorWorker:
    """One ``vine_worker`` as an HTCondor job of its own, of a size the run's factories do not make: a job larger
    than the run's workers. (A second factory would start none: a factory counts every worker connected to the
    manager, its own or not.) Submitted here at once; its submit description and HTCondor log are in DIRECTORY (no
    secret: the password file goes with the job as an input). It carries a tag of its own (JOB_TAG) and is removed
    by it (``remove``; ``stop_all`` does so with the rest). The job's environment is allowed like a factory's: the
    variables WORKER_ENV_ALLOW lets through of this process's, plus WORKER_ENV and the catalog's."""

    def __init__(
        self,
        *,
        manager_host: str,
        manager_port: int,
        directory: Path,
        password_file: Path | None = None,
        ssl: bool = False,
        cores: int = 1,
        memory_mb: int = 0,
        disk_mb: int = 0,
        features: Sequence[str] = (),
        condor_requirements: str = "",
        worker_env: dict[str, str] | None = None,
        worker_env_allow: Sequence[str] = DEFAULT_WORKER_ENV,
        idle_s: int = WORKER_IDLE_S,
    ):
        binary = shutil.which("vine_worker")
        if binary is None:
            raise ValueError("vine_worker is not on PATH: install cctools where this runs")
        if condor_requirements and not SAFE_REQUIREMENTS.match(condor_requirements):  # validated with the settings
            raise ValueError(f"HTCondor requirements {condor_requirements!r}: one line of a ClassAd expression")
        worker_env = dict(worker_env or {})
        self.job_tag = secrets.token_hex(8)
        self.size = (cores, memory_mb, disk_mb)
        # In the job's sandbox the password file is the input of that name, which HTCondor brings there.
        password = Path(password_file.name) if password_file is not None else None
        argv = [
            f"--cores={cores}",
            *_timeout_options(WORKER_IDLE_S, idle_s),
            "--single-shot",
            "--parent-death",
            *_worker_options(password, ssl, memory_mb, disk_mb, features),
            _safe_host(manager_host, "manager host"),
            str(manager_port),
        ]
        lines = [
            "universe = vanilla",
            f"executable = {_safe_path(binary, 'vine_worker')}",
            "transfer_executable = true",
            f'arguments = "{" ".join(argv)}"',
            "should_transfer_files = yes",
            "when_to_transfer_output = on_exit",
            "notification = never",
            f"log = {_safe_path(directory / 'worker.log', 'worker directory')}",
            f"output = {directory / 'worker.out'}",
            f"error = {directory / 'worker.err'}",
            f"request_cpus = {cores}",
            f"request_memory = {memory_mb or CONDOR_DEFAULT_MB}",
            f"request_disk = {(disk_mb or CONDOR_DEFAULT_MB) * 1024}",  # KiB
            f"getenv = {_worker_env_list(worker_env_allow, worker_env)}",
            f'+{JOB_TAG} = "{self.job_tag}"',
            "+JobMaxSuspendTime = 0",
        ]
        if password_file is not None:
            lines.append(f"transfer_input_files = {_safe_path(password_file, 'password file')}")
        if condor_requirements:
            lines.append(f"requirements = ({condor_requirements})")
        directory.mkdir(parents=True, exist_ok=True)
        self.submit_file = directory / "worker.submit"
        self.submit_file.write_text("\n".join(lines) + "\nqueue\n")
        self.env = {
            **allowed_environment([*worker_env_allow, *CONDOR_CLIENT_ENV]),
            **_catalog_env(),
            **worker_env,
        }
        try:
            done = subprocess.run(
                ["condor_submit", "-terse", str(self.submit_file)],
                env=self.env,
                capture_output=True,
                text=True,
                timeout=SUBMIT_TIMEOUT_S,
            )
        except (OSError, subprocess.TimeoutExpired) as e:
            self.remove()  # the schedd may have queued it after all
            raise RuntimeError(f"condor_submit of {self.submit_file} did not answer: {e}") from e
        if done.returncode != 0:
            self.remove()
            said = " / ".join((done.stderr or done.stdout).strip().splitlines()[-3:]) or "nothing"
            raise RuntimeError(f"condor_submit of {self.submit_file} failed: {said}")
        self.job_id = done.stdout.split()[0] if done.stdout.split() else ""
        self.submitted = time.monotonic()

    def remove(self) -> bool:
        """Remove the job (wherever it is: idle, running); whether it was found and removed."""
        return remove_tagged_jobs(self.job_tag, self.env)

    def idle(self) -> bool:
        """Whether the job is still idle in the queue (waiting for a slot), as condor_q says; False when that cannot
        be told."""
        try:
            done = subprocess.run(
                ["condor_q", "-constraint", f'{JOB_TAG} == "{self.job_tag}"', "-af", "JobStatus"],
                env=self.env,
                capture_output=True,
                text=True,
                timeout=REMOVE_TIMEOUT_S,
            )
        except (OSError, subprocess.TimeoutExpired):
            return False
        return done.returncode == 0 and done.stdout.split() == [str(CONDOR_IDLE)]
