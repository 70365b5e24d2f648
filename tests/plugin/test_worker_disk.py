"""A campaign whose workers' disk is full, on the real stack: TaskVine workers whose workspace is a small, nearly
full tmpfs (and that claim a large disk, as a node whose disk other jobs fill), the sandbox's XRootD origin and
XCaches, recompression on (each file is staged on the worker, then copied). Every file is listed as a transient
`disk-full` failure naming the fix; the same command again on workers with room analyses exactly those files, and
the campaign ends exact (every file counted once, histograms equal to the spec's events). Mounting takes a mount
namespace, which only root can make in the sandbox: `make test` runs this in its root pass."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from campaign_runs import CampaignDir, assert_exact, free_port, run_campaign

pytestmark = [pytest.mark.sandbox, pytest.mark.root]

EVENTS = 20_000
# The workspace: a tmpfs of TMPFS_MB, filled until FREE_KB are left (room for TaskVine's and the job's small files,
# not for a staged file of EVENTS events).
TMPFS_MB = 16
FREE_KB = 1024
MOUNTED = ('mount -t tmpfs -o "size=$1m" tmpfs "$2" || exit 97; '
           'dd if=/dev/zero of="$2/filler" bs=1k count="$3" 2>/dev/null; shift 3; exec "$@"')


class Workers:
    """vine_workers for the manager on PORT, each with its workspace under ROOT — on a nearly full tmpfs in a mount
    namespace of its own (FULL), or on this disk; stopped by their pids."""

    def __init__(self, root: Path):
        self.root = root
        self.procs: list[subprocess.Popen] = []

    def start(self, port: int, password: Path, *, full: bool, n: int = 2) -> None:
        for i in range(n):
            workspace = self.root / f"worker-{port}-{i}"
            workspace.mkdir(parents=True)
            worker = ["vine_worker", f"--workspace={workspace}", "--cores=1", "--memory=1500", "--disk=4000",
                      "--timeout=120", f"--password={password}", "127.0.0.1", str(port)]
            argv = (["unshare", "--mount", "--propagation", "unchanged", "--", "/bin/sh", "-c", MOUNTED, "_",
                     str(TMPFS_MB), str(workspace), str(TMPFS_MB * 1024 - FREE_KB), *worker] if full else worker)
            log = open(self.root / f"worker-{port}-{i}.log", "wb")
            self.procs.append(subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                                               env=dict(os.environ, CATALOG_HOST="127.0.0.1")))

    def stop(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(20)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
        self.procs.clear()


@pytest.fixture
def workers(tmp_path):
    if os.geteuid() != 0:
        pytest.fail("a tmpfs for the workers takes a mount namespace, which only root can make in the sandbox: "
                    "`make test` runs this test in its root pass")
    started = Workers(tmp_path / "workers")
    yield started
    started.stop()


@pytest.fixture
def campaign(tmp_path, services):
    made = CampaignDir(tmp_path / "wf", services, {"ttbar": 2, "data": 1}, EVENTS, seed=23)
    yield made
    made.remove_data()


def test_full_worker_disks_list_every_file_then_the_same_command_finishes_exact(workers, campaign, tmp_path):
    smallest = min(Path(p).stat().st_size for p in campaign.store.rglob("*.root"))
    assert smallest > 2 * FREE_KB * 1024, f"the files ({smallest} bytes) would fit in the {FREE_KB} kB left"
    password = tmp_path / "vine.password"
    password.write_text("full-disk-test\n")
    password.chmod(0o600)

    def run(full: bool) -> tuple[subprocess.CompletedProcess, dict]:
        port = free_port()
        workers.start(port, password, full=full)
        try:
            done = run_campaign(campaign.root, "full", "--taskvine-workers", "none", "--taskvine-port", str(port),
                                "--taskvine-password-file", str(password), recompress="zstd:5")
        finally:
            workers.stop()
        assert done.returncode == 0, done.stderr[-4000:]
        return done, json.loads((campaign.root / "results" / "full" / "report.json").read_text())

    first, report = run(full=True)
    assert report["accounting"]["missing"] == [] and report["accounting"]["duplicated"] == [], report["accounting"]
    assert report["files"] == {"total": 3, "ok": 0, "failed": 3}, report["files"]
    assert report["complete"] is True  # every file has its record: here, a failure with its cause
    for failure in report["failed_files"]:
        assert failure["class"] == "transient" and failure["kind"] == "disk-full", failure
        assert "No space left on device" in failure["error"] and "disk_mb" in failure["fix"], failure
    assert "run the same command again" in first.stdout + first.stderr

    _, report = run(full=False)
    assert_exact(report, campaign.spec, campaign.root / "results" / "full" / "histograms.root")
    assert all(r["recompress"]["codec"] == "zstd:5" for r in report["inputs"])
