"""The pinned environment (requirements.lock): the environment the tests run in has exactly its versions, and they
satisfy every range that pyproject.toml and the executor plugin's (dependencies and extras) and environment-el9.yml
ask for, so a campaign can be rerun later with the same software."""

from __future__ import annotations

import importlib.metadata
import tomllib
from pathlib import Path

import yaml
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

CHECKOUT = Path(__file__).resolve().parents[2]
PLUGIN = "plugins/snakemake-executor-plugin-taskvine"  # the executor plugin, its own distribution


def locked() -> dict[str, str]:
    pins = {}
    for line in (CHECKOUT / "requirements.lock").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            name, _, version = line.partition("==")
            assert version, f"requirements.lock: {line!r} is not an exact pin (name==version)"
            pins[canonicalize_name(name)] = version.strip()
    return pins


def asked_for() -> list[tuple[str, Requirement]]:
    """(where, requirement) of every Python requirement of pyproject.toml, the executor plugin's pyproject.toml and
    environment-el9.yml's pip section."""
    found = []
    for where in ("pyproject.toml", f"{PLUGIN}/pyproject.toml"):
        project = tomllib.loads((CHECKOUT / where).read_text())["project"]
        found += [(where, Requirement(r)) for r in project["dependencies"]]
        found += [
            (f"{where} [{extra}]", Requirement(r))
            for extra, rs in project.get("optional-dependencies", {}).items()
            for r in rs
        ]
    conda = yaml.safe_load((CHECKOUT / "environment-el9.yml").read_text())
    pip = next(d["pip"] for d in conda["dependencies"] if isinstance(d, dict) and "pip" in d)
    return found + [("environment-el9.yml", Requirement(r)) for r in pip]


def own_distributions() -> set[str]:
    """The checkout's own distributions (the workflow and the executor plugin): installed from it, not pinned."""
    return {
        canonicalize_name(tomllib.loads((CHECKOUT / where).read_text())["project"]["name"])
        for where in ("pyproject.toml", f"{PLUGIN}/pyproject.toml")
    }


def test_the_environment_has_exactly_the_locked_versions():
    drift = []
    for name, version in locked().items():
        try:
            installed = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            installed = None
        if installed != version:
            drift.append(f"{name}: locked {version}, installed {installed}")
    assert not drift, (
        "the environment differs from requirements.lock (rebuild the sandbox: `make clean-sandbox`, or, "
        "if the change is wanted, regenerate the lock as its header says): " + "; ".join(drift)
    )


def test_the_lock_satisfies_every_range_asked_for():
    pins, own = locked(), own_distributions()
    wrong = [
        f"{where}: {req} but the lock has {pins.get(canonicalize_name(req.name))}"
        for where, req in asked_for()
        if canonicalize_name(req.name) not in own
        and (
            pins.get(canonicalize_name(req.name)) is None
            or not req.specifier.contains(pins[canonicalize_name(req.name)], prereleases=True)
        )
    ]
    assert not wrong, "requirements.lock does not satisfy: " + "; ".join(wrong)
