"""Datasets named in the sandbox's real Rucio server (sandbox/catalogue.py): real NanoAOD files registered as a
site's data management would (replicas on the origin the caches front, on the second site's origin, or on both),
a coffea fileset naming two containers by DID, campaigns on the sandbox profile (TaskVine workers run by HTCondor):

- the DIDs resolve into their files with the replicas the site prefers; each file is read where its first replica
  is (through the caches for the origin they front, directly at the other site); ``output.coffea`` equals coffea's
  own Runner over the files Rucio listed; the resolution is kept (the same command again asks Rucio nothing) and in
  the run's provenance;
- a storage element taken down mid-campaign: the files not yet read come from their other replica; complete, each
  file once, and each record names the replica that failed.
"""

from __future__ import annotations

import json
import re
import shutil
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
import uproot
from coffea import util
from credentialed import GATED_ANALYSIS
from processors import CHUNKSIZE, NEW_PROCESSOR, assert_same, coffea_runner
from rucio.client import Client
from servers import Server, free_port, origin_config, wait_until

from hepvine.devtools import catalogue
from hepvine.work import processor

pytestmark = [pytest.mark.sandbox, pytest.mark.slow, pytest.mark.pool]

REPO = Path(__file__).resolve().parents[2]
NANOAOD = REPO.parent / "shared" / "nanoaod"
ORIGIN, SITE_B = catalogue.ORIGIN, catalogue.SITE_B
# Real files, by container, and where each has replicas.
PLACED = {
    "higgs": {"ttH_M125_2017.root": (ORIGIN, SITE_B), "ggH_M125_amcatnlo_v13.root": (SITE_B,)},
    "dy": {"nano_dimuon.root": (ORIGIN,), "nano_dy_rntuple.root": (ORIGIN, SITE_B)},
}
FILES = 8  # twice the pool's worker cores: the second half is read after the first has been held
COPIES = {"dimuon": {f"dimuon-{k}.root": (ORIGIN, SITE_B) for k in range(FILES)}}  # each a copy of nano_dimuon.root


def entries(path: Path) -> int:
    with uproot.open(path) as f:
        return f["Events"].num_entries


@pytest.fixture
def tag(services):
    made = f"test-rucio-{uuid.uuid4().hex[:8]}"
    yield made
    for rse in catalogue.storage(services).values():
        shutil.rmtree(Path(rse["data_dir"]) / "store" / made, ignore_errors=True)
    for path in (REPO / "results").glob(f"{made}*"):
        shutil.rmtree(path, ignore_errors=True)


def register(
    services, tag: str, placed: dict[str, dict[str, tuple[str, ...]]], source: str = "", more_storage=None
) -> dict[str, str]:
    """PLACED's files ({container key: {name: RSEs}}, each a copy of ../shared/nanoaod/SOURCE or of its namesake)
    copied onto the origin under /store/TAG/ and registered, a container per key holding a dataset of its files;
    {key: container DID}."""
    store = Path(catalogue.storage(services)[ORIGIN]["data_dir"]) / "store" / tag
    store.mkdir(parents=True)
    client = Client()
    dids = {}
    for key, files in placed.items():
        for name in files:
            shutil.copy(NANOAOD / (source or name), store / name)
        container = f"/HepvineTest/{tag}-{key}/NANOAODSIM"
        lfns = {f"/store/{tag}/{name}": where for name, where in files.items()}
        dids[key] = catalogue.register(
            client,
            services,
            container,
            {f"{container}/block-1": [(lfn, entries(store / Path(lfn).name)) for lfn in lfns]},
            lfns.__getitem__,
            more_storage,
        )
    return dids


class PrivateSite:
    """A storage element of the test's own: an XRootD origin that the test runs (tests/servers.py) on data of its
    own, declared in the sandbox's Rucio as RSE (one name for every run: its protocol is pointed at this run's
    port), so that the test may take it down without touching the services other tests use."""

    RSE = "TEST_PRIVATE_SITE"

    def __init__(self, base: Path):
        self.base, self.rse, self.data = base, self.RSE, base / "data"
        (self.data / "store").mkdir(parents=True)
        port = free_port()
        self.server = Server("site", port, origin_config(port, self.data, base / "admin"), base)
        self.server.start()
        self.url = f"root://127.0.0.1:{port}"
        catalogue.set_storage(Client(), self.rse, port, site="test-private-site")

    def opened(self, pattern: re.Pattern) -> set[str]:
        """The names PATTERN finds in what the server logged of its opens."""
        return {
            m
            for log in self.base.rglob("log")
            if log.is_file()
            for m in pattern.findall(log.read_text(errors="replace"))
        }


def campaign(tag: str, name: str, site: Path, *config: str, timeout: float = 900) -> subprocess.CompletedProcess:
    """A campaign over results/TAG/fileset.json on the sandbox profile with the site config SITE and CONFIG."""
    return subprocess.run(
        [sys.executable, "-m", "snakemake", "--profile", "profiles/sandbox", "--config"]
        + [f"dataset=results/{tag}/fileset.json", f"site={site}", f"campaign={tag}-{name}", *config],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_a_fileset_of_rucio_dids_runs_as_coffea_would_read_each_file_where_the_site_prefers(services, tag):
    dids = register(services, tag, PLACED)
    inputs = REPO / "results" / tag
    inputs.mkdir(parents=True)
    (inputs / "my_analysis.py").write_text(NEW_PROCESSOR)
    higgs = "/TTHtoGG_M125/RunIIFall17NanoAODv7/NANOAODSIM"  # a fileset key as users write it (a DAS name)
    fileset = {
        higgs: {"rucio": dids["higgs"], "metadata": {"kind": "higgs"}},
        "dy": {"rucio": dids["dy"], "metadata": {"kind": "dy"}},
    }
    (inputs / "fileset.json").write_text(json.dumps(fileset))
    config = (f"analysis=results/{tag}/my_analysis.py:JetsAndMuons", "analysis_args={pt_min: 25.0}")
    config += (f"chunksize={CHUNKSIZE}", "files_per_job=1")
    run = campaign(tag, "run", REPO / "site-configs" / "sandbox.yaml", *config)
    assert run.returncode == 0, run.stderr[-4000:]
    out = REPO / "results" / f"{tag}-run"
    report = json.loads((out / "report.json").read_text())
    assert report["complete"] and report["files"]["ok"] == 4 and report["files"]["total"] == 4, report["files"]

    # Resolved once, kept, and in the run's provenance.
    resolution = json.loads((out / "rucio" / "resolution.json").read_text())
    assert {did: r["files"] for did, r in resolution["dids"].items()} == {dids["higgs"]: 2, dids["dy"]: 2}
    assert resolution["server"] == services["rucio"]["url"]
    run_json = json.loads((out / "index" / "run.json").read_text())
    assert run_json["rucio"]["dids"] == resolution["dids"]

    # Each file read at its first replica: the origin's through a cache, the other site's directly.
    storage = catalogue.storage(services)
    read = {Path(r["path"]).name: r["fetch"] for r in report["inputs"]}
    for files in PLACED.values():
        for name, where in files.items():
            fetch = read[name]
            if where[0] == ORIGIN:
                assert fetch["cache"] in ("xcache-a", "xcache-b"), (name, fetch)
            else:
                assert fetch["cache"] is None and fetch["url"].startswith(storage[SITE_B]["url"] + "//"), (name, fetch)
            assert fetch["failover"] == [], (name, fetch)

    # The output is coffea's own Runner's over the files Rucio listed, at the URLs hepvine read them from.
    resolved = json.loads((out / "rucio" / "dataset.json").read_text())
    reference = {
        key: {"files": {path: "Events" for path in value["files"]}, "metadata": value["metadata"]}
        for key, value in resolved.items()
    }
    instance = processor.load(f"{inputs}/my_analysis.py:JetsAndMuons", {"pt_min": 25.0}).instance
    theirs = coffea_runner(reference, instance)
    assert_same(util.load(out / "output.coffea"), theirs)

    # `hepvine datasets` finds both containers by pattern, with their files and where they are; its fileset of
    # files is what the campaign resolved.
    listed = subprocess.run(
        ["hepvine", "datasets", f"cms:/HepvineTest/{tag}-*/NANOAODSIM", "--site", "site-configs/sandbox.yaml"]
        + ["--json", "--write", f"results/{tag}/found.json", "--files"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert listed.returncode == 0, listed.stderr
    rows = {r["did"]: r for r in json.loads(listed.stdout)}
    assert rows[dids["higgs"]]["files"] == 2 and rows[dids["higgs"]]["rses"] == {ORIGIN: 1, SITE_B: 2}, rows
    assert rows[dids["dy"]]["rses"] == {ORIGIN: 2, SITE_B: 1} and rows[dids["dy"]]["events"] == sum(
        entries(NANOAOD / name) for name in PLACED["dy"]
    )
    found = json.loads((inputs / "found.json").read_text())
    assert sorted(p for v in found.values() for p in v["files"]) == sorted(
        p for v in resolved.values() for p in v["files"]
    )

    # The same command again: nothing to do, Rucio not asked (the resolution kept as it was).
    before = (out / "rucio" / "resolution.json").read_bytes()
    again = campaign(tag, "run", REPO / "site-configs" / "sandbox.yaml", *config)
    assert again.returncode == 0 and "Nothing to be done" in again.stderr, again.stderr[-3000:]
    assert (out / "rucio" / "resolution.json").read_bytes() == before


def test_a_storage_element_taken_down_mid_campaign_its_files_come_from_their_other_replica(services, tag, tmp_path):
    other = PrivateSite(tmp_path / "site")
    try:
        placed = {"dimuon": {name: (ORIGIN, other.rse) for name in COPIES["dimuon"]}}
        more = {other.rse: {"url": other.url, "data_dir": str(other.data)}}
        dids = register(services, tag, placed, source="nano_dimuon.root", more_storage=more)
        inputs = REPO / "results" / tag
        (inputs / "gated.py").parent.mkdir(parents=True, exist_ok=True)
        (inputs / "gated.py").write_text(GATED_ANALYSIS)
        (inputs / "fileset.json").write_text(json.dumps({"dimuon": {"rucio": dids["dimuon"]}}))
        # The other site first: the files are read there while it is up.
        site = inputs / "other-site-first.yaml"
        site.write_text(
            (REPO / "site-configs" / "sandbox.yaml")
            .read_text()
            .replace("prefer: [SANDBOX_ORIGIN, SANDBOX_SITE_B]", f"prefer: [{other.rse}, SANDBOX_ORIGIN]")
        )
        opened = re.compile(rf"/store/{tag}/(dimuon-\d+\.root)")
        # The first tasks hold their cores until the site is down (the gate made), or 90 s (workers take ~30 s to come).
        until, gate = time.time() + 90, inputs / "site-down"
        run = subprocess.Popen(
            [sys.executable, "-m", "snakemake", "--profile", "profiles/sandbox", "--config"]
            + [f"dataset=results/{tag}/fileset.json", f"site={site}", f"campaign={tag}-run", "files_per_job=1"]
            + [f"analysis=results/{tag}/gated.py:Gated", f"analysis_args={{until: {until}, gate: {gate}}}"],
            cwd=REPO,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            # The first four files read at the other site and held there by the analysis: take it down. (Opened is
            # not enough: a file whose reads were still going on when the site went down fails over.)
            wait_until(
                "four files read and held at the other site",
                lambda: len(list(inputs.glob("site-down.*.held"))) >= 4 or run.poll() is not None,
                150,
            )
            assert len(other.opened(opened)) >= 4, "the held files were not opened at the other site"
            assert run.poll() is None and time.time() < until - 5, "the first files were not held: nothing to fail over"
            other.server.stop()
            gate.touch()
            _, stderr = run.communicate(timeout=600)
        finally:
            if run.poll() is None:
                run.send_signal(signal.SIGINT)
                run.wait(120)
    finally:
        other.server.stop()
    assert run.returncode == 0, stderr[-4000:]
    report = json.loads((REPO / "results" / f"{tag}-run" / "report.json").read_text())
    assert report["complete"] and report["files"]["ok"] == FILES, report["files"]
    assert report["events"] == FILES * entries(NANOAOD / "nano_dimuon.root")
    at_other = [r for r in report["inputs"] if r["fetch"]["url"].startswith(other.url + "//")]
    failed_over = [r for r in report["inputs"] if r["fetch"]["failover"]]
    assert len(at_other) >= 4 and failed_over and len(at_other) + len(failed_over) == FILES, [
        r["fetch"] for r in report["inputs"]
    ]
    for r in failed_over:  # read from the origin itself (no cache fronts a file preferred elsewhere)
        assert r["fetch"]["url"] == services["xrootd"]["origin"]["url"] + f"//store/{tag}/{Path(r['path']).name}"
        assert all(f["url"].startswith(other.url + "//") for f in r["fetch"]["failover"]), r["fetch"]
    print(
        f"\nother site down mid-campaign: {len(at_other)} files read there before, {len(failed_over)} from the origin"
    )
