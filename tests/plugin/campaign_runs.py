"""Campaigns run as a site user runs them, from a workflow directory of their own: a copy of the workflow (so that a
test run as root leaves nothing in the checkout) over generated files in a fresh directory of the sandbox's XRootD
origin, read through its XCaches; a free port for a manager whose workers the test starts itself, and those
workers; and the check that a campaign's report and histograms are exact (every file counted once)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import uproot
from kept import generated_dataset

REPO = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Workers:
    """vine_worker processes that a test starts itself for a manager (--taskvine-workers none), each with its log
    under ROOT; stopped by their pids."""

    def __init__(self, root: Path):
        self.root = root
        root.mkdir(parents=True, exist_ok=True)
        self.procs: list[subprocess.Popen] = []

    def command(self, name: str, port: int, password: Path, *options: str) -> list[str]:
        """A 1-core vine_worker NAME (its workspace under ROOT) for the manager on PORT."""
        return [
            "vine_worker",
            f"--workspace={self.root / name}",
            "--cores=1",
            "--timeout=120",
            *options,
            f"--password={password}",
            "127.0.0.1",
            str(port),
        ]

    def spawn(self, name: str, argv: list[str], env: dict[str, str] | None = None) -> None:
        with open(self.root / f"{name}.log", "wb") as log:
            self.procs.append(
                subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True, env=env)
            )

    def stop(self) -> None:
        """SIGTERM to every worker at once (each takes seconds to clear its workspace), then wait for each; one
        still running 20 s later is killed; then what is left of each one's process group (a vine_worker's forked
        "[transfer server]", which heeds no SIGTERM: one outlived the root pass) is killed."""
        running = [proc for proc in self.procs if proc.poll() is None]
        for proc in running:
            proc.terminate()
        deadline = time.monotonic() + 20
        for proc in running:
            try:
                proc.wait(max(deadline - time.monotonic(), 0.1))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        for proc in running:  # (reaped just now: their pids cannot have been taken again yet)
            try:
                os.killpg(proc.pid, signal.SIGKILL)  # start_new_session: the group is the worker's pid
            except (ProcessLookupError, PermissionError):
                pass
        self.procs.clear()


class CampaignDir:
    """ROOT: a workflow directory holding a copy of the workflow in git (Snakefile, rules, schemas; not the hepvine
    package, which the manager imports from its own environment and the workers from theirs), the sandbox site
    config as site.yaml, and spec.json: COUNTS[process] generated files of EVENTS events each, in a fresh directory
    of the XRootD origin (removed by ``remove_data``)."""

    def __init__(self, root: Path, services: dict, counts: dict[str, int], events: int, seed: int):
        self.root = root
        (root / "workflows").mkdir(parents=True)
        shutil.copy(REPO / "Snakefile", root / "Snakefile")
        for part in ("rules", "schemas"):
            shutil.copytree(REPO / "workflows" / part, root / "workflows" / part)
        shutil.copy(REPO / "site-configs" / "sandbox.yaml", root / "site.yaml")
        # Snakemake ships the sources git tracks (the rules' schemas among them) to workers without a shared
        # filesystem.
        for git in (["init", "-q"], ["add", "Snakefile", "workflows"]):
            subprocess.run(["git", *git], cwd=root, check=True, capture_output=True)
        origin = services["xrootd"]["origin"]
        directory = f"test-campaign-{uuid.uuid4().hex[:8]}"
        self.store = Path(origin["data_dir"]) / "store" / directory
        self.spec = generated_dataset(self.store, counts, events, seed=seed)
        for samples in self.spec.values():
            for files in (v["files"] for k, v in samples.items() if k != "xsec"):
                for entry in files:
                    entry["path"] = f"{origin['url']}//store/{directory}/{Path(entry['path']).relative_to(self.store)}"
        (root / "spec.json").write_text(json.dumps(self.spec))

    def remove_data(self) -> None:
        shutil.rmtree(self.store, ignore_errors=True)


def last_step(log: str) -> str:
    """Where a campaign's last step (the report: the root merge, the products and the plots) ran, from Snakemake's
    log: "host" (a local rule), "worker" or "not run"."""
    return "host" if "localrule report:" in log else "worker" if "rule report:" in log else "not run"


def run_campaign(
    work: Path, name: str, *options: str, recompress: str = "off", config: tuple = (), timeout: float = 600
) -> subprocess.CompletedProcess:
    """`snakemake --executor taskvine` in WORK without a shared filesystem, one file a job, campaign NAME; OPTIONS
    say where the workers come from, CONFIG adds config words (key=value)."""
    cmd = [
        sys.executable,
        "-m",
        "snakemake",
        "--executor",
        "taskvine",
        "--jobs",
        "8",
        "--shared-fs-usage",
        "none",
        "--taskvine-prefer-wait-s",
        "0",
        "--default-resources",
        "mem_mb=500",
        "disk_mb=500",
        *options,
        "--config",
        "dataset=spec.json",
        f"campaign={name}",
        "site=site.yaml",
        f"recompress={recompress}",
        "files_per_job=1",
        *config,
    ]
    return subprocess.run(cmd, cwd=work, capture_output=True, text=True, timeout=timeout)


def expected_events(spec: dict) -> dict[str, int]:
    """process/variation -> the events of its files, from the spec's per-file nevts."""
    return {
        f"{p}/{v}": sum(f["nevts"] for f in block["files"])
        for p, variations in spec.items()
        for v, block in variations.items()
        if v != "xsec"
    }


def events_in_histograms(path: Path, spec: dict) -> dict[str, float]:
    """process/variation -> the events that the events_<process>_<variation> TH1 of the histograms.root at PATH
    holds."""
    with uproot.open(path) as f:
        return {
            f"{p}/{v}": float(f[f"events_{p}_{v}"].values(flow=True).sum())
            for p, variations in spec.items()
            for v in variations
            if v != "xsec"
        }


def assert_exact(report: dict, spec: dict, histograms: Path) -> dict:
    """REPORT (a campaign's report.json) is complete and exact for SPEC: every file of the spec has exactly one
    record, all ok, no file missing, duplicated or unexpected, and the events per process/variation in HISTOGRAMS
    (its histograms.root) and in the report's events_per_dataset equal the sum of the ok records' and the spec's.
    Returns the report."""
    want = expected_events(spec)
    n = sum(len(block["files"]) for variations in spec.values() for v, block in variations.items() if v != "xsec")
    assert report["accounting"] == {"expected": n, "records": n, "missing": [], "duplicated": [], "unexpected": []}, (
        report["accounting"]
    )
    assert report["files"] == {"total": n, "ok": n, "failed": 0}, report["failed_files"]
    assert report["complete"] is True
    fids = sorted(r["fid"] for r in report["inputs"])
    assert fids == sorted(
        f"{p}/{v}/{i}"
        for p, variations in spec.items()
        for v, block in variations.items()
        if v != "xsec"
        for i in range(len(block["files"]))
    )
    from_records: dict[str, int] = {}
    for r in report["inputs"]:
        key = "/".join(r["fid"].split("/")[:2])
        from_records[key] = from_records.get(key, 0) + r["events"]
    assert from_records == want, (from_records, want)
    assert events_in_histograms(histograms, spec) == {k: float(v) for k, v in want.items()}
    # The merged result's events per coffea dataset (<process>__<variation>) say the same.
    assert report["events_per_dataset"] == {k.replace("/", "__"): v for k, v in want.items()}, report[
        "events_per_dataset"
    ]
    assert report["events"] == sum(want.values())
    return report
