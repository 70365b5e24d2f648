"""A campaign whose workers' disk is full, on the real stack: TaskVine workers whose workspace is a small, nearly full
tmpfs, the sandbox's XRootD origin and XCaches, recompression on (each file is staged on the worker, then copied).
The jobs ask for 1 MB of disk (--set-resources; a full worker reports half of what is left), as jobs whose disk_mb
is too small or that share the node's disk with others that fill it. Every file is listed as a transient `disk-full`
failure naming the fix (or, when TaskVine's own disk limit ends the job in the instant the staged file fills the
disk, the job fails with TaskVine's "resource exhaustion" and no record is written: the test names which); the
command again with the jobs' own disk_mb, on workers with room, analyses those files, and the campaign ends exact
(every file counted once, histograms equal to the spec's events). Mounting takes a mount namespace, which only root
can make in the sandbox: `make test` runs this in its root pass."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from campaign_runs import CampaignDir, Workers, assert_exact, free_port, run_campaign

pytestmark = [pytest.mark.sandbox, pytest.mark.root]

EVENTS = 10_000  # ~8 MB a file (ZLIB-1, tests/kept.py): half of it is more than TaskVine's and the job's small files
# The workspace: a tmpfs of TMPFS_MB, filled until half the smallest file is left (room for TaskVine's and the
# job's small files, not for a staged file).
TMPFS_MB = 32
# In the first run, every job asks for 1 MB of disk (the full workers report half of what is left).
TINY_DISK = ("--default-resources", "mem_mb=500", "disk_mb=1", "--set-resources", "analyse:disk_mb=1")
MOUNTED = (
    'mount -t tmpfs -o "size=$1m" tmpfs "$2" || exit 97; '
    'dd if=/dev/zero of="$2/filler" bs=1k count="$3" 2>/dev/null; shift 3; exec "$@"'
)


class FullDiskWorkers(Workers):
    """Workers each on a tmpfs with only FREE_KB left, in a mount namespace of its own (or, without FREE_KB, on this
    disk)."""

    def start(self, port: int, password: Path, *, free_kb: int = 0, n: int = 2) -> None:
        for i in range(n):
            name = f"worker-{port}-{i}"
            (self.root / name).mkdir()
            worker = self.command(name, port, password, "--memory=1500")
            argv = (
                [
                    "unshare",
                    "--mount",
                    "--propagation",
                    "unchanged",
                    "--",
                    "/bin/sh",
                    "-c",
                    MOUNTED,
                    "_",
                    str(TMPFS_MB),
                    str(self.root / name),
                    str(TMPFS_MB * 1024 - free_kb),
                    *worker,
                ]
                if free_kb
                else worker
            )
            self.spawn(name, argv, env=dict(os.environ, CATALOG_HOST="127.0.0.1"))


@pytest.fixture
def workers(tmp_path, as_root):
    started = FullDiskWorkers(tmp_path / "workers")
    yield started
    started.stop()


@pytest.fixture
def campaign(tmp_path, services):
    made = CampaignDir(tmp_path / "wf", services, {"ttbar": 2, "data": 1}, EVENTS, seed=23)
    yield made
    made.remove_data()


def test_full_worker_disks_list_every_file_then_the_same_command_finishes_exact(workers, campaign, tmp_path):
    free_kb = min(Path(p).stat().st_size for p in campaign.store.rglob("*.root")) // 2048
    assert 2048 <= free_kb < TMPFS_MB * 1024 // 2, f"{free_kb} kB left: change EVENTS or TMPFS_MB"
    password = tmp_path / "vine.password"
    password.write_text("full-disk-test\n")
    password.chmod(0o600)

    def run(free_kb: int, *options: str) -> tuple[subprocess.CompletedProcess, dict | None]:
        port = free_port()
        workers.start(port, password, free_kb=free_kb)
        try:
            done = run_campaign(
                campaign.root,
                "full",
                "--taskvine-workers",
                "none",
                "--taskvine-port",
                str(port),
                "--taskvine-password-file",
                str(password),
                *options,
                recompress="zstd:5",
                timeout=300,
            )
        finally:
            workers.stop()
        report = campaign.root / "results" / "full" / "report.json"
        return done, json.loads(report.read_text()) if done.returncode == 0 else None

    first, report = run(free_kb, *TINY_DISK)
    if report is None:
        # The other face of the same full disk (1 in 4 runs here): TaskVine's own limit (the job's 1 MB) ended a job
        # in the instant its staged file filled the disk, before the job recorded the failure; Snakemake says so.
        assert "resource exhaustion" in first.stderr, first.stderr[-4000:]
        return assert_second_run_exact(run, campaign)
    # Every file has its one record, here a failure with its cause; the campaign is not complete.
    assert report["accounting"] == {"expected": 3, "records": 3, "missing": [], "duplicated": [], "unexpected": []}
    assert report["files"] == {"total": 3, "ok": 0, "failed": 3}, report["files"]
    assert report["complete"] is False
    for failure in report["failed_files"]:
        assert failure["class"] == "transient" and failure["kind"] == "disk-full", failure
        assert "No space left on device" in failure["error"] and "disk_mb" in failure["fix"], failure
    assert "run the same command again" in first.stdout + first.stderr

    assert_second_run_exact(run, campaign)


def assert_second_run_exact(run, campaign: CampaignDir) -> None:
    """The command again, with the jobs' own disk_mb, on workers with room: every file analysed once."""
    done, report = run(0)
    assert report is not None, done.stderr[-4000:]
    assert_exact(report, campaign.spec, campaign.root / "results" / "full" / "histograms.root")
    assert all(r["recompress"]["codec"] == "zstd:5" for r in report["inputs"])
