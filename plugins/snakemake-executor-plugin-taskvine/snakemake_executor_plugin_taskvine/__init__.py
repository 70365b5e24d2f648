"""Snakemake executor plugin for TaskVine: ``snakemake --executor taskvine``.

Each Snakemake job (or group job) becomes one TaskVine task that runs the job's ``snakemake`` command on a worker.
The plugin runs the TaskVine manager and, unless told otherwise, the workers: local ``vine_worker`` processes, or a
TaskVine factory that submits them to HTCondor. Settings are ``--taskvine-<name>`` flags or
``SNAKEMAKE_TASKVINE_<NAME>`` variables.
"""

# No `from __future__ import annotations` here: Snakemake reads the settings' field types at run time.
import atexit
import os
import secrets
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import AsyncGenerator, List, Optional

from snakemake_interface_common.exceptions import WorkflowError
from snakemake_interface_executor_plugins.executors.base import SubmittedJobInfo
from snakemake_interface_executor_plugins.executors.remote import RemoteExecutor
from snakemake_interface_executor_plugins.jobs import JobExecutorInterface
from snakemake_interface_executor_plugins.settings import CommonSettings, ExecutorSettingsBase, SharedFSUsage

from . import kept, provision, validation, warm
from .dispatcher import Dispatcher, DispatcherError
from .failures import describe_failure
from .scheduler import release_scheduler_timers
from .stragglers import Stragglers
from .tasks import Sources, comma_separated, job_task, relative_name
from .taskvine import (
    CREDENTIAL_ENV,
    DEFAULT_WORKER_ENV,
    SAFE_PATH,
    SCHEDULERS,
    Adopted,
    CondorWorker,
    Factory,
    private_directory,
    remove_private_directory,
    stop_all,
    write_password_file,
)

STATUS_POLL_S = 0.2
STATUS_POLL_S_PER_JOB = 50e-6  # with 30,000 active jobs: a check every 1.5 s
SLOT_WAIT_S = 600  # an HTCondor job of a worker for larger jobs still idle after this is said (Executor.slot_waits)
SLOT_CHECK_S = 60
# How long the kept workers' port is tried while taken: the previous command, which does not wait for its manager's
# end, may have left it to end up to a second (its turn) later.
KEPT_PORT_WAIT_S = 3.0
# Where a manager of kept workers listens when no port is set: below Linux's ephemeral ports (32768-60999).
KEPT_PORTS, KEPT_PORTS_SPAN = (20000, 30000), 100


def port_allowed(port: int, wanted) -> bool:
    """Whether PORT is one the settings allow (WANTED: a port, a (low, high) range, or 0: any)."""
    if isinstance(wanted, tuple):
        return wanted[0] <= port <= wanted[1]
    return port > 0 and wanted in (0, port)


def kept_ports() -> tuple[int, int]:
    """The ports a manager whose workers are kept listens on when the settings name none: a random range of
    KEPT_PORTS, not TaskVine's first free port from 1024, which the next manager on this host would take once the
    kept one's manager has ended (and the kept workers would look for theirs there)."""
    low = secrets.SystemRandom().randrange(KEPT_PORTS[0], KEPT_PORTS[1] - KEPT_PORTS_SPAN)
    return low, low + KEPT_PORTS_SPAN


def excerpt(path: Path, lines: int = 2) -> str:
    """The first and the last LINES non-empty lines of the file at PATH (its first and last 4 KB: a program's usage
    error comes first, a failure last), joined by " / "; "nothing" when it is empty or cannot be read."""
    try:
        with open(path, "rb") as f:
            head = f.read(4096).decode(errors="replace")
            f.seek(max(f.tell(), f.seek(0, os.SEEK_END) - 4096))
            rest = f.read().decode(errors="replace")
    except OSError:
        return "nothing"
    first = [line.strip() for line in head.splitlines() if line.strip()]
    last = [line.strip() for line in (head + rest).splitlines() if line.strip()][-lines:]
    shown = first[:lines] + [line for line in last if line not in first[:lines]]
    return " / ".join(shown) or "nothing"


def _setting(default, help: str, **extra):
    return field(default=default, metadata={"help": help, "env_var": True, "required": False, **extra})


@dataclass
class ExecutorSettings(ExecutorSettingsBase):
    port: int = _setting(
        0,
        "TCP port of the TaskVine manager; 0 picks a free one. The manager listens on every "
        "interface (TaskVine cannot bind one); workers connect to it, it connects to none.",
    )
    port_range: Optional[str] = _setting(
        None,
        "LOW-HIGH: the manager listens on the first free port in this range (for a firewall that opens only "
        "these ports to the worker nodes); instead of --taskvine-port.",
    )
    manager_name: Optional[str] = _setting(
        None,
        "Name under which the manager reports to the catalog server (workers can then find it by name). "
        "Unnamed managers do not report.",
    )
    password_file: Optional[Path] = _setting(
        None,
        "File holding the password that workers must present (mode 0600; a path of letters, digits and "
        "_ . / + - only). Default: a random password generated for each run in a private directory (mode 0700, "
        "in $TMPDIR, removed when the run ends) and handed to the workers this plugin starts as a file.",
    )
    ssl: bool = _setting(
        False,
        "Encrypt manager-worker connections with TLS (a self-signed certificate per run, "
        "made in the run's private directory and removed with it).",
    )
    workers: str = _setting(
        "local",
        "Who starts the workers: 'local' (vine_worker processes on this machine), 'condor' (a TaskVine "
        "factory submits them to HTCondor) or 'none' (someone else; connect them to this manager's port).",
        choices=list(provision.WORKER_MODES),
    )
    min_workers: int = _setting(1, "Workers the factory keeps running even when idle.")
    max_workers: int = _setting(4, "Most workers the factory starts.")
    worker_cores: int = _setting(1, "Cores of each worker the plugin starts.")
    worker_memory_mb: int = _setting(2048, "Memory (MB) of each worker the plugin starts; 0 lets TaskVine decide.")
    worker_disk_mb: int = _setting(8192, "Disk (MB) of each worker the plugin starts; 0 lets TaskVine decide.")
    worker_max_cores: int = _setting(
        0,
        "Workers grow to fit: a job that needs more than the workers have (cores: its threads; memory: mem_mb; disk: "
        "disk_mb) gets a worker of its size (local, or an HTCondor job of its own; with worker groups, of the "
        "largest group that has the features it needs), with at most this many cores; 0: this machine's cores "
        "(local), the most cores a slot of the pool has (condor). A job above the most fails at once naming its "
        "rule and resource.",
    )
    worker_max_memory_mb: int = _setting(
        0,
        "The most memory (MB) of a worker started for a larger job; 0: this machine's memory (local), the most "
        "a slot of the pool has (condor).",
    )
    worker_max_disk_mb: int = _setting(
        0,
        "The most disk (MB) of a worker started for a larger job; 0: the free disk of the run directory (local), "
        "the most a slot of the pool has (condor).",
    )
    condor_requirements: Optional[str] = _setting(
        None,
        "HTCondor requirements expression for the worker jobs (with --taskvine-workers condor): one line of "
        "letters, digits, spaces, double quotes and ClassAd operators; no $, \\, ', ` or ;.",
    )
    worker_features: Optional[str] = _setting(
        None,
        "Comma-separated features the started workers advertise (vine_worker --feature); jobs ask for "
        "them with the resource taskvine_features. Each of letters, digits and _ . - (not first).",
    )
    worker_groups: Optional[Path] = _setting(
        None,
        "YAML file whose 'worker_groups' list describes groups of workers, each started by its own factory "
        "(e.g. one per rack): name, features, condor_requirements, min_workers, max_workers, cores, memory_mb, "
        "disk_mb; sizes left out come from the settings above; names and features as for "
        "--taskvine-worker-features, requirements as for --taskvine-condor-requirements. Tasks see their worker's "
        "group in SNAKEMAKE_TASKVINE_WORKER_GROUP.",
    )
    worker_env: Optional[str] = _setting(
        None,
        "Comma-separated environment variables that the workers this plugin starts get from this one "
        "(names, or prefixes ending in *; 'default' stands for the default list); nothing else of the environment "
        "reaches them (with HTCondor it would be in the job ad, which every user of the pool can read). Default: "
        + ",".join(DEFAULT_WORKER_ENV)
        + ". E.g. 'default,MY_SITE_*'. Hand tokens over as files "
        "(BEARER_TOKEN_FILE, X509_USER_PROXY), not as values.",
    )
    credential_env: Optional[str] = _setting(
        ",".join(CREDENTIAL_ENV),
        "Comma-separated environment variables of this process that name a credential file (an X.509 proxy, a "
        "bearer token); 'none' for none. Each task gets each such file that exists as an input (never on a command "
        "line, in the environment text or in a log), readable by its owner only, with the variable pointing at it "
        "in the task's sandbox; a file that changes (a renewal) is sent anew to the tasks submitted after, under a "
        "new name in the workers' caches.",
    )
    prefer_wait_s: float = _setting(
        30.0,
        "A job with the resource taskvine_prefer (comma-separated features) waits for a worker with those "
        "features; once it has waited this many seconds while workers without them sat idle, it runs on one of "
        "those instead.",
    )
    scheduler: str = _setting(
        "files",
        "TaskVine's scheduling mode: 'files' (where the task's input files already are), 'time', "
        "'fcfs', 'rand' or 'worst'.",
        choices=list(SCHEDULERS),
    )
    library: bool = _setting(
        False,
        "Run each job as a call of a TaskVine library (one per worker, Snakemake imported once; each call a "
        "forked child) instead of a process of its own: saves most of a short job's ~2 s. A call takes one of the "
        "worker's function slots (one core, its share of the worker's memory), so jobs with more threads, or more "
        "mem_mb than that share, run as processes of their own.",
    )
    library_preload: Optional[str] = _setting(
        None,
        "With --taskvine-library: modules (comma-separated, e.g. coffea.processor) the library imports once, before "
        "its first call. A job's command `$TASKVINE_WARM_PYTHON MODULE ARGS` then runs `python -m MODULE ARGS` "
        "forked from the library's process, with them imported, instead of in a new interpreter (where the variable "
        "is unset: write `${TASKVINE_WARM_PYTHON:-python -m} MODULE ARGS` and the same command runs cold).",
    )
    local_preload: Optional[str] = _setting(
        None,
        "Modules (comma-separated) imported once, while the run starts, by a server on this node for the warm "
        "commands of the local rules' jobs (`$TASKVINE_WARM_PYTHON MODULE ARGS`, as with --taskvine-library-preload; "
        "e.g. a small campaign's last step). The server ends with the run.",
    )
    straggler_factor: float = _setting(
        3.0,
        "A task that has run this many times longer than the median of its rule's finished tasks (and at least "
        "--taskvine-straggler-min-s) gets a second copy on a free slot; the first copy to succeed wins and the other "
        "is cancelled, so the job still ends once. 0 turns this off. Only without a shared filesystem "
        "(--shared-fs-usage none), where each copy writes its outputs in its own sandbox and only the winner's "
        "come back; with a shared filesystem both copies would write the same files, so there are no copies.",
    )
    straggler_min_s: float = _setting(
        60.0, "No task is a straggler before it has run this many seconds (so short jobs are never copied)."
    )
    max_tasks: int = _setting(
        0,
        "Most of the run's tasks TaskVine holds at once (running or waiting for a worker); further jobs wait in "
        "this plugin's own queue, in the order Snakemake handed them over. 0: twice the cores of the connected "
        "workers, at least 100. So a campaign can run with --jobs unlimited (Snakemake hands over every ready job "
        "at once and its scheduler's cost per job stays flat) without flooding TaskVine's scheduler.",
    )
    retries: int = _setting(
        3,
        "How often a task is dispatched again after an infrastructure failure, such as "
        "a lost worker, before its job fails.",
    )
    environment: Optional[Path] = _setting(
        None,
        "A packed environment (a tarball with bin/run_in_env at its top, as cctools' poncho_package_create or a "
        "workflow's own packer makes) that "
        "every task runs in: sent to each worker once, unpacked there once and kept for the run, so that workers "
        "need no Python packages installed (also workers this plugin did not start). Jobs then run `python` from "
        "it, not this interpreter's path. A --taskvine-worker-groups file (a site config) may name it instead, "
        "under the key taskvine_environment. Default: none; the workers' own Python runs the jobs.",
    )
    run_info_dir: Path = _setting(
        Path(".snakemake/taskvine"), "Directory for the manager's logs, the factory's files and failed jobs' logs."
    )
    keep_workers_s: int = _setting(
        0,
        "Keep the workers this many seconds after the run for the next command in the same working directory "
        "(the loop of changing a workflow and running it again): the factories stay and the workers look for the "
        "next manager, which listens on the same port with the same password and takes them without waiting for "
        "the batch system. The workers end once they have seen no manager for this long (their factories ~1-2 "
        "min later); after Ctrl-C or a failure of the manager they end with the run, and a command with 0 ends any "
        "kept before. Needs workers started by factories (--taskvine-workers condor, or local without "
        "--taskvine-worker-groups). Without --taskvine-port(-range) the manager listens on a random port of "
        "20000-30000. 0: workers end with the run.",
    )


common_settings = CommonSettings(
    # Jobs run elsewhere, as `snakemake` commands on workers.
    non_local_exec=True,
    # A shared filesystem is Snakemake's default; --shared-fs-usage none is supported too.
    implies_no_shared_fs=False,
    # Without a shared filesystem this plugin ships the sources itself (as TaskVine files).
    job_deploy_sources=False,
    pass_default_storage_provider_args=True,
    pass_default_resources_args=True,
    # The workflow's envvars (and storage plugins' credentials) go with each task as its environment, not as
    # `export NAME=value` on its command line (seen by `ps` on the worker, and quoted with repr, not for a shell).
    pass_envvar_declarations_to_cmd=False,
    auto_deploy_default_storage_provider=False,
    init_seconds_before_status_checks=0,
    # Local inputs and outputs are moved by TaskVine, not by a storage plugin.
    can_transfer_local_files=True,
)


class Executor(RemoteExecutor):
    def __post_init__(self):
        settings = self.workflow.executor_settings
        validation.validate(settings)
        self.environment, found = provision.environment_file(settings)
        if found:
            raise WorkflowError("The TaskVine executor's settings need fixing:\n  - " + "\n  - ".join(found))
        if settings.workers == "condor":
            provision.check_condor_reachable()
        self.shared_fs = SharedFSUsage.INPUT_OUTPUT in self.workflow.storage_settings.shared_fs_usage
        self.workdir = os.path.abspath(str(self.workflow.workdir_init))
        # Unique per run, even for two runs started in the same second.
        self.run_dir = (
            Path(settings.run_info_dir).absolute() / f"{time.strftime('%Y%m%dT%H%M%S')}-{secrets.token_hex(3)}"
        )
        self.run_dir.mkdir(parents=True, exist_ok=False)
        # The run's secrets, and the factories' files (they copy the password), outside the checkout; removed at the
        # end of the run (shutdown).
        self.private_dir = private_directory()
        self._sources: Optional[Sources] = None
        self.call_memory_mb = provision.call_memory_mb(settings)
        # Per worker group, the size of its largest worker (grown when a worker is started for a larger job); and
        # the most a worker may grow to, asked (of the machine or the pool) at the first job that needs it.
        self.groups = provision.run_groups(settings)
        self.sizes = None if self.groups is None else {g.name: (g.cores, g.memory_mb, g.disk_mb) for g in self.groups}
        self._most_worker: Optional[tuple[int, int, int]] = None
        # The HTCondor jobs of workers started for larger jobs, with the rule each was started for, until said or
        # seen out of the queue's idle state (slot_waits).
        self.waiting_for_slot: dict = {}
        self.next_slot_check = 0.0
        self.dispatcher: Optional[Dispatcher] = None
        self.provisioned: list = []
        self.warm_server: Optional[tuple[int, str]] = None
        self.kept: Optional[kept.Kept] = None
        self.factories_ended: list = []  # (check_factories: said once)
        self.cancelled = False
        try:
            self._start(settings)
        except BaseException:  # stop what was started and remove the secrets, then let the error through
            self.stop_workers()
            raise
        # Snakemake calls shutdown() only when it scheduled something: a run with nothing to do ends without it, and
        # the workers and factories started here would outlive it (seen: a factory for ~1.5 min). Shut down at exit.
        atexit.register(self.shutdown)

    def credential_files(self, setting: str | None) -> dict[str, str]:
        """{variable: absolute path} of each variable SETTING names that names a file here; one that names no file
        is said once (its tasks get no credential)."""
        files = {}
        for name in validation.credential_names(setting):
            path = os.environ.get(name)
            if path and os.path.isfile(path):
                files[name] = os.path.abspath(path)
            elif path:
                self.logger.warning(f"TaskVine: ${name} names {path}, which is no file: tasks get no {name}")
        return files

    def _claim_kept(self, settings) -> Optional[kept.Kept]:
        """The directory of the workers kept for this working directory (kept.py), locked for this run, when this
        run keeps workers; None when it does not, or another command holds it (said). A run that does not keep
        workers stops any that an earlier one kept."""
        keep, where = settings.keep_workers_s > 0, kept.directory_for(self.workdir)
        if not keep and not where.exists():
            return None
        if keep and not SAFE_PATH.match(str(where)):  # (vine_factory pastes its files' paths into shell commands)
            raise WorkflowError(
                f"--taskvine-keep-workers-s: the kept workers' directory {where} has characters TaskVine's factory "
                "cannot take: set XDG_STATE_HOME to a directory of your own whose path has letters, digits and "
                "_ . / + - only"
            )
        try:
            claimed = kept.Kept.claim(self.workdir)
        except OSError as e:
            if not keep:  # (nothing to stop that this user could have kept there)
                self.logger.warning(f"TaskVine: cannot look for kept workers in {where}: {e}")
                return None
            raise WorkflowError(
                f"--taskvine-keep-workers-s: cannot use {where} for the kept workers "
                f"({e}); make it yours with mode 0700, or set XDG_STATE_HOME to a directory of your own"
            ) from e
        if claimed is None:
            if keep:
                self.logger.info(
                    "TaskVine: another command in this working directory holds the kept workers: this run starts its "
                    "own, and keeps none"
                )
            return None
        if not keep:
            claimed.stop()
            claimed.release()
            return None
        return claimed

    def _dispatcher(self, settings, port, port_wait_s: float = 0) -> Dispatcher:
        """The run's manager process (not started yet), listening on PORT (a port, a (low, high) range, or 0: any),
        trying a taken PORT again for PORT_WAIT_S."""
        return Dispatcher(
            dict(
                port=port,
                port_wait_s=port_wait_s,
                name=settings.manager_name,
                password_file=self.password_file,
                ssl=settings.ssl,
                run_info_dir=self.run_dir / "manager",
                scheduler=settings.scheduler,
                library=settings.library,
                library_preload=tuple(comma_separated(settings.library_preload)),
                kept=self.kept is not None,
                secrets_dir=self.private_dir,
                environment=self.environment,
                credential_files=self.credential_files(settings.credential_env),
            ),
            prefer_wait_s=settings.prefer_wait_s,
            stragglers=Stragglers(settings.straggler_factor if not self.shared_fs else 0, settings.straggler_min_s),
            max_tasks=settings.max_tasks,
        )

    def _start(self, settings):
        self.kept = self._claim_kept(settings)
        if settings.password_file:
            self.password_file = Path(settings.password_file).absolute()
        elif self.kept is not None:
            self.password_file = self.kept.password_file()
        else:
            self.password_file = write_password_file(self.private_dir)
        port, wanted = 0, validation.port_range(settings.port_range) or settings.port
        if self.kept is not None and self.kept.alive() and port_allowed(self.kept.port, wanted):
            self.dispatcher = self._dispatcher(settings, self.kept.port, KEPT_PORT_WAIT_S)
            try:
                port = self.dispatcher.start()
            except DispatcherError as e:  # (its port taken since): the kept workers cannot reach this run
                self.logger.info(f"TaskVine: the kept workers' port {self.kept.port} is not free ({e}): new workers")
                self.kept.stop()
        if not port:
            if self.kept is not None and not wanted:
                wanted = kept_ports()
            self.dispatcher = self._dispatcher(settings, wanted)
            port = self.dispatcher.start()
        self.manager_port = port
        self.logger.info(
            f"TaskVine manager listening on port {port}; run directory {self.run_dir}"
            + (f"; tasks run in the environment {self.environment}" if self.environment else "")
        )
        self.provisioned = provision.start_workers(
            settings,
            manager_port=port,
            password_file=self.password_file,
            run_dir=self.run_dir,
            private_dir=self.private_dir,
            kept=self.kept,
        )
        if self.kept is not None:
            adopted = [str(f.proc.pid) for f in self.provisioned if isinstance(f.proc, Adopted)]
            if adopted:
                self.logger.info(
                    f"TaskVine: the workers kept by an earlier command connect again (their factories: pid "
                    f"{', '.join(adopted)})"
                )
        # The local rules' warm commands: their modules import while the workers connect and the first jobs run.
        preload = comma_separated(settings.local_preload)
        self.warm_server = warm.serve(preload, str(self.run_dir / "warm-server.log")) if preload else None

    def get_python_executable(self):
        # With a packed environment the job's interpreter is the environment's `python` (first on the task's PATH),
        # never this process's path, which the workers need not have.
        return "python" if self.environment is not None else super().get_python_executable()

    def additional_general_args(self):
        # Without a shared filesystem the job runs in its worker sandbox, where the sources were shipped: override
        # the absolute --directory that Snakemake passes when the workflow directory was given explicitly.
        return "" if self.shared_fs else "--directory ."

    def format_job_exec(self, job: JobExecutorInterface) -> str:
        command = super().format_job_exec(job)
        if not self.shared_fs:
            # Config files are shipped under their paths relative to the workflow directory; name them so.
            for path in self.workflow.configfiles:
                command = command.replace(str(path), relative_name(str(path), self.workdir, job, "config file"))
        return command

    def sources(self) -> Sources:
        """The workflow's source files (Snakefile, includes, scripts, config files) as jobs without a shared
        filesystem are sent them, made once per run (at its first job)."""
        if self._sources is None:
            self._sources = Sources.of(sorted(self.workflow.dag.get_sources()), self.workdir)
        return self._sources

    def too_large(self, job: JobExecutorInterface, spec, size) -> Optional[str]:
        """Why no worker of at most SIZE (cores, memory MB, disk MB: the most a worker may grow to) can take JOB's task
        SPEC, naming the resource and the flag that raises it; or None."""
        needs = provision.needs(spec)
        limits = zip(needs, size, provision.RESOURCES, provision.MOST_FLAGS)
        for need, most, (unit, worker_unit, lower), (what, flag) in limits:
            if most and need > most:
                return (
                    f"rule {job.name} needs {need} {unit}, but {what} {most}{worker_unit}: lower {lower}, "
                    f"or raise {flag}"
                )
        return None

    def most_worker(self) -> tuple[int, int, int]:
        """The most a worker started for a larger job may have (provision.most_worker), asked once; what went wrong
        asking is said once."""
        if self._most_worker is None:
            self._most_worker, problem = provision.most_worker(self.workflow.executor_settings, self.run_dir)
            if problem:
                self.logger.warning(
                    f"TaskVine: cannot tell the size of the pool's slots ({problem}): no worker larger than the "
                    "run's is started unless --taskvine-worker-max-cores, -memory-mb and -disk-mb say how large"
                )
        return self._most_worker

    def fit(self, job: JobExecutorInterface, spec) -> Optional[str]:
        """None once a worker of this run can take JOB's task SPEC -- one of its size started now (on this machine,
        or as an HTCondor job) if it is within the most a worker may have; else why not (TaskVine would wait for
        such a worker for ever)."""
        if self.sizes is None:  # someone else's workers: their size is not known here
            return None
        settings = self.workflow.executor_settings
        able = provision.able_groups(self.groups, spec)
        if not able:
            offered = sorted({f for g in self.groups for f in g.features})
            return (
                f"rule {job.name} needs the worker features {', '.join(spec.features)} (its taskvine_features), "
                f"which no worker of this run has ({', '.join(offered) or 'none'}): change its taskvine_features, "
                "or give workers those features (--taskvine-worker-features, or a group's features in "
                "--taskvine-worker-groups)"
            )
        if any(provision.covers(self.sizes[g.name], spec) for g in able):
            return None
        said = self.too_large(job, spec, self.most_worker())
        if said is not None:
            return said
        group = max(able, key=lambda g: self.sizes[g.name])
        size = provision.grown(provision.requested(settings, self.sizes[group.name]), spec)
        try:
            worker = provision.fitting_worker(
                settings,
                group,
                size,
                manager_port=self.manager_port,
                password_file=self.password_file,
                directory=self.run_dir / "workers" / f"fit-{len(self.provisioned)}",
            )
        except WorkflowError as e:
            return f"rule {job.name} needs more than the workers have, and {e}"
        self.provisioned.append(worker)
        if isinstance(worker, CondorWorker):
            self.waiting_for_slot[worker] = job.name
        self.sizes[group.name] = size
        where = "a local worker" if settings.workers == "local" else "an HTCondor worker job"
        self.logger.info(
            f"rule {job.name} needs more than the workers have: started {where} of {size[0]} cores, "
            f"{size[1] or 'all the'} MB of memory and {size[2] or 'all the'} MB of disk"
            + (f" (group {group.name})" if settings.worker_groups else "")
        )
        return None

    def slot_waits(self) -> None:
        """Say (once each) which HTCondor jobs of workers started for larger jobs have waited SLOT_WAIT_S for a slot:
        the run waits on them. Asked of condor_q once a minute at most, and only while some wait."""
        now = time.monotonic()
        if not self.waiting_for_slot or now < self.next_slot_check:
            return
        self.next_slot_check = now + SLOT_CHECK_S
        for worker, rule in list(self.waiting_for_slot.items()):
            since = worker.submitted
            if now - since < SLOT_WAIT_S:
                continue
            del self.waiting_for_slot[worker]
            if worker.idle():
                cores, memory_mb, disk_mb = worker.size
                self.logger.warning(
                    f"TaskVine: the HTCondor job {worker.job_id} of a worker of {cores} cores, {memory_mb} MB of "
                    f"memory and {disk_mb} MB of disk, for rule {rule}, has waited {int(now - since) // 60} min for "
                    "a slot: no free slot of the pool is that large (the run's own idle workers keep theirs until it "
                    "ends), or its requirements match no machine. Free slots, run fewer workers "
                    "(--taskvine-max-workers), or lower the rule's threads, mem_mb or disk_mb."
                )

    def check_factories(self) -> None:
        """A factory that has ended during the run starts and replaces no worker: one that failed (a non-zero exit
        status: e.g. a vine_factory that refused its options) fails the run, naming its log and what it said, rather
        than let it wait for workers for ever; one that ended otherwise is said once (the workers it left may still
        finish the run)."""
        for factory in [p for p in self.provisioned if isinstance(p, Factory) and p not in self.factories_ended]:
            code = factory.proc.poll()
            if code is None:
                continue
            self.factories_ended.append(factory)
            said = excerpt(factory.log)
            if code != 0:
                raise WorkflowError(
                    f"the TaskVine factory {factory.argv[0]} ended with exit status {code} during the run, so no "
                    f"worker is started: its log {factory.log} says: {said}. Check the factory's options "
                    "against the installed cctools (vine_factory --help) and the batch system"
                )
            self.logger.warning(
                f"TaskVine: a factory ended during the run (its log {factory.log}: {said}); the workers it started "
                "go on, but none is started or replaced"
            )

    def run_job(self, job: JobExecutorInterface):
        spec = job_task(
            job,
            self.format_job_exec(job),
            shared_fs=self.shared_fs,
            workdir=self.workdir,
            retries=self.workflow.executor_settings.retries,
            sources=Sources() if self.shared_fs else self.sources(),
            function=self.workflow.executor_settings.library,
            call_memory_mb=self.call_memory_mb,
            env=self.envvars(),
        )
        # Debug level (shown with --verbose only). The command holds no secret: the password is a file on the
        # worker, and the workflow's envvars go as the task's environment (spec.env), which is not logged.
        self.logger.debug(f"TaskVine task {spec.tag}{' (library call)' if spec.function else ''}: {spec.command}")
        reason = self.fit(job, spec)
        if reason is not None:  # fail now, naming the rule and the resource, rather than wait for ever
            # Not through report_job_error: Snakemake would print the job's shell command "(command exited with
            # non-zero exit code)" and a pointer to logs, of a job that never ran.
            self.logger.error(f"Error in rule {job.name}, jobid {job.jobid}: not run: {reason}")
            self.workflow.scheduler.error_callback(job)
            return
        self.dispatcher.submit(spec)
        self.report_job_submission(SubmittedJobInfo(job=job, external_jobid=spec.tag))

    def print_job_error(self, job_info: SubmittedJobInfo, msg=None, **kwargs):
        """Snakemake's remote executors append their hint ("For further error details ...") to the message with no
        space between: the message ends with one."""
        super().print_job_error(job_info, msg=f"{msg.rstrip()} " if msg else msg, **kwargs)

    async def check_active_jobs(self, active_jobs: List[SubmittedJobInfo]) -> AsyncGenerator[SubmittedJobInfo, None]:
        # A check is a lookup in memory, not a query to a batch system: poll often. But Snakemake hands every active
        # job to every check (a campaign may have all of its ~30,000 jobs active), so a check costs ~1 µs per active
        # job: the checks are spaced out with the active jobs, at most ~2% of a core.
        # Set before anything else: Snakemake's status thread makes its first check (nothing active) before
        # __post_init__, and the wait after a check that set nothing is Snakemake's seconds_between_status_checks
        # (10 s): every job of a short run was seen up to 10 s after it had ended.
        self.next_seconds_between_status_checks = max(STATUS_POLL_S, len(active_jobs) * STATUS_POLL_S_PER_JOB)
        if not active_jobs:  # (before __post_init__ there is no dispatcher yet)
            return
        self.dispatcher.collect()
        if self.dispatcher.error is not None:
            raise WorkflowError(f"the TaskVine manager failed: {self.dispatcher.error}")
        for note in self.dispatcher.take_notes():
            self.logger.info(note)
        self.slot_waits()
        self.check_factories()
        results = self.dispatcher.take_results()
        for job_info in active_jobs:
            result = results.pop(job_info.external_jobid, None) if results else None
            if result is None:
                yield job_info
            elif result.successful:
                self.report_job_success(job_info)
            else:
                message, log = describe_failure(job_info.job, result, self.run_dir / "failed")
                self.report_job_error(job_info, msg=message, aux_logs=[str(log)])
        if results:  # of jobs submitted after Snakemake began this check: the next check has them
            self.dispatcher.keep_results(results)
        if self.dispatcher.stopped is not None:  # after the results that came before it: those jobs are done
            raise WorkflowError(self.dispatcher.stopped)

    def cancel_jobs(self, active_jobs: List[SubmittedJobInfo]):
        for job_info in active_jobs:
            self.dispatcher.cancel(job_info.external_jobid)

    def cancel(self):
        self.cancelled = True  # (Ctrl-C, or Snakemake's own error: nothing is kept)
        super().cancel()

    def shutdown(self):
        atexit.unregister(self.shutdown)  # once: here, or at exit when Snakemake had nothing to do
        super().shutdown()
        self.stop_workers(keep=self.keeping())
        release_scheduler_timers(getattr(self.workflow, "scheduler", None))

    def keeping(self) -> bool:
        """Whether the run's workers stay for the next command: asked (--taskvine-keep-workers-s), and the run ended
        neither by Ctrl-C nor by a failure of its manager (a job's failure keeps them: the user mends it and runs
        again)."""
        return (
            self.kept is not None
            and not self.cancelled
            and self.dispatcher is not None
            and self.dispatcher.alive()
            and self.dispatcher.error is None
            and self.dispatcher.stopped is None
        )

    def stop_workers(self, keep: bool = False):
        # All at once: the time to stop stays bounded (STOP_TIMEOUT_S) with any number of workers and factories.
        provisioned, self.provisioned = self.provisioned, []
        # (With kept workers every factory is a kept one: a worker started for a larger job is no factory's.)
        factories = [p for p in provisioned if isinstance(p, Factory)]
        stopping = [p for p in provisioned if not keep or p not in factories]
        if self.dispatcher is not None:
            # Its manager ends at its next turn (up to a second later): meanwhile what was provisioned is stopped, so
            # the run's end waits for the longer of the two, not for both. (The factories are signalled at once; a
            # worker a factory starts after the manager's end finds no manager and is removed with its factory's jobs.)
            self.dispatcher.ask_to_stop(keep=keep)
        stop_all(stopping)
        if self.dispatcher is not None and not keep:  # (a kept run's manager ends by itself, releasing its workers)
            self.dispatcher.stop()
        if self.kept is not None:
            if keep:
                self.kept.keep(self.workflow.executor_settings.keep_workers_s)
                self.logger.info(
                    f"TaskVine: the workers stay {self.workflow.executor_settings.keep_workers_s} s for the next "
                    "command in this working directory (--taskvine-keep-workers-s)"
                )
            elif factories:  # (stopped above)
                self.kept.forget()
            else:  # (the run failed before it took them)
                self.kept.stop()
            self.kept.release()
        warm.stop(self.warm_server)
        self.warm_server = None
        remove_private_directory(self.private_dir)
