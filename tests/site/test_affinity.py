"""Cache affinity on the sandbox's real services: the XRootD origin, one XCache per rack, HTCondor slots tagged with
their rack, TaskVine workers in per-rack groups. Each test reads files under a fresh /store directory, so the caches
start cold for them.

- 12 files: the tasks run in their home cache's rack (>= 95% of bytes: one file read from the other rack is 1/12
  of them and fails it), each file lands in exactly one cache (its home) and is fetched from the origin once; a
  second campaign over the same files reads nothing from the origin.
- A rack without workers: its files still complete, on the other rack's workers, counted as cross-rack bytes.
- A cache that is down: its files fail over to the next cache, the report says so, nothing is lost.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from kept import generated_file

from hepvine.routing import site

pytestmark = [pytest.mark.sandbox, pytest.mark.pool]

REPO = Path(__file__).resolve().parents[2]
SANDBOX_SITE = REPO / "site-configs" / "sandbox.yaml"
EVENTS = 2000
DISTINCT = 4  # distinct generated files, copied under as many names as a test needs
HOME_RACK_FILES = 12  # enough for both racks to have several files; few enough that one stray file fails the 95%


@pytest.fixture(scope="module")
def base_files(tmp_path_factory) -> list[Path]:
    data = tmp_path_factory.mktemp("base")
    return [generated_file(data / f"ttbar_{i}.root", "ttbar", EVENTS, index=i, seed=5)["path"] for i in range(DISTINCT)]


@pytest.fixture
def store(services, base_files):
    """make(n): N files in a fresh directory of the origin's /store; returns the dataset spec (origin URLs)."""
    origin = services["xrootd"]["origin"]
    sandbox = site.load(SANDBOX_SITE)
    root = None

    def make(n: int) -> dict:
        nonlocal root
        directory = homed_on_every_cache(sandbox, origin["url"], n)
        root = Path(origin["data_dir"]) / "store" / directory
        make.directory = directory
        root.mkdir(parents=True)
        files = []
        for i in range(n):
            shutil.copyfile(base_files[i % DISTINCT], root / f"f{i:03d}.root")
            files.append({"path": f"{origin['url']}//store/{directory}/f{i:03d}.root", "nevts": EVENTS})
        return {"ttbar": {"xsec": 1.0, "nominal": {"nevts_total": EVENTS * n, "files": files}}}

    yield make
    if root is not None:
        shutil.rmtree(root, ignore_errors=True)


def homed_on_every_cache(sandbox: site.Site, origin_url: str, n: int) -> str:
    """A fresh /store directory name under which the files f000 ... of N files have every cache of the site as home
    for at least one of them (a random name alone leaves a rack without files now and then: 1 in 2**(N-1))."""
    caches = {c["name"] for c in sandbox.caches}
    while True:
        directory = f"test-{uuid.uuid4().hex[:8]}"
        homes = {sandbox.route(f"{origin_url}//store/{directory}/f{i:03d}.root").home.cache for i in range(n)}
        if homes == caches:
            return directory


@pytest.fixture
def campaign():
    """run(spec, name, *options, site=text, config=()): the campaign NAME over SPEC, run from the repository as a
    user does (the sandbox profile ships the workflow from there), with the site config text (default: the
    sandbox's) and more --config items CONFIG; returns its report. Everything it writes under results/ is removed
    afterwards."""
    tag = f"test-{uuid.uuid4().hex[:8]}"
    written = [REPO / "results" / tag]

    def run(spec: dict, name: str, *args: str, site: str | None = None, config: tuple[str, ...] = ()) -> dict:
        inputs = REPO / "results" / tag
        inputs.mkdir(parents=True, exist_ok=True)
        (inputs / "spec.json").write_text(json.dumps(spec))
        (inputs / "site.yaml").write_text(site or SANDBOX_SITE.read_text())
        written.append(REPO / "results" / f"{tag}-{name}")
        cmd = [
            sys.executable,
            "-m",
            "snakemake",
            *args,
            "--config",
            f"dataset=results/{tag}/spec.json",
            f"campaign={tag}-{name}",
            f"site=results/{tag}/site.yaml",
            *config,
        ]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=900, cwd=REPO)
        assert done.returncode == 0, done.stderr[-4000:]
        return json.loads((written[-1] / "report.json").read_text())

    yield run
    for path in written:
        shutil.rmtree(path, ignore_errors=True)


def cached_copies(services, directory: str) -> dict[str, list[str]]:
    """For each file of DIRECTORY, the caches whose disk holds it."""
    held: dict[str, list[str]] = {}
    for rack, cache in services["xrootd"]["caches"].items():
        for path in (Path(cache["cache_dir"]) / "store" / directory).glob("*.root"):
            held.setdefault(path.name, []).append(f"xcache-{rack[-1]}")
    return held


def test_tasks_run_in_their_home_rack_and_files_come_from_the_origin_once(services, store, campaign):
    spec = store(HOME_RACK_FILES)
    # The sandbox profile: TaskVine workers submitted to HTCondor, one 2-core worker per rack. Two files a job: ~3
    # jobs per rack, more than its worker's cores (as 40 files at the default 8 a job). A long preference wait, so
    # that no task leaves its rack while the other rack's queue drains faster.
    profile = ("--profile", "profiles/sandbox", "--taskvine-prefer-wait-s", "300")
    report = campaign(spec, "affinity", *profile, config=("files_per_job=2",))
    assert report["complete"] and report["files"]["ok"] == HOME_RACK_FILES
    cache = report["cache"]
    homes = {r["path"]: r["cache"] for r in report["inputs"]}
    assert set(homes.values()) == {"xcache-a", "xcache-b"}
    assert all(r["worker_rack"] in ("rack-a", "rack-b") for r in report["inputs"])
    same, cross = cache["same_rack_bytes"], cache["cross_rack_bytes"]
    assert same + cross == report["bytes_read"] and same >= 0.95 * report["bytes_read"], cache
    assert all(0 < busy <= 1 for busy in cache["rack_busy_fraction"].values()), cache

    # Each file is held by its home cache only, and the origin sent each file's bytes once: what the caches fetched
    # is at most what the files hold (plus the disk's allocation slack, up to 8 KiB a file).
    held = cached_copies(services, store.directory)
    assert {name: caches for name, caches in held.items()} == {Path(path).name: [home] for path, home in homes.items()}
    total_size = sum(
        p.stat().st_size
        for p in (Path(services["xrootd"]["origin"]["data_dir"]) / "store" / store.directory).glob("*.root")
    )
    slack = HOME_RACK_FILES * 8192
    assert 0 < cache["bytes_from_origin"] <= total_size + slack, (cache["bytes_from_origin"], total_size)
    assert cache["bytes_read_directly_from_origin"] == 0 and not cache["failovers"]

    # A second campaign over the same files: everything is served by the caches.
    again = campaign(spec, "affinity-again", *profile, config=("files_per_job=2",))
    assert again["complete"] and again["cache"]["bytes_from_origin"] == 0, again["cache"]
    assert again["cache"]["hit_ratio"] == 1.0


def test_rack_without_workers_still_completes_across_racks(tmp_path, store, campaign):
    spec = store(4)
    groups = tmp_path / "groups.yaml"  # workers in rack-a only
    groups.write_text(
        "worker_groups:\n  - {name: rack-a, features: [rack-a], cores: 2, min_workers: 1, max_workers: 1}\n"
    )
    report = campaign(
        spec,
        "one-rack",
        "--executor",
        "taskvine",
        "--jobs",
        "8",
        "--taskvine-workers",
        "local",
        "--taskvine-worker-groups",
        str(groups),
        "--taskvine-prefer-wait-s",
        "2",
    )
    assert report["complete"] and report["files"]["ok"] == 4
    assert {r["worker_rack"] for r in report["inputs"]} == {"rack-a"}
    in_b = sum(r["bytes_read"] for r in report["inputs"] if r["rack"] == "rack-b")
    assert in_b > 0 and report["cache"]["cross_rack_bytes"] == in_b, report["cache"]


def test_cache_down_fails_over_to_the_next_cache(store, campaign):
    spec = store(4)
    # The sandbox site with xcache-b at a port nothing listens on.
    broken = SANDBOX_SITE.read_text().replace("${HEPVINE_XCACHE_RACK_B}", f"root://127.0.0.1:{_closed_port()}")
    report = campaign(spec, "cache-down", "--cores", "2", site=broken)
    assert report["complete"] and report["files"]["ok"] == 4
    homed_b = {r["path"] for r in report["inputs"] if r["rack"] == "rack-b"}
    assert homed_b, "no file has xcache-b as its home; pick more files"
    failovers = {f["path"]: f for f in report["cache"]["failovers"]}
    assert set(failovers) == homed_b
    assert all(f["served_by"] == "xcache-a" and f["failed"][0].startswith("xcache-b: ") for f in failovers.values())
    assert report["cache"]["per_cache"]["xcache-b"]["served_bytes"] == 0


def _closed_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
