"""The real stack the chaos tests break on purpose, and the checks that a campaign survived it exactly.

- ``Xrootd``: a private XRootD origin and one XCache per rack (``rack-a``, ``rack-b``), run by the test as the
  analysis user under its tmp_path, so that a test may kill and restart them (the sandbox's shared caches belong to
  the xrootd user and to everyone else's tests). ``site_config`` writes a site config pointing at them, with one
  1-core HTCondor worker group per rack.
- ``Campaign``: a campaign over copies of a few generated files in the private origin, run from the repository
  through the sandbox profile (TaskVine workers as HTCondor jobs) as a user does; its report and histograms.
- The processes and HTCondor jobs a run started (to kill them, or to prove they are gone).
- ``assert_exact``: every file of the spec has exactly one ok record, and the events in histograms.root equal the
  sum of the ok records and the spec's ``nevts``, per process and variation (``campaign_runs.assert_exact``).
"""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from hepvine.devtools import generate

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "plugin"))  # the campaign helpers of the workflow's plugin tests, shared
from campaign_runs import assert_exact as exact  # noqa: E402

# XRootD servers a test runs itself (tests/servers.py; tests/ is on the path through tests/conftest.py).
from servers import Server, free_port, origin_config, port_open, wait_until  # noqa: E402, F401  (re-exported)

# The executor's tests' process helpers (their directory is on the path through tests/conftest.py).
from snakemake_runs import alive, kill_all  # noqa: E402, F401  (re-exported to the chaos tests)
from snakemake_runs import condor_jobs_under as condor_jobs  # noqa: E402, F401  (re-exported: a factory's workers)

RACKS = ("rack-a", "rack-b")
# The sandbox profile, with the worker groups of the test's site config (1-core workers, so that two campaigns at
# once fit the pool's 4 slot cores) instead of the sandbox's.
PROFILE = ("--profile", "profiles/sandbox")
# Distinct event counts per base file, so that a lost or double-counted file changes every total.
BASE_EVENTS = {"ttbar": (1500, 2000, 2500, 3000), "data": (1100, 1700)}


class Xrootd:
    """A private origin exporting /store from BASE/origin/data and one XCache per rack in front of it."""

    def __init__(self, base: Path):
        self.data = base / "origin" / "data"
        (self.data / "store").mkdir(parents=True)
        port = free_port()
        self.origin = Server("origin", port, origin_config(port, self.data, base / "origin" / "admin"), base / "origin")
        self.cache_dirs = {rack: base / rack / "cache" for rack in RACKS}
        self.caches = {}
        for rack in RACKS:
            cport = free_port()
            self.cache_dirs[rack].mkdir(parents=True)
            # pfc.ram: XCache refuses less than 1 GiB.
            self.caches[rack] = Server(
                rack,
                cport,
                f"""all.export /store
ofs.osslib libXrdPss.so
pss.cachelib libXrdPfc.so
pss.origin 127.0.0.1:{port}
oss.localroot {self.cache_dirs[rack]}
pfc.ram 1g
pfc.diskusage 0.90 0.95
xrd.port {cport}
all.adminpath {base / rack / "admin"}
all.pidpath {base / rack / "admin"}
xrd.allow host localhost
""",
                base / rack,
            )

    @property
    def servers(self) -> list[Server]:
        return [self.origin, *self.caches.values()]

    def start(self, *, without: tuple[str, ...] = ()) -> None:
        for server in self.servers:
            if server.name not in without:
                server.start()

    def stop(self) -> None:
        for server in self.servers:
            server.stop()

    def url(self, server: Server) -> str:
        return f"root://127.0.0.1:{server.port}"


def site_config(xrootd: Xrootd, cores: int = 1, max_workers: int = 1) -> str:
    """A site config for XROOTD: one cache per rack, one HTCondor worker group per rack (the sandbox pool's slots
    carry HepvineRack), and XRootD client settings that give up on a dead server within seconds."""
    caches = "".join(
        f'  - {{name: xcache-{rack[-1]}, url: "{xrootd.url(server)}", rack: {rack}, gbps: 1, '
        f'disk: "{xrootd.cache_dirs[rack]}"}}\n'
        for rack, server in xrootd.caches.items()
    )
    groups = "".join(
        f"""  - name: {rack}
    features: [{rack}]
    condor_requirements: HepvineRack == "{rack}"
    min_workers: 1
    max_workers: {max_workers}
    cores: {cores}
    memory_mb: 1500
    disk_mb: 3000
"""
        for rack in RACKS
    )
    return f"""name: chaos
description: The chaos tests' private origin and XCaches (tests/chaos/chaos_stack.py), on the sandbox's pool.
sources:
  - tests/chaos/chaos_stack.py
assumed:
  - racks.uplink_gbps
  - interconnect_gbps
access: xcache
origins:
  - name: origin
    url: "{xrootd.url(xrootd.origin)}"
caches:
{caches}racks:
  - {{name: rack-a, uplink_gbps: 1}}
  - {{name: rack-b, uplink_gbps: 1}}
interconnect_gbps: 1
worker_groups:
{groups}xrootd_client:
  XRD_REQUESTTIMEOUT: 20
  XRD_CONNECTIONWINDOW: 2
  XRD_CONNECTIONRETRY: 1
"""


def base_files(directory: Path) -> dict[str, list[Path]]:
    """Generated files to copy from, per process (BASE_EVENTS events each)."""
    return {
        process: [
            generate.write_file(directory / f"{process}_{i}.root", process, n, index=i, seed=13)["path"]
            for i, n in enumerate(counts)
        ]
        for process, counts in BASE_EVENTS.items()
    }


def spec_in_origin(xrootd: Xrootd, bases: dict[str, list[Path]], counts: dict[str, int]) -> dict:
    """COUNTS[process] copies of the base files in a fresh /store directory of the origin; the spec (origin URLs)."""
    directory = f"chaos-{uuid.uuid4().hex[:8]}"
    spec = {}
    for process, n in counts.items():
        root = xrootd.data / "store" / directory / process
        root.mkdir(parents=True)
        files = []
        for i in range(n):
            base = bases[process][i % len(bases[process])]
            shutil.copyfile(base, root / f"f{i:03d}.root")
            files.append(
                {
                    "path": f"{xrootd.url(xrootd.origin)}//store/{directory}/{process}/f{i:03d}.root",
                    "nevts": BASE_EVENTS[process][i % len(bases[process])],
                }
            )
        spec[process] = {"nominal": {"nevts_total": sum(f["nevts"] for f in files), "files": files}}
        if generate.PROCESSES[process].xsec_pb is not None:
            spec[process]["xsec"] = generate.PROCESSES[process].xsec_pb
    return spec


@dataclass
class Campaign:
    """The campaign NAME over SPEC with the site config SITE, run from the repository with the sandbox profile.
    Its inputs go to results/<tag>/ and its outputs to results/<tag>-<name>/ (removed by ``cleanup``)."""

    tag: str
    name: str
    spec: dict
    site: str
    options: tuple[str, ...] = ()
    logs: list[Path] = field(default_factory=list)

    def __post_init__(self):
        self.inputs = REPO / "results" / self.tag
        self.inputs.mkdir(parents=True, exist_ok=True)
        (self.inputs / f"{self.name}.json").write_text(json.dumps(self.spec))
        (self.inputs / "site.yaml").write_text(self.site)
        self.out = REPO / "results" / f"{self.tag}-{self.name}"

    @property
    def campaign(self) -> str:
        return f"{self.tag}-{self.name}"

    def command(self, *extra: str) -> list[str]:
        site = f"results/{self.tag}/site.yaml"
        return [
            sys.executable,
            "-m",
            "snakemake",
            *PROFILE,
            "--taskvine-worker-groups",
            site,
            *extra,
            "--config",
            f"dataset=results/{self.tag}/{self.name}.json",
            f"campaign={self.campaign}",
            f"site={site}",
            *self.options,
        ]

    def start(self, *extra: str) -> subprocess.Popen:
        """The run in the background; its output goes to a log under results/<tag>/ (read with ``output``)."""
        log = self.inputs / f"{self.name}-{len(self.logs)}.log"
        self.logs.append(log)
        with open(log, "w") as out:
            return subprocess.Popen(self.command(*extra), cwd=REPO, stdout=out, stderr=subprocess.STDOUT, text=True)

    def run(self, *extra: str, timeout: float = 900) -> tuple[int, str, float]:
        """The run to its end: (exit status, output, wall seconds)."""
        start = time.monotonic()
        proc = self.start(*extra)
        try:
            proc.wait(timeout)
        finally:
            if proc.poll() is None:
                proc.send_signal(signal.SIGINT)
                proc.wait(120)
        return proc.returncode, self.output(), time.monotonic() - start

    def output(self) -> str:
        return self.logs[-1].read_text()

    def batches(self) -> int:
        """Jobs of the analyse rule (one index shard per batch: index/<process>/<variation>/<home>/<thousands>/)."""
        return len(list((self.out / "index").glob("*/*/*/*/*.json")))

    def analysed(self) -> int:
        """Batches whose result is in place."""
        return len(list((self.out / "files").glob("*/*/*/*/*.pkl")))

    def report(self) -> dict:
        return json.loads((self.out / "report.json").read_text())

    def cleanup(self) -> None:
        shutil.rmtree(self.out, ignore_errors=True)


def assert_exact(campaign: Campaign) -> dict:
    """The campaign's report is complete and exact (campaign_runs.assert_exact); returns the report."""
    return exact(campaign.report(), campaign.spec, campaign.out / "histograms.root")


# --- the processes and HTCondor jobs of a run ----------------------------------------------------------------------


def descendants(pid: int) -> list[psutil.Process]:
    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []


def named(procs, name: str) -> list[psutil.Process]:
    found = []
    for proc in procs:
        try:
            if proc.name() == name:
                found.append(proc)
        except psutil.NoSuchProcess:
            continue
    return found


def factories(pid: int) -> list[psutil.Process]:
    """The vine_factory processes that the run with PID started (one per worker group)."""
    return named(descendants(pid), "vine_factory")


def factory_scratch(factory: psutil.Process) -> str:
    return next(a.split("=", 1)[1] for a in factory.cmdline() if a.startswith("--scratch-dir="))


def manager_address(factory: psutil.Process) -> list[str]:
    """HOST PORT of the manager the factory's workers connect to (its last two arguments)."""
    return factory.cmdline()[-2:]


def workers(address: list[str]) -> list[psutil.Process]:
    """The vine_worker processes on this machine connected to the manager at ADDRESS (HOST PORT, somewhere in their
    arguments; HTCondor starts them: they are no descendants of the run)."""
    found = []
    for proc in named(psutil.process_iter(), "vine_worker"):
        try:
            argv = proc.cmdline()
            if any(argv[i : i + 2] == address for i in range(len(argv) - 1)):
                found.append(proc)
        except psutil.NoSuchProcess:
            continue
    return found


def analysing(worker: psutil.Process) -> bool:
    """Whether WORKER is running an analysis job (a hepvine.jobs.driver process below it)."""
    try:
        return any("hepvine.jobs.driver" in " ".join(child.cmdline()) for child in worker.children(recursive=True))
    except psutil.NoSuchProcess:
        return False


def condor_job_of(worker: psutil.Process) -> str | None:
    """'cluster.proc' of the HTCondor job that runs WORKER (from the job ad the starter gives the job), or None."""
    try:
        ad = Path(worker.environ()["_CONDOR_JOB_AD"]).read_text()
    except (psutil.Error, KeyError, OSError):
        return None
    attrs = dict(line.split(" = ", 1) for line in ad.splitlines() if " = " in line)
    return f"{attrs['ClusterId']}.{attrs['ProcId']}" if "ClusterId" in attrs and "ProcId" in attrs else None


def transactions(since: float):
    """(log, words of a line) of the managers' transactions logs of the runs started in the repository after SINCE
    (a time.time()), comments left out."""
    for log in (REPO / ".snakemake" / "taskvine").glob("*/manager/*/vine-logs/transactions"):
        if log.parent.parent.is_symlink() or log.stat().st_ctime < since:  # most-recent -> the timestamped one
            continue
        for line in log.read_text().splitlines():
            if not line.startswith("#"):
                yield str(log), line.split()


def task_runs(since: float) -> dict[str, int]:
    """TaskVine tasks of the runs started after SINCE and how often they were started on a worker: {"tasks": N,
    "runs": M} (M - N: tasks run again after their worker was lost)."""
    runs: dict[tuple[str, str], int] = {}
    for log, words in transactions(since):
        if words[2:3] == ["TASK"] and words[4:5] == ["RUNNING"]:
            runs[(log, words[3])] = runs.get((log, words[3]), 0) + 1
    return {"tasks": len(runs), "runs": sum(runs.values())}


def run_seconds(since: float, category: str) -> list[float]:
    """Seconds from start to end of each task of CATEGORY (a rule) that succeeded in the runs started after SINCE."""
    categories: dict[tuple[str, str], str] = {}
    started: dict[tuple[str, str], int] = {}
    took = []
    for log, words in transactions(since):
        if words[2:3] != ["TASK"] or len(words) < 6:
            continue
        task, state = (log, words[3]), words[4]
        if state == "READY":
            categories[task] = words[5]
        elif state == "RUNNING":
            started[task] = int(words[0])
        elif state == "DONE" and words[5] == "SUCCESS" and categories.get(task) == category and task in started:
            took.append((int(words[0]) - started[task]) / 1e6)
    return took
