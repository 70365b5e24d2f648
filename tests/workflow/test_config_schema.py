"""The campaign's config (workflows/schemas/config.schema.yaml) refuses values that could break out of a job's shell
command: Snakemake puts config values on every job's command line, which a worker runs with /bin/sh, quoted with
Python's repr() (a quote in a path ends that quoting). Paths are made of letters, digits and _ . / + - only, and no
pattern lets a final line break through (``$`` would match before it; the patterns end in ``\\Z``)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
SCHEMA = yaml.safe_load((REPO / "workflows" / "schemas" / "config.schema.yaml").read_text())
MARKER = "/tmp/hepvine-hostile-config-marker"


def valid(**config) -> bool:
    try:
        jsonschema.validate({"dataset": "spec.json", **config}, SCHEMA)
    except jsonschema.ValidationError:
        return False
    return True


@pytest.mark.parametrize(
    "key, value",
    [
        ("dataset", f"spec'$(touch {MARKER})'.json"),
        ("dataset", "spec.json\n"),
        ("dataset", "my spec.json"),
        ("dataset", "`id`.json"),
        ("site", "site-configs/x.yaml; touch /tmp/x"),
        ("site", "site-configs/x.yaml\n"),
        ("campaign", "demo\n"),
        ("campaign", "a/b"),
        ("recompress", "zstd:5\n"),
        ("recompress", "zstd:5 --output x"),
    ],
)
def test_values_that_could_leave_their_quoting_are_refused(key, value):
    assert not valid(**{key: value})


@pytest.mark.parametrize(
    "config",
    [
        {"dataset": "results/demo-input.json"},
        {"dataset": "/abs/path-1/spec_2+x.yaml"},
        {"site": ""},
        {"site": "site-configs/uchicago-af.yaml"},
        {"campaign": "demo-2.b_c"},
        {"recompress": "off"},
        {"recompress": "zstd:5"},
    ],
)
def test_ordinary_values_pass(config):
    assert valid(**config)


def test_snakemake_stops_before_any_job_naming_the_key(tmp_path):
    spec = tmp_path / "spec'$(touch pwned)'.json"  # a file of that name exists: only the check stops it
    spec.write_text(json.dumps({}))
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "snakemake",
            "--snakefile",
            str(REPO / "Snakefile"),
            "--directory",
            str(tmp_path),
            "-n",
            "--config",
            f"dataset={spec}",
            "campaign=hostile",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    output = done.stdout + done.stderr
    assert done.returncode != 0
    assert "dataset" in output and "does not match" in output, output[-3000:]
    assert not (tmp_path / "pwned").exists() and not (tmp_path / "results").exists()
