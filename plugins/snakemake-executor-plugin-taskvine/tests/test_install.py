"""The plugin installs alone: `pip install` of its directory into a fresh venv over the OS's Python (the one with
TaskVine's bindings, which come from cctools, not PyPI), with the versions this test environment runs with as
constraints and nothing else of the checkout; `snakemake --executor taskvine` from that venv then runs a 2-job
workflow on local TaskVine workers, and without TaskVine's bindings it stops at start saying how to get them."""

from __future__ import annotations

import importlib.metadata
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from packaging.utils import canonicalize_name
from snakemake_runs import slow_snakefile

pytestmark = pytest.mark.sandbox

DISTRIBUTION = Path(__file__).resolve().parents[1]  # the plugin's directory: pyproject.toml, README, the package
NAME = "snakemake-executor-plugin-taskvine"
# The interpreter this test's venv was made from: in the sandbox Debian's python3, which sees ndcctools.
BASE_PYTHON = getattr(sys, "_base_executable", sys.executable)
PIP_TIMEOUT_S = 900


def constraints(path: Path) -> Path:
    """A pip constraints file pinning every distribution installed in this test's own venv (in a project's sandbox,
    from its lock file) but the plugin itself, so that the fresh venv gets the versions the tests run with.
    What the venv sees from the system, the fresh one sees too."""
    pins = {}
    for dist in importlib.metadata.distributions():
        name = dist.metadata["Name"]
        if not name or canonicalize_name(name) == NAME or not Path(dist.locate_file("")).is_relative_to(sys.prefix):
            continue
        pins.setdefault(canonicalize_name(name), f"{name}=={dist.version}")
    path.write_text("\n".join(sorted(pins.values())) + "\n")
    return path


@pytest.fixture(scope="module")
def venv(tmp_path_factory) -> Path:
    """A fresh venv (--system-site-packages over BASE_PYTHON) with the plugin installed from a copy of its
    directory (a build writes into its source tree; the checkout stays clean) with its library extra (Snakemake
    itself) and its dependencies from PyPI."""
    found = subprocess.run([BASE_PYTHON, "-c", "import ndcctools.taskvine"], capture_output=True, text=True)
    assert found.returncode == 0, f"{BASE_PYTHON} does not see ndcctools.taskvine (cctools): {found.stderr[-2000:]}"
    work = tmp_path_factory.mktemp("install")
    source = work / NAME
    shutil.copytree(DISTRIBUTION, source, ignore=shutil.ignore_patterns("tests", "build", "*.egg-info", "__pycache__"))
    subprocess.run([BASE_PYTHON, "-m", "venv", "--system-site-packages", str(work / "venv")], check=True, timeout=120)
    pip = subprocess.run(
        [
            str(work / "venv" / "bin" / "pip"),
            "install",
            "-q",
            "--disable-pip-version-check",
            "-c",
            str(constraints(work / "constraints.txt")),
            f"{source}[library]",  # Snakemake itself comes with the library extra
        ],
        capture_output=True,
        text=True,
        timeout=PIP_TIMEOUT_S,
        env=venv_env(work / "venv"),
    )
    assert pip.returncode == 0, f"pip install {source} failed:\n{pip.stdout[-3000:]}\n{pip.stderr[-3000:]}"
    return work / "venv"


def venv_env(venv: Path) -> dict[str, str]:
    """This environment with VENV active instead of the test's own venv."""
    path = [p for p in os.environ["PATH"].split(os.pathsep) if Path(p) != Path(sys.prefix) / "bin"]
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    return dict(env, VIRTUAL_ENV=str(venv), PATH=os.pathsep.join([str(venv / "bin"), *path]))


def python(venv: Path, code: str, **extra) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(venv / "bin" / "python"), "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        env=venv_env(venv),
        **extra,
    )


def test_the_venv_has_the_plugin_from_its_own_install(venv):
    where = python(venv, "import snakemake_executor_plugin_taskvine as p, snakemake; print(p.__file__)", cwd="/")
    assert where.returncode == 0, where.stderr
    assert Path(where.stdout.strip()).is_relative_to(venv), f"the plugin was imported from {where.stdout.strip()}"


def test_snakemake_from_the_venv_runs_jobs_on_local_taskvine_workers(venv, tmp_path):
    work = tmp_path / "wf"
    work.mkdir()
    (work / "Snakefile").write_text(slow_snakefile('python -c \\"import sys; print(sys.prefix)\\" > {output}', n=2))
    done = subprocess.run(
        [str(venv / "bin" / "snakemake"), "--executor", "taskvine", "--taskvine-workers", "local", "--jobs", "2"],
        cwd=work,
        capture_output=True,
        text=True,
        timeout=300,
        env=venv_env(venv),
    )
    assert done.returncode == 0, done.stderr[-4000:]
    outputs = sorted((work / "out").glob("*.txt"))
    assert [p.name for p in outputs] == ["0.txt", "1.txt"]
    assert {p.read_text().strip() for p in outputs} == {str(venv)}, "the jobs did not run the venv's Python"


def test_without_taskvine_bindings_snakemake_stops_at_start_saying_how_to_get_them(venv, tmp_path):
    """cctools missing, as on a Python that does not see it: an empty ndcctools package first on the path."""
    (tmp_path / "hide" / "ndcctools").mkdir(parents=True)
    (tmp_path / "hide" / "ndcctools" / "__init__.py").write_text("")
    work = tmp_path / "wf"
    work.mkdir()
    (work / "Snakefile").write_text(slow_snakefile("touch {output}", n=2))
    env = dict(venv_env(venv), PYTHONPATH=str(tmp_path / "hide"))
    done = subprocess.run(
        [str(venv / "bin" / "snakemake"), "--executor", "taskvine", "--jobs", "2"],
        cwd=work,
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert done.returncode != 0
    assert "ndcctools.taskvine" in done.stderr and "install cctools" in done.stderr, done.stderr[-3000:]
    assert not (work / "out").exists()
