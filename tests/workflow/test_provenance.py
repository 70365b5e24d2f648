"""Provenance: what the main process records of a run (checkout, software, command line with secrets redacted,
profiles, SHA-256 of spec, config, site config and rules), when run.json is rewritten (only on a change, never by a
dry run that finds one), and a campaign's report.json carrying it all — the checksums equal the files' own, an
unchanged rerun redoes nothing and a dry run after it finds nothing to do."""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import os
import platform
import subprocess
import sys
from pathlib import Path

import pytest
from kept import generated_dataset

from hepvine.products import provenance

REPO = Path(__file__).resolve().parents[2]


def test_command_line_redacts_secret_values_but_keeps_paths():
    argv = [
        "/venv/lib/snakemake/__main__.py",
        "--profile",
        "profiles/local",
        "--storage-s3-secret-key",
        "S3CR3T",
        "--x-token=T0K3N",
        "--taskvine-password-file",
        "/home/u/pw",
        "--config",
        "campaign=a",
    ]
    assert provenance.command_line(argv) == [
        "snakemake",
        "--profile",
        "profiles/local",
        "--storage-s3-secret-key",
        "<redacted>",
        "--x-token=<redacted>",
        "--taskvine-password-file",
        "/home/u/pw",
        "--config",
        "campaign=a",
    ]


@pytest.mark.parametrize(
    "argv, dry",
    [
        (["snakemake", "-n"], True),
        (["snakemake", "--dry-run", "--cores", "2"], True),
        (["snakemake", "-pn"], True),
        (["snakemake", "--dryrun"], True),
        (["snakemake", "--cores", "2", "--config", "campaign=n"], False),
        (["snakemake", "--profile", "profiles/local"], False),
        (["snakemake", "-p"], False),
        (["snakemake", "--report", "report.html"], True),
        (["snakemake", "--report=r.zip"], True),
        (["snakemake", "--dag"], True),
        (["snakemake", "--unlock"], True),
        (["snakemake", "--cores", "1", "-l"], True),
    ],
)
def test_dry_runs_are_recognised(argv, dry):
    assert provenance.is_dry_run(argv) is dry


def test_profiles_name_the_file_snakemake_reads_and_its_checksum(tmp_path, monkeypatch):
    profile = tmp_path / "site"
    profile.mkdir()
    (profile / "config.yaml").write_text("jobs: 3\n")
    found = provenance.profiles(["snakemake", "--profile", str(profile), "--cores", "1"], {})
    assert found == [
        {
            "given_as": "--profile",
            "profile": str(profile),
            "file": str(profile / "config.yaml"),
            "sha256": hashlib.sha256(b"jobs: 3\n").hexdigest(),
        }
    ]
    from_env = provenance.profiles(["snakemake"], {"SNAKEMAKE_PROFILE": str(profile)})
    assert from_env[0]["given_as"] == "SNAKEMAKE_PROFILE" and from_env[0]["sha256"] == found[0]["sha256"]
    assert provenance.profiles([f"--profile={tmp_path / 'none'}"], {})[0]["file"] is None
    assert provenance.profiles(["snakemake", "--cores", "1"], {}) == []


def test_rules_checksum_changes_with_any_edit_or_rename(tmp_path):
    (tmp_path / "a.smk").write_text("rule a:\n")
    (tmp_path / "b.smk").write_text("rule b:\n")
    before = provenance.sha256_tree(tmp_path, tmp_path.glob("*.smk"))
    assert provenance.sha256_tree(tmp_path, reversed(sorted(tmp_path.glob("*.smk")))) == before  # order-free
    (tmp_path / "b.smk").write_text("rule b2:\n")
    edited = provenance.sha256_tree(tmp_path, tmp_path.glob("*.smk"))
    (tmp_path / "b.smk").rename(tmp_path / "c.smk")
    assert len({before, edited, provenance.sha256_tree(tmp_path, tmp_path.glob("*.smk"))}) == 3


def test_run_records_checkout_software_and_checksums(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    Path("spec.json").write_text('{"x": 1}')
    config = {"dataset": "spec.json", "site": str(REPO / "site-configs" / "cern-eos.yaml"), "campaign": "c"}
    run = provenance.collect_run(config=config, argv=["snakemake", "--cores", "2"], environ={}, workflow_dir=REPO)
    head = subprocess.run(
        ["git", "-c", f"safe.directory={REPO}", "-C", str(REPO), "rev-parse", "HEAD"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert run["hepvine"]["commit"] == head and isinstance(run["hepvine"]["dirty"], bool)
    assert run["sha256"]["spec"] == hashlib.sha256(b'{"x": 1}').hexdigest()
    assert run["sha256"]["site"] == hashlib.sha256((REPO / "site-configs" / "cern-eos.yaml").read_bytes()).hexdigest()
    assert (
        run["sha256"]["config"]
        == hashlib.sha256(
            b'{"campaign":"c","dataset":"spec.json","site":"' + config["site"].encode() + b'"}'
        ).hexdigest()
    )
    software = run["software"]
    assert software["python"] == platform.python_version()
    assert all(software[p] == importlib.metadata.version(p) for p in ("snakemake", "uproot", "awkward", "hist"))
    assert software["ndcctools"] and software["htcondor"], software  # both installed where the tests run
    assert run["command_line"] == ["snakemake", "--cores", "2"] and run["config"] == config


def test_run_json_is_rewritten_only_when_it_changes_and_never_by_a_dry_run(tmp_path):
    path = tmp_path / "run.json"
    assert provenance.write_run(path, {"a": 1}, ["snakemake", "-n"]) is True  # none yet: even a dry run writes it
    assert provenance.write_run(path, {"a": 2}, ["snakemake", "-n"]) is False
    assert json.loads(path.read_text()) == {"a": 1}
    assert provenance.write_run(path, {"a": 1}, ["snakemake"]) is False
    assert provenance.write_run(path, {"a": 2}, ["snakemake"]) is True and json.loads(path.read_text()) == {"a": 2}


def test_section_takes_the_campaigns_times_from_its_records():
    records = [{"start": 100.0, "end": 160.0}, {"start": 90.0, "end": 120.0}]
    section = provenance.section({"host": "login"}, records, now=200.0)
    assert section["times"] == {
        "started": "1970-01-01T00:01:30Z",
        "ended": "1970-01-01T00:02:40Z",
        "report_written": "1970-01-01T00:03:20Z",
    }
    assert section["host"] == "login" and section["report_job"]["software"]["python"] == platform.python_version()


def snakemake(workdir: Path, *args: str) -> subprocess.CompletedProcess:
    cmd = [
        sys.executable,
        "-m",
        "snakemake",
        "--snakefile",
        str(REPO / "Snakefile"),
        "--directory",
        str(workdir),
        "--cores",
        "2",
        *args,
    ]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=dict(os.environ))


@pytest.mark.slow
def test_campaign_report_carries_the_provenance(tmp_path):
    spec = generated_dataset(tmp_path / "data", {"ttbar": 2}, 2000, seed=8)
    (tmp_path / "spec.json").write_text(json.dumps(spec))
    config = ("--config", f"dataset={tmp_path / 'spec.json'}", "campaign=p", "files_per_job=1")
    done = snakemake(tmp_path, *config)
    assert done.returncode == 0, done.stderr[-3000:]
    out = tmp_path / "results" / "p"
    prov = json.loads((out / "report.json").read_text())["provenance"]
    assert prov["sha256"]["spec"] == hashlib.sha256((tmp_path / "spec.json").read_bytes()).hexdigest()
    rules = [REPO / "Snakefile", *sorted((REPO / "workflows" / "rules").glob("*.smk"))]
    assert prov["sha256"]["rules"] == provenance.sha256_tree(REPO, rules)
    assert prov["sha256"]["site"] is None and prov["config"]["files_per_job"] == 1
    assert prov["command_line"][0] == "snakemake" and "campaign=p" in prov["command_line"]
    assert prov["profiles"] == [] and prov["software"]["snakemake"] == importlib.metadata.version("snakemake")
    assert prov["times"]["started"] <= prov["times"]["ended"] <= prov["times"]["report_written"]
    assert prov["hepvine"]["commit"] and prov["host"] and prov["report_job"]["host"]

    # The same command again: run.json unchanged, so nothing is redone; a dry run then finds nothing to do either.
    mtime = (out / "report.json").stat().st_mtime_ns
    again = snakemake(tmp_path, *config)
    assert again.returncode == 0 and (out / "report.json").stat().st_mtime_ns == mtime, again.stderr[-3000:]
    dry = snakemake(tmp_path, "-n", *config)
    assert dry.returncode == 0 and "Nothing to be done" in dry.stdout + dry.stderr, dry.stdout[-3000:]
