"""Fixtures of the workflow tests: running the campaign workflow with Snakemake's local executor, and a small campaign
with a missing and a corrupt file (two permanent failures)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from kept import generated_dataset

REPO = Path(__file__).resolve().parents[2]


def _snakemake(workdir: Path, *config: str, extra: tuple[str, ...] = (), env: dict | None = None):
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
        *extra,
        "--config",
        *config,
    ]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env)


@pytest.fixture
def snakemake():
    """snakemake(WORKDIR, *CONFIG, extra=(), env=None): the workflow run in WORKDIR on 2 local cores with --config
    CONFIG (and the options EXTRA before it); its CompletedProcess."""
    return _snakemake


@pytest.fixture
def campaign(tmp_path):
    """(workdir, spec, missing, corrupt): a spec in WORKDIR/spec.json of 2 ttbar and 1 data generated files of 3,000
    events each, plus a ttbar file that does not exist (MISSING) and one that is not a ROOT file (CORRUPT)."""
    data = tmp_path / "data"
    spec = generated_dataset(data, {"ttbar": 2, "data": 1}, 3000, seed=3)
    missing = str(data / "ttbar" / "ttbar_0002.root")
    corrupt = data / "ttbar" / "corrupt.root"
    corrupt.write_bytes(np.random.default_rng(0).bytes(5000))
    spec["ttbar"]["nominal"]["files"] += [{"path": missing, "nevts": 3000}, {"path": str(corrupt), "nevts": 3000}]
    spec["ttbar"]["nominal"]["nevts_total"] += 6000
    (tmp_path / "spec.json").write_text(json.dumps(spec))
    return tmp_path, spec, missing, corrupt
