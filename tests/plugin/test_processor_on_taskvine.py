"""A user's processor on the real stack: the sandbox profile (TaskVine workers that HTCondor runs, one per rack),
a coffea fileset of real NanoAOD files served by the XRootD origin and read through the racks' XCaches, the
processor's file shipped to workers without a shared filesystem — and ``output.coffea`` equal to coffea's own
``processor.Runner`` reading the same URLs, with the one file that is not ROOT named as failed."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from coffea import util
from processors import CHUNKSIZE, NEW_PROCESSOR, assert_same, coffea_runner

from hepvine.work import processor

REPO = Path(__file__).resolve().parents[2]
NANOAOD = REPO.parent / "shared" / "nanoaod"
DAS = "/TTHtoGG_M125/RunIIFall17NanoAODv7/NANOAODSIM"
FILES = {
    DAS: ["ttH_M125_2017.root", "ggH_M125_amcatnlo_v13.root"],
    "rntuple": ["nano_dy_rntuple.root"],
    "data": ["nano_dimuon.root"],
}


@pytest.fixture
def served(services):
    """(fileset of root:// URLs at the origin, the URL of a file that is not ROOT, the tag of the test's
    directories): the real files copied into a fresh directory of the origin; everything removed after."""
    tag = f"test-processor-{uuid.uuid4().hex[:8]}"
    origin = services["xrootd"]["origin"]
    store = Path(origin["data_dir"]) / "store" / tag
    store.mkdir(parents=True)
    fileset = {}
    for key, names in FILES.items():
        for name in names:
            shutil.copy(NANOAOD / name, store / name)
        fileset[key] = {
            "files": {f"{origin['url']}//store/{tag}/{name}": "Events" for name in names},
            "metadata": {"kind": key},
        }
    (store / "broken.root").write_bytes(b"not a ROOT file" * 1000)
    bad = f"{origin['url']}//store/{tag}/broken.root"
    yield fileset, bad, tag
    shutil.rmtree(store, ignore_errors=True)
    for path in (REPO / "results").glob(f"{tag}*"):
        shutil.rmtree(path, ignore_errors=True)


def test_a_users_processor_on_taskvine_workers_equals_coffeas_runner(served):
    fileset, bad, tag = served
    inputs = REPO / "results" / tag
    inputs.mkdir(parents=True)
    (inputs / "my_analysis.py").write_text(NEW_PROCESSOR)
    with_bad = json.loads(json.dumps(fileset))
    with_bad["data"]["files"][bad] = "Events"
    (inputs / "fileset.json").write_text(json.dumps(with_bad))
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "snakemake",
            "--profile",
            "profiles/sandbox",
            "--config",
            f"dataset=results/{tag}/fileset.json",
            f"analysis=results/{tag}/my_analysis.py:JetsAndMuons",
            "analysis_args={pt_min: 25.0}",
            f"chunksize={CHUNKSIZE}",
            f"campaign={tag}-run",
            "site=site-configs/sandbox.yaml",
            "files_per_job=2",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    out = REPO / "results" / f"{tag}-run"
    report = json.loads((out / "report.json").read_text())
    assert report["files"] == {"total": 5, "ok": 4, "failed": 1} and not report["complete"]
    (failed,) = report["failed_files"]
    assert failed["path"] == bad and failed["kind"] == "not-root"
    # Read on the workers through the racks' caches (TaskVine tasks, not the main process).
    ok = [r for r in report["inputs"] if r["failure"] is None]
    assert all(r["cache"] in ("xcache-a", "xcache-b") for r in ok), [r["cache"] for r in ok]
    assert report["cache"]["bytes_read_through_caches"] > 0
    # coffea's own Runner over the same URLs (from the origin, in this process).
    instance = processor.load(str(inputs / "my_analysis.py") + ":JetsAndMuons", {"pt_min": 25.0}).instance
    assert_same(util.load(str(out / "output.coffea")), coffea_runner(fileset, instance))
