"""A user's processor on the real stack: the sandbox profile (TaskVine workers that HTCondor runs, one per rack),
a coffea fileset of real NanoAOD files served by the XRootD origin and read through the racks' XCaches, the
processor's file and the user's package it imports (hepvine.model.sources), in a directory of the user's outside the
checkout linked into it, shipped to workers without a shared filesystem, each file recompressed to ZSTD first — and
``output.coffea`` equal to coffea's own ``processor.Runner`` reading the same URLs, with the one file that is not ROOT
named as failed; then a later campaign over the copies (``dataset.zstd.json``) equal to the Runner over them."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

import pytest
import uproot
from campaign_runs import last_step
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
        if path.is_symlink():
            shutil.rmtree(path.resolve(), ignore_errors=True)
            path.unlink()
        else:
            shutil.rmtree(path, ignore_errors=True)


def entries(path: Path) -> int:
    with uproot.open(path) as f:
        return f["Events"].num_entries


def campaign(tag: str, *config: str, options: tuple[str, ...] = ()) -> tuple[Path, str]:
    """A campaign of the test's processor on the sandbox profile with CONFIG (and Snakemake OPTIONS); its results
    directory and what Snakemake printed."""
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "snakemake",
            "--profile",
            "profiles/sandbox",
            *options,
            "--config",
            *config,
            f"analysis=results/{tag}/my_analysis.py:JetsAndMuons",
            "analysis_args={pt_min: 25.0}",
            f"chunksize={CHUNKSIZE}",
            "site=site-configs/sandbox.yaml",
            "files_per_job=2",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    return REPO / "results" / next(c.split("=", 1)[1] for c in config if c.startswith("campaign=")), run.stderr


@pytest.mark.pool
def test_a_users_processor_on_taskvine_workers_equals_coffeas_runner(served):
    """Recompressed to ZSTD on the workers first (the analysis reads each copy as the file the fileset names), then
    a later campaign over the copies (dataset.zstd.json) on the same profile with its jobs as library calls (the
    driver forked from each worker's library, coffea imported there once) and config columns: traced (each chunk's
    fields the processor does not read made as placeholders): both equal coffea's Runner."""
    fileset, bad, tag = served
    # The user's analysis lives in a directory of theirs outside the checkout, linked into it (the jobs are sent
    # only files under the directory Snakemake runs in: README, "Run your own processor").
    inputs = REPO / "results" / tag
    inputs.parent.mkdir(exist_ok=True)
    inputs.symlink_to(tempfile.mkdtemp(prefix=f"{tag}-analysis-"))
    assert not inputs.resolve().is_relative_to(REPO)
    # The processor's file imports a package of the user's beside it (with a data file it reads): both are shipped.
    cut = "jets = events.Jet[events.Jet.pt > self.pt_min]"
    assert cut in NEW_PROCESSOR
    (inputs / "my_analysis.py").write_text(
        "from my_cuts.jets import good_jets\n" + NEW_PROCESSOR.replace(cut, "jets = good_jets(events.Jet, self.pt_min)")
    )
    (inputs / "my_cuts").mkdir()
    (inputs / "my_cuts" / "__init__.py").write_text("")
    (inputs / "my_cuts" / "scale.json").write_text("1.0")
    (inputs / "my_cuts" / "jets.py").write_text(
        "import json\nfrom pathlib import Path\n\n"
        "SCALE = json.loads((Path(__file__).parent / 'scale.json').read_text())\n\n\n"
        "def good_jets(jets, pt_min):\n    return jets[jets.pt * SCALE > pt_min]\n"
    )
    # As coffea's dataset_tools write it (preprocessed: each file's tree and entries): a recompressing job asks its
    # worker for disk by its files' sizes, which a plain fileset of remote files does not give (4 GB a file is
    # assumed, more than the sandbox's workers have: the job would fail at once saying so).
    preprocessed = {
        key: {
            "files": {
                url: {"object_path": "Events", "num_entries": entries(NANOAOD / url.rsplit("/", 1)[1])}
                for url in block["files"]
            },
            "metadata": block["metadata"],
        }
        for key, block in fileset.items()
    }
    preprocessed["data"]["files"][bad] = {"object_path": "Events", "num_entries": 100}
    (inputs / "fileset.json").write_text(json.dumps(preprocessed))
    # Its last step on a worker as a large campaign's is (config host_steps_max_files; the next campaign's on the
    # login node, as a small one's are by default): both equal the Runner's.
    out, log = campaign(
        tag, f"dataset=results/{tag}/fileset.json", f"campaign={tag}-run", "recompress=zstd:5", "host_steps_max_files=0"
    )
    assert last_step(log) == "worker", log[-3000:]
    report = json.loads((out / "report.json").read_text())
    assert report["files"] == {"total": 5, "ok": 4, "failed": 1} and not report["complete"]
    (failed,) = report["failed_files"]
    assert failed["path"] == bad and failed["kind"] == "not-root"
    # Read on the workers through the racks' caches (TaskVine tasks, not the main process), then recompressed.
    ok = [r for r in report["inputs"] if r["failure"] is None]
    assert all(r["cache"] in ("xcache-a", "xcache-b") for r in ok), [r["cache"] for r in ok]
    assert all(r["recompress"]["codec"] == "zstd:5" and "recompressed" in r["read_from"] for r in ok), ok
    assert report["cache"]["bytes_read_through_caches"] > 0
    # coffea's own Runner over the same URLs (from the origin, in this process).
    instance = processor.load(str(inputs / "my_analysis.py") + ":JetsAndMuons", {"pt_min": 25.0}).instance
    assert_same(util.load(str(out / "output.coffea")), coffea_runner(fileset, instance))

    # The copies serve the next campaign: listed by absolute path, read by the workers where they are.
    copies = json.loads((out / "dataset.zstd.json").read_text())
    again, log = campaign(
        tag,
        f"dataset={out / 'dataset.zstd.json'}",
        f"campaign={tag}-again",
        "recompress=off",
        "columns=traced",
        options=("--taskvine-library",),
    )
    assert last_step(log) == "host", log[-3000:]
    report = json.loads((again / "report.json").read_text())
    assert report["files"] == {"total": 5, "ok": 4, "failed": 1}, report["failed_files"]
    assert [f["path"] for f in report["failed_files"]] == [bad]  # not copied: kept as it was, and still not ROOT
    copied = {
        key: {
            "files": {path: entry["object_path"] for path, entry in block["files"].items() if path != bad},
            "metadata": block["metadata"],
        }
        for key, block in copies.items()
    }
    assert all(Path(path).is_absolute() for block in copied.values() for path in block["files"])
    assert_same(util.load(str(again / "output.coffea")), coffea_runner(copied, instance))
    # Every plain tree's chunks were cut on the workers: only the RNTuple copy's job (dataset rntuple) made every field.
    uncut = [
        line
        for job_log in (again / "logs" / "analyse").rglob("*.log")
        for line in job_log.read_text().splitlines()
        if "every field made" in line
    ]
    assert len(uncut) == 1 and "/rntuple/files/" in uncut[0] and "not a tree of plain branches" in uncut[0], uncut
