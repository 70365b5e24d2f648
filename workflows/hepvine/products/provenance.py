"""What made a campaign's products: report.json's ``provenance`` section.

Collected in two places. The main Snakemake process (on the login node) is the only one that knows the command
line, the profile, the configuration and the checkout: ``collect_run`` gathers those with the software versions and
the SHA-256 of the spec, the config, the site config, the workflow's rules and the analysis file, and the Snakefile
writes them to ``results/<campaign>/index/run.json`` (rewritten only when they change, so an unchanged rerun reruns
nothing; a dry run keeps the file of the last real run). The report job, which may run on a worker, reads that file and
adds where and when (``section``): its own host and software, and the campaign's start and end taken from its records.

Everything here is cheap: a few ``importlib.metadata`` look-ups, ``git``, ``condor_version`` and ``vine_worker
--version`` once per run of the main process (each with a time-out), one pass over the spec's bytes; nothing in the
report job grows with the campaign but a min/max over the records' times.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import platform
import re
import socket
import subprocess
import time
from pathlib import Path
from typing import Iterable

import hepvine
from hepvine.model import atomic

TOOL_TIMEOUT_S = 10
PACKAGES = ("snakemake", "uproot", "awkward", "hist")
# Values of options whose name says they hold a secret are not recorded (a path to a secret file is kept).
SECRET_OPTION = re.compile(r"^--?[\w-]*(secret|token|password|passwd|credential|access-key|api-key)[\w-]*$", re.I)
DRY_RUN_FLAGS = {"-n", "--dry-run", "--dryrun"}
# Options with which Snakemake runs no job (it reports, draws or lists the workflow): kept like a dry run, so that
# `--report report.html` after a campaign does not make the campaign's report look out of date.
NO_JOB_OPTIONS = (
    "--report",
    "--dag",
    "--rulegraph",
    "--filegraph",
    "--summary",
    "--detailed-summary",
    "--lint",
    "--list-rules",
    "--list",
    "-l",
    "--list-target-rules",
    "--lt",
    "--unlock",
    "--cleanup-metadata",
    "--list-changes",
    "--lc",
    "--delete-all-output",
    "--delete-temp-output",
    "--containerize",
)


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def sha256_file(path: str | Path) -> str | None:
    """The SHA-256 of the file at PATH, read in 1 MiB blocks; None if there is no such file."""
    digest = hashlib.sha256()
    try:
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                digest.update(block)
    except FileNotFoundError:
        return None
    return digest.hexdigest()


def sha256_tree(root: Path, paths: Iterable[Path]) -> str:
    """One SHA-256 over PATHS (relative name and content of each, in sorted order): changes when any of them is
    edited, added, removed or renamed."""
    digest = hashlib.sha256()
    for path in sorted(Path(p) for p in paths):
        digest.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def _tool(argv: list[str], pattern: str) -> str | None:
    """The first match of PATTERN in what the command ARGV prints; None if it is not installed, fails or is slow."""
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=TOOL_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired):
        return None
    match = re.search(pattern, done.stdout + done.stderr) if done.returncode == 0 else None
    return match.group(1) if match else None


def _distribution(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def software(tools: bool = True) -> dict[str, str | None]:
    """The versions of Python, hepvine, snakemake, uproot, awkward and hist in this environment (None: not
    installed) and, with TOOLS, of TaskVine (ndcctools: its Python distribution if it has one, else the cctools
    release of ``vine_worker``) and HTCondor (``condor_version``)."""
    versions = {"python": platform.python_version(), "hepvine": hepvine.__version__}
    versions.update({name: _distribution(name) for name in PACKAGES})
    if tools:
        versions["ndcctools"] = _distribution("ndcctools") or _tool(["vine_worker", "--version"], r"version\s+(\S+)")
        versions["htcondor"] = _tool(["condor_version"], r"\$CondorVersion:\s+(\S+)")
    return versions


def git_state(directory: Path) -> dict:
    """The checkout that DIRECTORY is in: {"commit", "dirty" (tracked or untracked files differ from the commit)};
    both None when it is not a git checkout (an installed hepvine: its version says what it is)."""
    git = ["git", "-c", f"safe.directory={directory}", "-C", str(directory)]
    commit = _tool(git + ["rev-parse", "HEAD"], r"^([0-9a-f]{40})")
    if commit is None:
        return {"commit": None, "dirty": None}
    try:
        status = subprocess.run(git + ["status", "--porcelain"], capture_output=True, text=True, timeout=TOOL_TIMEOUT_S)
        dirty = bool(status.stdout.strip()) if status.returncode == 0 else None
    except (OSError, subprocess.TimeoutExpired):
        dirty = None
    return {"commit": commit, "dirty": dirty}


def command_line(argv: list[str]) -> list[str]:
    """ARGV as recorded: ``snakemake`` and its arguments, the values of options named like secrets replaced by
    ``<redacted>`` (``--storage-x-secret-key VALUE``, ``--x-token=VALUE``); a path to a ``...-file`` is kept."""
    recorded, hide_next = ["snakemake"], False
    for arg in argv[1:]:
        if hide_next:
            recorded.append("<redacted>")
            hide_next = False
            continue
        name, eq, _ = arg.partition("=")
        secret = bool(SECRET_OPTION.match(name)) and not name.endswith(("-file", "-dir"))
        if secret and eq:
            recorded.append(f"{name}=<redacted>")
        else:
            recorded.append(arg)
            hide_next = secret
    return recorded


def is_dry_run(argv: list[str]) -> bool:
    """Whether ARGV runs no job: a dry run (``-n``, ``--dry-run``, ``--dryrun``, or ``n`` among clustered short flags
    such as ``-np``) or one of NO_JOB_OPTIONS (``--report report.html``, ``--dag``, ...)."""
    return any(
        a in DRY_RUN_FLAGS or a.split("=", 1)[0] in NO_JOB_OPTIONS or (re.fullmatch(r"-[A-Za-z]+", a) and "n" in a)
        for a in argv[1:]
    )


def profiles(argv: list[str], environ: dict[str, str]) -> list[dict]:
    """The Snakemake profiles of this run — each ``--profile`` (or ``$SNAKEMAKE_PROFILE``) and
    ``--workflow-profile`` — with the file Snakemake reads for it and that file's SHA-256."""
    given: list[tuple[str, str]] = []
    for i, arg in enumerate(argv):
        for option in ("--profile", "--workflow-profile"):
            if arg == option and i + 1 < len(argv):
                given.append((option, argv[i + 1]))
            elif arg.startswith(option + "="):
                given.append((option, arg.partition("=")[2]))
    if not any(option == "--profile" for option, _ in given) and environ.get("SNAKEMAKE_PROFILE"):
        given.insert(0, ("SNAKEMAKE_PROFILE", environ["SNAKEMAKE_PROFILE"]))
    found = []
    for option, name in given:
        file = _profile_file(name)
        found.append(
            {
                "given_as": option,
                "profile": name,
                "file": str(file) if file else None,
                "sha256": sha256_file(file) if file else None,
            }
        )
    return found


def _profile_file(name: str) -> Path | None:
    from snakemake.cli import get_profile_dir  # where Snakemake itself looks for a profile's config file

    entry = get_profile_dir(name)
    return Path(entry[1]) if entry else None


def collect_run(
    *,
    config: dict,
    argv: list[str],
    environ: dict[str, str],
    workflow_dir: Path,
    configfiles: Iterable[Path] = (),
    credential: dict | None = None,
    rucio: dict | None = None,
) -> dict:
    """What the main process knows about this run (run.json): hepvine's checkout, the software, the command line and
    profiles, the configuration and the SHA-256 of the spec, the config, the site config and the workflow's rules,
    the credential it reads with as ``Credential.provenance`` describes it (never the credential itself), and what
    the spec's Rucio DIDs resolved to (RUCIO: hepvine.routing.replicas' resolution.json; None without DIDs). Paths
    in CONFIG are read relative to the working directory, as the workflow reads them."""
    workflow_dir = Path(workflow_dir)
    rules = [workflow_dir / "Snakefile", *sorted((workflow_dir / "workflows" / "rules").glob("*.smk"))]
    package = Path(hepvine.__file__).parent
    return {
        "hepvine": {"version": hepvine.__version__, **git_state(workflow_dir)},
        "software": software(),
        "host": socket.gethostname(),
        "command_line": command_line(argv),
        "profiles": profiles(argv, environ),
        "config": config,
        "configfiles": [{"path": str(p), "sha256": sha256_file(p)} for p in configfiles],
        "credential": credential,
        "rucio": rucio,
        "sha256": {
            "spec": sha256_file(config["dataset"]),
            "config": sha256_bytes(json.dumps(config, sort_keys=True, separators=(",", ":")).encode()),
            "site": sha256_file(config["site"]) if config.get("site") else None,
            "rules": sha256_tree(workflow_dir, rules),
            "hepvine_package": sha256_tree(package, sorted(package.rglob("*.py"))),
            # The user's analysis file (analysis=<file.py>:<Name>); a module's code is in its installed package.
            "analysis": (
                sha256_file(config["analysis"].rpartition(":")[0])
                if config.get("analysis", "").rpartition(":")[0].endswith(".py")
                else None
            ),
        },
    }


def write_run(path: str | Path, run: dict, argv: list[str]) -> bool:
    """Write RUN to PATH if it changed (True if written) — except in a dry run, which keeps the last real run's file
    (so ``snakemake -n`` neither records itself nor makes the report look out of date); the file is written anyway
    when there is none yet."""
    if is_dry_run(argv) and Path(path).exists():
        return False
    return atomic.write_if_changed(path, json.dumps(run, indent=1, sort_keys=True) + "\n")


def _utc(seconds: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(seconds))


def section(run: dict | None, records: list[dict], now: float | None = None) -> dict:
    """report.json's ``provenance``: RUN (run.json; None when the report is made outside the workflow) and, from the
    report job, its host and software, and the campaign's start and end (its first file's start and last file's end
    over every run that contributed records) and when the report was written. Without RUN only these."""
    now = time.time() if now is None else now
    starts = [r["start"] for r in records if r.get("start") is not None]
    ends = [r["end"] for r in records if r.get("end") is not None]
    return {
        **(run or {}),
        "report_job": {"host": socket.gethostname(), "software": software(tools=False)},
        "times": {
            "started": _utc(min(starts)) if starts else None,
            "ended": _utc(max(ends)) if ends else None,
            "report_written": _utc(now),
        },
    }


def load_run(path: str | Path | None) -> dict | None:
    return json.loads(Path(path).read_text()) if path else None
