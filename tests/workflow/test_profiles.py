"""A profile per site: each made of the settings every profile shares (``profiles/common.yaml``) and its own
(``site.yaml``); every site config has ``profiles/<site>/`` using its worker groups; every profile's executor
settings pass the plugin's own start-up checks and its jobs' resources fit the workers it starts; every profile
dry-runs a small campaign through ``hepvine submit``'s controller (Snakemake accepts every key, plans one job per
batch); and ``profiles/local`` runs a tiny campaign for real on local TaskVine workers, twice, to byte-identical
histograms (``hepvine compare``)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
import yaml
from credentialed import grid_proxy
from kept import generated_dataset

from hepvine.devtools import tokens
from hepvine.routing import site

REPO = Path(__file__).resolve().parents[2]
SITES = sorted(p.stem for p in (REPO / "site-configs").glob("*.yaml"))
PROFILES = sorted(p.parent.name for p in (REPO / "profiles").glob("*/config.yaml"))
# The sandbox site config names the services' addresses as ${VARIABLES}: set only where the services run.
NEEDS_SERVICES = {"sandbox", "sandbox-gsi", "sandbox-token"}
# Snakemake runs from the checkout here (profiles are used from it), in its .snakemake/ as other `pool` tests do.
pytestmark = pytest.mark.pool


def profile(name: str) -> dict:
    return yaml.safe_load((REPO / "profiles" / name / "config.yaml").read_text())


def test_each_profile_is_the_common_settings_and_its_own():
    """Each config.yaml is what hepvine.devtools.profiles makes of profiles/common.yaml and its site.yaml: the
    shared settings (and why) written once, each profile holding only what it sets itself."""
    from hepvine.devtools import profiles

    assert profiles.main(["--check"]) == 0, "run: python -m hepvine.devtools.profiles"
    common = yaml.safe_load((REPO / "profiles" / "common.yaml").read_text())
    assert common["executor"] == "taskvine" and common["jobs"] == "unlimited"
    for name in PROFILES:
        own = yaml.safe_load((REPO / "profiles" / name / "site.yaml").read_text())
        assert not set(own) & set(common), name
        assert profile(name) == {**common, **own}, name


def test_a_profile_that_sets_a_common_key_is_refused(tmp_path):
    from hepvine.devtools import profiles

    (tmp_path / "common.yaml").write_text("# shared\n\njobs: unlimited\n")
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "site.yaml").write_text("# mine\n\njobs: 50\ntaskvine-workers: local\n")
    with pytest.raises(profiles.ProfileError, match=r"mine/site.yaml: sets jobs, which profiles/common.yaml sets"):
        profiles.render(tmp_path / "mine")
    (tmp_path / "mine" / "site.yaml").write_text("# mine\n\ntaskvine-workers: local\n")
    assert profiles.main(["--check", "--profiles", str(tmp_path)]) == 1  # no config.yaml yet
    assert profiles.main(["--profiles", str(tmp_path)]) == 0
    assert yaml.safe_load((tmp_path / "mine" / "config.yaml").read_text()) == {
        "jobs": "unlimited",
        "taskvine-workers": "local",
    }


def test_every_site_has_a_profile_with_its_worker_groups():
    assert set(SITES) <= set(PROFILES), f"sites without a profile: {sorted(set(SITES) - set(PROFILES))}"
    for name in SITES:
        assert profile(name)["taskvine-worker-groups"] == f"site-configs/{name}.yaml", name
        assert profile(name)["taskvine-workers"] == "condor", name
    assert profile("local")["taskvine-workers"] == "local" and "taskvine-worker-groups" not in profile("local")


def test_every_key_is_commented():
    """Every key of the site and local profiles (and every item of default-resources and set-resources) comes right
    after a comment saying why it has that value at that site."""
    for name in (p for p in PROFILES if p != "sandbox"):  # the sandbox profile predates this rule
        lines = (REPO / "profiles" / name / "config.yaml").read_text().splitlines()
        for i, line in enumerate(lines):
            if re.match(r"^\s*(- )?[\w-]+[:=]", line) and not line.rstrip().endswith(":"):
                assert i > 0 and lines[i - 1].lstrip().startswith("#"), f"profiles/{name}/config.yaml:{i + 1}: {line}"


def executor_settings(name: str):
    """The plugin's ExecutorSettings as PROFILE sets them (the plugin's defaults for the rest)."""
    from snakemake_executor_plugin_taskvine import ExecutorSettings

    values = {
        key[len("taskvine-") :].replace("-", "_"): value
        for key, value in profile(name).items()
        if key.startswith("taskvine-")
    }
    if "worker_groups" in values:
        values["worker_groups"] = REPO / values["worker_groups"]
    return ExecutorSettings(**values)


def resources(name: str) -> dict[str, dict[str, int]]:
    """Per rule of the workflow, the mem_mb and disk_mb its jobs ask for under PROFILE."""
    p = profile(name)
    default = dict(item.split("=") for item in p.get("default-resources", []))
    rules = ("analyse", "merge", "report")
    return {
        rule: {k: int(v) for k, v in {**default, **p.get("set-resources", {}).get(rule, {})}.items()} for rule in rules
    }


@pytest.mark.parametrize("name", PROFILES)
def test_profile_passes_the_executors_checks_and_its_jobs_fit_its_workers(name):
    from snakemake_executor_plugin_taskvine import provision, validation

    settings = executor_settings(name)
    assert validation.problems(settings) == [], name
    sizes = [(g.cores, g.memory_mb, g.disk_mb) for g in provision.run_groups(settings)]
    cores = max(s[0] for s in sizes)
    memory_mb = 0 if any(s[1] == 0 for s in sizes) else max(s[1] for s in sizes)
    groups, _ = provision.worker_groups(settings)
    assert cores >= 1 and memory_mb > 0 and all(g.disk_mb > 0 for g in groups), name
    for rule, asked in resources(name).items():
        assert asked["mem_mb"] <= memory_mb, f"profiles/{name}: rule {rule} asks {asked} MB, workers have {memory_mb}"
        assert asked["disk_mb"] <= min(g.disk_mb for g in groups), f"profiles/{name}: rule {rule} disk {asked}"
    # Snakemake hands over every ready job (a bounded --jobs makes its scheduler's cost per job grow with the
    # campaign); TaskVine holds at most taskvine-max-tasks of them, at least as many as its workers' cores.
    assert profile(name)["jobs"] == "unlimited", f"profiles/{name}: jobs must be unlimited (README: Campaigns at scale)"
    assert settings.max_tasks >= sum(g.cores * g.max_workers for g in groups), (
        f"profiles/{name}: taskvine-max-tasks below the cores its workers offer: cores would sit idle"
    )


def small_spec(name: str) -> dict:
    """Twelve files of two processes: on the site's origin (root:// URLs; nothing is read in a dry run), or local."""
    if name == "local":
        prefix = "/data/store/dry"
    else:
        origin = site.load(REPO / "site-configs" / f"{name}.yaml").origins[0]["url"]
        prefix = f"{origin.rstrip('/')}//store/dry"
    return {
        process: {
            "xsec": 1.0,
            "nominal": {
                "nevts_total": 6000,
                "files": [{"path": f"{prefix}/{process}/f{i}.root", "nevts": 1000} for i in range(6)],
            },
        }
        for process in ("ttbar", "wjets")
    }


@pytest.fixture
def results():
    """A fresh campaign name under the checkout's results/ (profiles are used from the checkout); removed after."""
    tag = f"test-{uuid.uuid4().hex[:8]}"
    yield tag
    for path in (REPO / "results").glob(f"{tag}*"):
        shutil.rmtree(path, ignore_errors=True)


def snakemake(*args: str, timeout: int = 600) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "snakemake", *args], capture_output=True, text=True, cwd=REPO, timeout=timeout
    )


def job_counts(output: str) -> dict[str, int]:
    """The dry run's job stats table: {rule: count}."""
    table = output.split("Job stats:", 1)[1]
    return {m.group(1): int(m.group(2)) for m in re.finditer(r"^(\w+)\s+(\d+)\s*$", table, re.M)}


@pytest.mark.parametrize(
    "name", [pytest.param(p, marks=pytest.mark.sandbox) if p in NEEDS_SERVICES else p for p in PROFILES]
)
def test_profile_dry_runs_a_small_campaign(name, results, request, tmp_path):
    """Through the controller that `hepvine submit` runs as an HTCondor job (the same snakemake arguments), so
    that every profile works submitted too. A site that asks for a proxy gets one of the sandbox's test grid (made
    with XRootD's own tool), which the main process checks before it plans."""
    spec = REPO / "results" / results / "spec.json"
    spec.parent.mkdir(parents=True)
    spec.write_text(json.dumps(small_spec(name)))
    site_config = [] if name == "local" else [f"site=site-configs/{name}.yaml"]
    snakemake_args = ["-n", "--profile", f"profiles/{name}", "--config", f"dataset=results/{results}/spec.json"]
    snakemake_args += [f"campaign={results}-dry", "files_per_job=4", "merge_fan_in=2", *site_config]
    env = dict(os.environ)
    credentials = "none" if name == "local" else site.load(REPO / "site-configs" / f"{name}.yaml").credentials
    if credentials == "x509":
        env["X509_USER_PROXY"] = grid_proxy(request.getfixturevalue("services"), tmp_path / "x509up")
    elif credentials == "token":
        issuer = request.getfixturevalue("services")["xrootd"]["origin_token"]["tokens"]
        env["BEARER_TOKEN_FILE"] = str(tokens.write(tmp_path / "bt", tokens.mint(issuer, 3600)))
    done = subprocess.run(
        [sys.executable, "-m", "hepvine.commands.controller", "--campaign", f"{results}-dry", "--", *snakemake_args],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=env,
        timeout=600,
    )
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-4000:]
    if credentials != "none":
        what = {"x509": "X.509 proxy $X509_USER_PROXY", "token": "bearer token $BEARER_TOKEN_FILE"}[credentials]
        assert f"hepvine: reading with {what}" in output, output[-2000:]
    assert f"Using profile profiles/{name}" in output, output[-2000:]
    counts = job_counts(output)
    # 6 files of each process, at most 4 a job and one home cache each: between 2 and 6 batches per process.
    assert 4 <= counts["analyse"] <= 12 and counts["report"] == 1, counts
    shards = list((REPO / "results" / f"{results}-dry" / "index").rglob("*/*.json"))
    assert len([s for s in shards if "merge" not in s.parts]) == counts["analyse"]
    run = json.loads((REPO / "results" / f"{results}-dry" / "index" / "run.json").read_text())
    assert run["profiles"][0]["profile"] == f"profiles/{name}" and run["profiles"][0]["sha256"]


@pytest.mark.sandbox
def test_local_profile_runs_a_campaign_twice_to_identical_histograms(tmp_path, results):
    spec = generated_dataset(tmp_path / "data", {"ttbar": 1, "data": 1}, 2000, seed=11)  # two jobs: one a process
    (tmp_path / "spec.json").write_text(json.dumps(spec))
    outs = []
    for run in ("a", "b"):
        done = snakemake(
            "--profile",
            "profiles/local",
            "--config",
            f"dataset={tmp_path / 'spec.json'}",
            f"campaign={results}-{run}",
            "files_per_job=2",
            timeout=900,
        )
        assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
        assert "TaskVine manager listening" in done.stderr  # the jobs ran on TaskVine, not Snakemake's local executor
        outs.append(REPO / "results" / f"{results}-{run}")
        report = json.loads((outs[-1] / "report.json").read_text())
        assert report["complete"] and report["files"]["ok"] == 2 and report["events"] == 4000, report["files"]
        assert report["provenance"]["profiles"][0]["profile"] == "profiles/local"
    compared = subprocess.run(
        [sys.executable, "-m", "hepvine.commands.cli", "compare", str(outs[0]), str(outs[1])],
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    assert compared.returncode == 0 and compared.stdout.startswith("identical: "), compared.stdout + compared.stderr
    assert (outs[0] / "histograms.root").read_bytes() != (outs[1] / "histograms.root").read_bytes()  # times, UUIDs
