"""hepvine installs like any package: both distributions (the executor plugin and the workflow) built as wheels from
a copy of the checkout's tracked files, installed (not editable) in one pip command into a fresh venv, hold every
data file they read (schemas, the transcoder's source, the NanoAOD layout), and the README's campaign command runs
from that venv with a processor over real NanoAOD files — nothing imported from the checkout."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
NANOAOD = REPO.parent / "shared" / "nanoaod"
PLUGIN = "plugins/snakemake-executor-plugin-taskvine"
BASE_PYTHON = getattr(sys, "_base_executable", sys.executable)
PIP_TIMEOUT_S = 1200
# Kept between runs (as the tests' generated files are): the wheels of hepvine's dependencies come from PyPI once.
PIP_CACHE = Path(os.environ.get("HEPVINE_TEST_CACHE") or "/var/tmp/hepvine-test-cache") / "pip"
DATA_FILES = (
    "hepvine/model/schemas/dataset.schema.yaml",
    "hepvine/model/schemas/site.schema.yaml",
    "hepvine/work/transcode.cxx",
    "hepvine/devtools/nanoschema.json",
    "hepvine/examples/dimuon.py",
)


def venv_env(venv: Path) -> dict[str, str]:
    """This environment with VENV active instead of the tests' own venv (and none of its paths)."""
    path = [p for p in os.environ["PATH"].split(os.pathsep) if Path(p) != Path(sys.prefix) / "bin"]
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    return dict(
        env,
        VIRTUAL_ENV=str(venv),
        PATH=os.pathsep.join([str(venv / "bin"), *path]),
        PIP_CACHE_DIR=str(PIP_CACHE),
        PIP_DISABLE_PIP_VERSION_CHECK="1",
    )


@pytest.fixture(scope="module")
def installed(tmp_path_factory, services):
    """(the fresh venv, the wheels, a copy of the checkout's tracked files): both wheels built and installed."""
    work = tmp_path_factory.mktemp("wheels")
    source = work / "checkout"
    tracked = subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True, check=True).stdout
    for name in tracked.split():
        (source / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / name, source / name)
    built = subprocess.run([BASE_PYTHON, "-m", "venv", "--system-site-packages", str(work / "venv")], timeout=120)
    assert built.returncode == 0
    PIP_CACHE.mkdir(parents=True, exist_ok=True)
    env = venv_env(work / "venv")
    pip = str(work / "venv" / "bin" / "pip")
    wheels = subprocess.run(
        [pip, "wheel", "-q", "--no-deps", "-w", str(work / "dist"), str(source / PLUGIN), str(source)],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
    )
    assert wheels.returncode == 0, wheels.stderr[-3000:]
    found = sorted((work / "dist").glob("*.whl"))
    assert [w.name.split("-")[0] for w in found] == ["hepvine", "snakemake_executor_plugin_taskvine"], found
    install = subprocess.run(
        [pip, "install", "-q", "-c", str(source / "requirements.lock"), *map(str, found)],
        capture_output=True,
        text=True,
        timeout=PIP_TIMEOUT_S,
        env=env,
    )
    assert install.returncode == 0, install.stdout[-3000:] + install.stderr[-3000:]
    return work / "venv", found, source


def test_no_install_can_fetch_a_strangers_plugin(installed):
    """hepvine pins the plugin to the plugin's own version, a local one (PEP 440 ``+label``), which no public index
    accepts: pip takes it only from the plugin's directory or wheel (the installed pair satisfies it: ``pip check``),
    and asked for it alone, the index serves nothing."""
    venv, _, source = installed
    plugin = tomllib.loads((source / PLUGIN / "pyproject.toml").read_text())["project"]["version"]
    dependencies = tomllib.loads((source / "pyproject.toml").read_text())["project"]["dependencies"]
    (requirement,) = [r for r in dependencies if r.startswith("snakemake-executor-plugin-taskvine")]
    assert requirement == f"snakemake-executor-plugin-taskvine=={plugin}" and "+" in plugin, requirement
    pip = str(venv / "bin" / "pip")
    check = subprocess.run([pip, "check"], capture_output=True, text=True, timeout=120, env=venv_env(venv))
    assert "snakemake-executor-plugin-taskvine" not in check.stdout + check.stderr, check.stdout + check.stderr
    fetched = subprocess.run(
        [pip, "download", "--no-deps", "-d", str(source / "fetched"), requirement],
        capture_output=True,
        text=True,
        timeout=PIP_TIMEOUT_S,
        env=venv_env(venv),
    )
    assert fetched.returncode != 0 and "No matching distribution" in fetched.stderr, fetched.stdout + fetched.stderr
    assert not (source / "fetched").exists() or not any((source / "fetched").iterdir())


def test_the_wheels_hold_every_data_file(installed):
    _, wheels, _ = installed
    with zipfile.ZipFile(next(w for w in wheels if w.name.startswith("hepvine-"))) as wheel:
        names = set(wheel.namelist())
    assert set(DATA_FILES) <= names, set(DATA_FILES) - names


def test_the_readme_campaign_runs_from_the_installed_wheels(installed, tmp_path):
    venv, _, source = installed
    env = venv_env(venv)
    where = subprocess.run(
        [str(venv / "bin" / "python"), "-c", "import hepvine; print(hepvine.__file__)"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env=env,
    )
    assert Path(where.stdout.strip()).is_relative_to(venv), where.stdout + where.stderr
    fileset = {
        "/DYJetsToLL/RunIIAutumn18NanoAODv7/NANOAODSIM": {"files": {str(NANOAOD / "nano_dy.root"): "Events"}},
        "data": [str(NANOAOD / "nano_dimuon.root")],
    }
    (tmp_path / "fileset.json").write_text(json.dumps(fileset))
    run = subprocess.run(
        [
            str(venv / "bin" / "snakemake"),
            "--snakefile",
            str(source / "Snakefile"),
            "--cores",
            "2",
            "--config",
            "dataset=fileset.json",
            "analysis=hepvine.examples.dimuon:DimuonProcessor",
            "campaign=wheel",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    report = json.loads((tmp_path / "results" / "wheel" / "report.json").read_text())
    assert report["complete"] and report["files"] == {"total": 2, "ok": 2, "failed": 0}
    assert report["provenance"]["hepvine"]["version"] == "0.1.0"
    assert (tmp_path / "results" / "wheel" / "output.coffea").stat().st_size > 0
