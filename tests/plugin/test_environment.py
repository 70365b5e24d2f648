"""Software that travels with the tasks (--taskvine-environment, `hepvine pack-env`).

Pure logic: which distributions pack-env takes (requirements followed transitively, markers and extras), how the
executor finds and checks the environment file (the setting, or a site config's taskvine_environment key).

On the sandbox's real services: workers with nothing installed — started by hand (--taskvine-workers none) with
`env -i PATH=/usr/bin:/bin`, in a mount namespace where the project's venv and the checkout's workflows/ and plugins/
are hidden under an empty directory — cannot run a campaign's jobs without the environment, and run it with the
environment to the same histograms as workers that share the manager's environment; each worker receives the
environment once. Hiding a directory takes a mount namespace, which only root can make inside the sandbox (a
chrooted process may not create a user namespace): these tests run as root (`enter.sh --root`), the campaign's
processes too.
"""

from __future__ import annotations

import json
import re
import sys
import tarfile
import time
import types
from pathlib import Path

import numpy as np
import pytest
import uproot
from campaign_runs import CampaignDir, Workers, free_port, last_step, run_campaign
from kept import packed_environment
from snakemake_runs import slow_snakefile

from hepvine.commands import packenv
from snakemake_executor_plugin_taskvine import provision

REPO = Path(__file__).resolve().parents[2]
EVENTS = 3000
RECOMPRESS = "zstd:5"
# What a worker node does not have: the project's venv, and the checkout's packages (the venv's .pth points there).
HIDDEN = (Path(sys.prefix), REPO / "workflows", REPO / "plugins")

# --- pure logic ---------------------------------------------------------------------------------------------------


class FakeDist:
    def __init__(self, name: str, *requires: str):
        self.metadata = {"Name": name}
        self.requires = list(requires)


def test_needed_distributions_follow_requirements_markers_and_extras():
    installed = {
        packenv.canonical(d.metadata["Name"]): d
        for d in (
            FakeDist(
                "hepvine", "snakemake>=9", "uproot", "ROOT; extra == 'recompress'", "pywin32; sys_platform == 'win32'"
            ),
            FakeDist("snakemake", "PyYAML", "smart_open[s3]"),
            FakeDist("uproot", "awkward>=2", "numpy"),
            FakeDist("awkward", "numpy"),
            FakeDist("numpy"),
            FakeDist("PyYAML"),
            FakeDist("smart-open", "boto3; extra == 's3'", "wrapt"),
            FakeDist("boto3"),
            FakeDist("wrapt"),
            FakeDist("root"),
            FakeDist("unrelated"),
        )
    }

    def names(dists):
        return sorted(d.metadata["Name"] for d in dists)

    assert names(packenv.needed_distributions("hepvine", (), installed)) == [
        "PyYAML",
        "awkward",
        "boto3",
        "hepvine",
        "numpy",
        "smart-open",
        "snakemake",
        "uproot",
        "wrapt",
    ]
    assert "root" in names(packenv.needed_distributions("hepvine", ("recompress",), installed))
    del installed["wrapt"]
    with pytest.raises(packenv.PackError, match="wrapt is required but not installed"):
        packenv.needed_distributions("hepvine", (), installed)


def test_with_packs_an_installed_distribution_and_what_it_requires_beside_hepvines():
    """`hepvine pack-env --with NAME` (an analysis's own package, pip-installed in the venv): NAME and what it requires
    are packed beside what hepvine needs (here pytest-xdist, installed in this venv, which hepvine does not need)."""
    if packenv.environment_kind() != "venv":
        pytest.fail("the tests run in the sandbox's venv")
    plain = packenv.venv_members(())[1]
    members, manifest = packenv.venv_members((), ("pytest-xdist",))
    assert "pytest-xdist" not in {packenv.canonical(n) for n in plain["packed"]}
    assert {"pytest-xdist", "execnet"} <= {packenv.canonical(n) for n in manifest["packed"]}
    assert manifest["with"] == ["pytest-xdist"] and set(plain["packed"]) < set(manifest["packed"])
    assert any(name.endswith("xdist/plugin.py") for _, name in members)
    with pytest.raises(packenv.PackError, match="no-such-dist-hv is required but not installed"):
        packenv.venv_members((), ("no-such-dist-hv",))


def test_run_in_env_checks_the_worker_python_for_a_venv_and_relocates_a_conda_env():
    venv = packenv.run_in_env(
        "venv", {"python": "3.13.5", "base_interpreter": "/usr/bin/python3.13", "system_modules": ["XRootD"]}
    )
    assert venv.startswith("#!/bin/sh") and "(3, 13)" in venv and "/usr/bin/python3.13" in venv
    assert "XRootD" in venv and 'exec "$@"' in venv and "@" not in venv.replace('"$@"', "")
    conda = packenv.run_in_env("conda", {"python": "3.12.1"})
    assert "conda-unpack" in conda and "CONDA_PREFIX" in conda


def settings(**values):
    return types.SimpleNamespace(**{"environment": None, "worker_groups": None, **values})


def _tarball(path: Path, *names: str) -> Path:
    with tarfile.open(path, "w:gz") as tar:
        for name in names:
            info = tarfile.TarInfo(name)
            tar.addfile(info)
    return path


def test_environment_file_is_checked_and_may_come_from_a_site_config(tmp_path):
    assert provision.environment_file(settings()) == (None, [])
    good = _tarball(tmp_path / "env.tar.gz", "lib/x.py", "bin/run_in_env")
    assert provision.environment_file(settings(environment=good)) == (good, [])
    site = tmp_path / "site.yaml"
    site.write_text(f"worker_groups: [{{name: a}}]\ntaskvine_environment: {good}\n")
    assert provision.environment_file(settings(worker_groups=site)) == (good, [])
    # The setting wins over the site config.
    other = _tarball(tmp_path / "other.tar.gz", "bin/run_in_env")
    assert provision.environment_file(settings(environment=other, worker_groups=site))[0] == other

    _, found = provision.environment_file(settings(environment=tmp_path / "missing.tar.gz"))
    assert "--taskvine-environment" in found[0] and "no such file" in found[0] and "poncho_package_create" in found[0]
    (tmp_path / "text.tar.gz").write_text("not a tarball")
    _, found = provision.environment_file(settings(environment=tmp_path / "text.tar.gz"))
    assert "not a readable tarball" in found[0]
    _, found = provision.environment_file(settings(environment=_tarball(tmp_path / "bare.tar.gz", "lib/x.py")))
    assert "has no bin/run_in_env" in found[0]
    site.write_text("worker_groups: [{name: a}]\ntaskvine_environment: 3\n")
    _, found = provision.environment_file(settings(worker_groups=site))
    assert str(site) in found[0] and "taskvine_environment" in found[0]


# --- real workers with nothing installed --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def packed() -> Path:
    """This venv packed by `hepvine pack-env --extra recompress`, as a user makes it for campaigns that recompress
    (ROOT travels with it); packed again only when something it packs has changed (tests/kept.py)."""
    return packed_environment("recompress")


class HiddenWorkers(Workers):
    """vine_workers that cannot see the project's environment: each in a mount namespace of its own where HIDDEN
    are empty directories, with nothing of this environment but PATH=/usr/bin:/bin (the OS's python3 and its
    Debian packages are what a worker node has)."""

    def __init__(self, root: Path):
        super().__init__(root)
        self.empty = root / "empty"
        self.empty.mkdir(parents=True, exist_ok=True)

    def start(self, port: int, password: Path, n: int = 2) -> None:
        hide = 'e=$1; shift; while [ "$1" != -- ]; do mount --bind "$e" "$1" || exit 97; shift; done; shift; exec "$@"'
        for i in range(n):
            name = f"worker-{port}-{i}"
            self.spawn(
                name,
                [
                    "unshare",
                    "--mount",
                    "--propagation",
                    "unchanged",
                    "--",
                    "/bin/sh",
                    "-c",
                    hide,
                    "_",
                    str(self.empty),
                    *map(str, HIDDEN),
                    "--",
                    "/usr/bin/env",
                    "-i",
                    "PATH=/usr/bin:/bin",
                    f"HOME={self.root}",
                    "CATALOG_HOST=127.0.0.1",
                    *self.command(name, port, password),
                ],
            )


@pytest.fixture
def hidden_workers(tmp_path, as_root):
    workers = HiddenWorkers(tmp_path / "hidden")
    yield workers
    workers.stop()


@pytest.fixture
def campaign_dir(tmp_path, services):
    """A copy of the workflow with a small dataset in the XRootD origin (campaign_runs.CampaignDir)."""
    work = CampaignDir(tmp_path / "wf", services, {"ttbar": 2, "data": 1}, EVENTS, seed=19)
    yield work.root
    work.remove_data()


def histograms(path: Path) -> dict[str, np.ndarray]:
    with uproot.open(path) as f:
        return {key.split(";")[0]: f[key].values() for key in f.keys(cycle=False)}


def cache_updates(run_info: Path, wanted) -> dict[str, list[tuple[float, float]]]:
    """Per worker, the files that reached its cache in the run under RUN_INFO — sent by the manager (`TRANSFER
    INPUT`) or a peer, or made there by a mini-task (`CACHE_UPDATE`) — whose (cache name, size) WANTED accepts, as
    (start s, wall s); from TaskVine's transactions log: `time pid WORKER id CACHE_UPDATE name size wall_us start_us`
    and `time pid WORKER id TRANSFER INPUT name size wall_us start_us`."""
    found: dict[str, list[tuple[float, float]]] = {}
    for log in run_info.rglob("transactions"):
        for parts in (line.split() for line in log.read_text().splitlines()):
            if parts[2:3] != ["WORKER"] or parts[4:5] not in (["CACHE_UPDATE"], ["TRANSFER"]):
                continue
            fields = parts[5:] if parts[4] == "CACHE_UPDATE" else parts[6:] if parts[5] == "INPUT" else []
            if len(fields) == 4 and wanted(fields[0], int(fields[1])):
                found.setdefault(parts[3], []).append((int(fields[3]) / 1e6, int(fields[2]) / 1e6))
    return found


def task_workers(run_info: Path) -> set[str]:
    """The workers that ran at least one task in the run under RUN_INFO, from TaskVine's transactions log: `time pid
    TASK id RUNNING worker_id ...`."""
    return {
        parts[5]
        for log in run_info.rglob("transactions")
        for parts in (line.split() for line in log.read_text().splitlines())
        if parts[2:3] == ["TASK"] and parts[4:5] == ["RUNNING"] and len(parts) > 5
    }


@pytest.mark.sandbox
@pytest.mark.root
def test_worker_with_nothing_installed_runs_the_campaign_only_with_the_environment(
    hidden_workers, campaign_dir, packed, tmp_path
):
    password = tmp_path / "vine.password"
    password.write_text("hidden-workers-test\n")
    password.chmod(0o600)

    # Shared environment: the plugin's local workers see the manager's venv. Every input is recompressed to ZSTD by
    # ROOT first (the faithful copy), on the workers: ROOT comes with the environment too.
    shared = run_campaign(
        campaign_dir, "shared", "--taskvine-workers", "local", "--taskvine-max-workers", "2", recompress=RECOMPRESS
    )
    assert shared.returncode == 0, shared.stderr[-4000:]

    # Hidden workers without the environment: the jobs cannot start (no python, or no snakemake).
    port = free_port()
    hidden_workers.start(port, password)
    without = run_campaign(
        campaign_dir,
        "without",
        "--taskvine-workers",
        "none",
        "--taskvine-port",
        str(port),
        "--taskvine-password-file",
        str(password),
        timeout=300,
    )
    hidden_workers.stop()
    assert without.returncode != 0
    assert re.search(r"python: not found|No module named '?snakemake", without.stderr), without.stderr[-4000:]
    assert not (campaign_dir / "results" / "without" / "histograms.root").exists()

    # The same hidden workers with the environment: the campaign completes, to the same histograms.
    port = free_port()
    hidden_workers.start(port, password)
    began = time.monotonic()
    with_env = run_campaign(
        campaign_dir,
        "with",
        "--taskvine-workers",
        "none",
        "--taskvine-port",
        str(port),
        "--taskvine-password-file",
        str(password),
        "--taskvine-environment",
        str(packed),
        "--taskvine-run-info-dir",
        str(tmp_path / "run-info"),
        recompress=RECOMPRESS,
        # The report (the root merge, the postprocess, the plots) on a worker too, as a large campaign's is (a small
        # one's runs on the login node: config host_steps_max_files).
        config=("host_steps_max_files=0",),
    )
    elapsed = time.monotonic() - began
    assert with_env.returncode == 0, with_env.stderr[-4000:]
    assert last_step(with_env.stderr) == "worker", with_env.stderr[-4000:]
    report = json.loads((campaign_dir / "results" / "with" / "report.json").read_text())
    assert report["complete"] and report["files"] == {"total": 3, "ok": 3, "failed": 0}
    # Copied basket by basket by hepvine's transcoder, built on the hidden workers against the environment's ROOT.
    assert all(r["recompress"]["engine"] == "transcode" for r in report["inputs"]), report["inputs"]
    copies = json.loads((campaign_dir / "results" / "with" / "dataset.zstd.json").read_text())
    copied = [
        f for variations in copies.values() for v, block in variations.items() if v != "xsec" for f in block["files"]
    ]
    assert len(copied) == 3 and all(f["path"] != f["source"] for f in copied), copied
    for f in copied:  # written by ROOT from the environment on the hidden workers, with the campaign's setting
        with uproot.open(campaign_dir / f["path"]) as copy:
            assert copy.file.compression == uproot.ZSTD(5), (f, copy.file.compression)
    shared_h = histograms(campaign_dir / "results" / "shared" / "histograms.root")
    with_h = histograms(campaign_dir / "results" / "with" / "histograms.root")
    assert set(with_h) == set(shared_h) and sum(v.sum() for v in with_h.values()) > 0
    for key, values in shared_h.items():
        np.testing.assert_array_equal(with_h[key], values, err_msg=key)

    # Each worker that ran tasks (one or both of the 2: a worker that connects late may find none left) received the
    # environment once (from the manager: no peer transfers) and unpacked it once (TaskVine's transactions log), for
    # all of the tasks it ran (analyses, merges, the report).
    size = packed.stat().st_size
    ran = task_workers(tmp_path / "run-info")
    received = cache_updates(tmp_path / "run-info", lambda name, n: n == size)
    made = cache_updates(tmp_path / "run-info", lambda name, n: name.startswith("task-"))  # the unpacked ones
    assert ran and set(received) == set(ran) and all(len(times) == 1 for times in received.values()), (ran, received)
    assert set(made) == set(ran) and all(len(times) == 1 for times in made.values()), made
    print(
        f"\nenvironment {size / 1e6:.1f} MB; "
        + "; ".join(
            f"worker {w[-6:]}: received in {received[w][0][1]:.2f} s, unpacked and set up in {made[w][0][1]:.2f} s"
            for w in sorted(received)
        )
        + f"; campaign with it {elapsed:.0f} s"
    )


JOBS = slow_snakefile("python -c 'import sys, snakemake, uproot; print(sys.prefix)' > {output}", n=4)


@pytest.mark.sandbox
@pytest.mark.root
@pytest.mark.parametrize("library", [False, True], ids=["process", "library"])
def test_jobs_and_library_calls_run_in_the_environment_on_hidden_workers(
    hidden_workers, workflow, packed, tmp_path, library
):
    """Jobs as processes of their own and as calls of a TaskVine library (whose `python` is the environment's too)
    run on workers that see neither the venv nor the checkout, with a shared filesystem (the workflow directory is
    visible to them) too; `python` is the unpacked environment in the worker's cache."""
    password = tmp_path / "vine.password"
    password.write_text("hidden-workers-test\n")
    password.chmod(0o600)
    port = free_port()
    hidden_workers.start(port, password)
    wf = workflow(JOBS)
    wf.run(
        "--taskvine-workers",
        "none",
        "--taskvine-port",
        str(port),
        "--taskvine-password-file",
        str(password),
        "--taskvine-environment",
        str(packed),
        *(["--taskvine-library"] if library else []),
        timeout=300,
        check=True,
    )
    prefixes = {(wf.root / "out" / f"{i}.txt").read_text().strip() for i in range(4)}
    assert all("/cache/" in p and not p.startswith(sys.prefix) for p in prefixes), prefixes


def test_conda_environment_is_conda_packed_with_run_in_env_and_its_editable_projects(tmp_path, monkeypatch):
    """The conda path with conda-pack itself faked (no conda environment here): what conda-pack wrote, then
    run_in_env, the manifest and hepvine (installed editable, which conda-pack leaves out) from its source tree."""
    import conda_pack

    def fake_pack(prefix, output, format, ignore_editable_packages):
        assert format == "tar" and ignore_editable_packages and prefix == sys.prefix
        with tarfile.open(output, "w") as tar:
            tar.addfile(tarfile.TarInfo("bin/conda-unpack"))

    monkeypatch.setattr(conda_pack, "pack", fake_pack)
    manifest = packenv.write_conda(tmp_path / "env.tar.gz")
    with tarfile.open(tmp_path / "env.tar.gz", "r:gz") as tar:
        names = tar.getnames()
        script = tar.extractfile(packenv.RUN_IN_ENV).read().decode()
    assert names[0] == "bin/conda-unpack" and packenv.RUN_IN_ENV in names and packenv.MANIFEST in names
    assert "conda-unpack" in script and manifest["kind"] == "conda" and "hepvine" in manifest["from_source_tree"]
    site = packenv._site_packages(Path(sys.prefix)).relative_to(sys.prefix)
    assert str(site / "hepvine" / "commands" / "packenv.py") in names
    assert str(site / "snakemake_executor_plugin_taskvine" / "taskvine.py") in names
