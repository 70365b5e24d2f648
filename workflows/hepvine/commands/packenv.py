"""``hepvine pack-env FILE``: pack the Python environment that runs hepvine into one file that travels with the
TaskVine tasks (``--taskvine-environment FILE``), for worker nodes that have nothing installed.

The file is a gzipped tarball in TaskVine's execution-context layout: ``bin/run_in_env`` at its top, which TaskVine
runs once without arguments after unpacking the file on a worker (set-up), and then in front of every task's
command (``run_in_env COMMAND...``: the environment's ``bin`` first on ``PATH``, then the command). Two kinds:

- **conda** (an EL9 login node's environment, ``environment-el9.yml``): the whole environment, packed by conda-pack,
  plus the projects installed editable in it (conda-pack leaves those out) from their source trees; the set-up runs
  ``conda-unpack`` once per worker, so that the environment's paths are rewritten where it was unpacked. The worker
  needs nothing but ``/bin/sh`` and ``tar``.
- **venv** (the sandbox's ``/opt/hepvine-venv``, made with ``--system-site-packages``): the distributions hepvine
  needs — hepvine itself and its requirements, transitively, plus those of ``--extra`` — and those named by
  ``--with`` (an analysis's own package, pip-installed in the venv, and what it requires) that are installed in the
  venv, under a new venv whose ``bin/python`` points at the same base interpreter (e.g. ``/usr/bin/python3.13``).
  Distributions that come from the system's site-packages (Debian's ndcctools, XRootD, htcondor) are not packed:
  the worker must have the same OS Python and those packages, which the set-up checks. A project installed
  editable (hepvine in the sandbox) is packed from its source tree.

Each file carries ``hepvine-env.json``: its kind, the interpreter, and every distribution packed (name, version).
"""

from __future__ import annotations

import argparse
import gzip
import importlib.metadata
import importlib.util
import io
import json
import re
import shutil
import sys
import sysconfig
import tarfile
import tempfile
import time
from pathlib import Path

from packaging.requirements import Requirement

from hepvine.model import atomic

MANIFEST = "hepvine-env.json"
RUN_IN_ENV = "bin/run_in_env"
COMPRESS_LEVEL = 6  # gzip: level 9 takes twice as long for ~3% less
ROOT_DISTRIBUTION = "hepvine"

# What runs on the worker: once without arguments when TaskVine has unpacked the file (set-up), then in front of
# every task's command. @SETUP@ is the kind's set-up; the command's shell line is one argument (sh -c '...').
RUN_IN_ENV_SCRIPT = """#!/bin/sh
# hepvine packed environment (@KIND@), made by `hepvine pack-env`. TaskVine runs this once without arguments after
# unpacking it on a worker, then as `run_in_env COMMAND...` for every task.
env_dir=$(cd "$(dirname "$0")/.." && pwd -P) || exit 1
if [ $# -eq 0 ]; then
@SETUP@
    exit 0
fi
PATH="$env_dir/bin:$PATH"
export PATH
@ACTIVATE@
unset PYTHONHOME PYTHONPATH
exec "$@"
"""
# The long lines of these shell snippets are split between string literals (the scripts themselves are unchanged).
VENV_SETUP = (
    """    # The venv's python is a link to the worker's own interpreter, with the system's site-packages.
    if ! "$env_dir/bin/python" -c 'import sys; sys.exit(sys.version_info[:2] != (@MAJOR@, @MINOR@))' 2>/dev/null; then
        echo "hepvine environment: this worker has no Python @MAJOR@.@MINOR@ at @BASE@ (the environment was packed"""
    """ on a" \\
             "machine with it): run the workers on that OS, or pack a conda environment (hepvine pack-env in conda)" >&2
        exit 1
    fi
    missing=$("$env_dir/bin/python" -c """
    """'import importlib.util as u, sys; print(" ".join(m for m in sys.argv[1:] if u.find_spec(m) is None))' """
    """@SYSTEM_MODULES@)
    if [ -n "$missing" ]; then
        echo "hepvine environment: this worker's Python lacks $missing, which the environment takes from the" \\
             "system's site-packages: install them on the workers (Debian: python3-workqueue python3-xrootd)" >&2
        exit 1
    fi"""
)
CONDA_SETUP = (
    "    # conda-pack's relocation: rewrite the packing machine's prefix to where the environment now is, once.\n"
    """    "$env_dir/bin/python" "$env_dir/bin/conda-unpack" || {
        echo "hepvine environment: conda-unpack failed in $env_dir" >&2; exit 1; }"""
)
VENV_ACTIVATE = 'VIRTUAL_ENV="$env_dir"\nexport VIRTUAL_ENV'
CONDA_ACTIVATE = 'CONDA_PREFIX="$env_dir"\nexport CONDA_PREFIX'
# Imported from the system's site-packages in the sandbox's venv; the set-up checks the worker has them.
SYSTEM_MODULES = ("ndcctools.taskvine", "XRootD", "cloudpickle")


class PackError(RuntimeError):
    """The environment cannot be packed; the message says why and what to do."""


def canonical(name: str) -> str:
    """A distribution name as pip compares them (PEP 503)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def environment_kind(prefix: str = sys.prefix, base_prefix: str = sys.base_prefix) -> str:
    """'conda' or 'venv' for the environment at PREFIX; PackError for a Python that is neither."""
    if (Path(prefix) / "conda-meta").is_dir():
        return "conda"
    if Path(prefix).resolve() != Path(base_prefix).resolve():
        return "venv"
    raise PackError(
        f"{prefix} is the system's Python, not an environment: run hepvine pack-env from the conda "
        "environment or the venv that runs hepvine (activate it first)"
    )


def needed_distributions(
    root: str, extras: tuple[str, ...], installed: dict[str, importlib.metadata.Distribution]
) -> list[importlib.metadata.Distribution]:
    """ROOT's distribution and every distribution it requires, transitively (with ROOT's EXTRAS), among INSTALLED
    (by canonical name). A requirement whose marker does not hold here is left out; one that holds but is not
    installed is an error."""
    wanted: list[tuple[str, tuple[str, ...]]] = [(canonical(root), tuple(extras))]
    found: dict[str, importlib.metadata.Distribution] = {}
    seen: set[tuple[str, str]] = set()
    while wanted:
        name, active = wanted.pop()
        dist = installed.get(name)
        if dist is None:
            raise PackError(
                f"{name} is required but not installed in this environment: install it (pip install "
                f"{name}) or pack from the environment that runs hepvine"
            )
        found[name] = dist
        for text in dist.requires or ():
            req = Requirement(text)
            if req.marker is not None and not any(req.marker.evaluate({"extra": e}) for e in ("", *active)):
                continue
            key = (canonical(req.name), ",".join(sorted(req.extras)))
            if key not in seen:
                seen.add(key)
                wanted.append((canonical(req.name), tuple(sorted(req.extras))))
    return [found[n] for n in sorted(found)]


def _metadata_dir(dist: importlib.metadata.Distribution) -> Path:
    """Where DIST's metadata (.dist-info, .egg-info) is."""
    return Path(str(dist._path)).absolute()


def _under(path: Path, directory: Path) -> bool:
    return path.resolve().is_relative_to(directory.resolve())


def from_source_tree(dist: importlib.metadata.Distribution, prefix: Path, base_prefix: Path) -> bool:
    """Whether DIST is a project in development — installed editable, or found through a path into its source tree
    (an .egg-info in a checkout) — whose modules must be packed from where they are."""
    try:
        editable = json.loads(dist.read_text("direct_url.json") or "{}").get("dir_info", {}).get("editable")
    except json.JSONDecodeError:
        editable = False
    where = _metadata_dir(dist)
    return bool(editable) or not (_under(where, prefix) or _under(where, base_prefix))


def _top_level_names(dist: importlib.metadata.Distribution) -> list[str]:
    names = (dist.read_text("top_level.txt") or "").split()
    if names:
        return names
    mapping = importlib.metadata.packages_distributions()
    return sorted(module for module, dists in mapping.items() if dist.metadata["Name"] in dists)


def distribution_files(dist: importlib.metadata.Distribution, site_packages: Path) -> list[tuple[Path, str]]:
    """(file on disk, name under site-packages) of everything DIST installed into SITE_PACKAGES — scripts in bin/
    are left out (their #! lines name this machine's interpreter). A project in development (from_source_tree) is
    packed from its source tree (its modules found by importing their names), with its metadata."""
    files: list[tuple[Path, str]] = []
    if from_source_tree(dist, Path(sys.prefix), Path(sys.base_prefix)):
        for name in _top_level_names(dist):
            spec = importlib.util.find_spec(name)
            if spec is None or spec.origin is None:
                raise PackError(
                    f"{dist.metadata['Name']} is installed editable but its module {name} cannot be "
                    "found: reinstall it (pip install -e) and pack again"
                )
            origin = Path(spec.origin)
            if spec.submodule_search_locations:  # a package: its whole directory
                top = origin.parent
                files += [
                    (p, str(Path(name) / p.relative_to(top)))
                    for p in sorted(top.rglob("*"))
                    if p.is_file() and "__pycache__" not in p.parts
                ]
            else:
                files.append((origin, origin.name))
        info = _metadata_dir(dist)
        files += [(p, str(p.relative_to(info.parent))) for p in sorted(info.rglob("*")) if p.is_file()]
        return files
    for entry in dist.files or ():
        path = Path(str(dist.locate_file(entry))).absolute()
        try:
            name = path.relative_to(site_packages)
        except ValueError:
            continue  # a script or data file outside site-packages
        if path.is_file():
            files.append((path, str(name)))
    return files


def _site_packages(prefix: Path) -> Path:
    return Path(sysconfig.get_path("purelib", vars={"base": str(prefix), "platbase": str(prefix)}))


def venv_members(extras: tuple[str, ...], also: tuple[str, ...] = ()) -> tuple[list[tuple[Path, str]], dict]:
    """The venv's files to pack (path on disk, name in the tarball) and its manifest: hepvine's distributions (with
    EXTRAS) and those of ALSO (``--with``: distribution names) with what they require."""
    site = _site_packages(Path(sys.prefix))
    installed: dict[str, importlib.metadata.Distribution] = {}
    for d in importlib.metadata.distributions():  # in sys.path order: the one Python imports wins
        if d.metadata["Name"]:
            installed.setdefault(canonical(d.metadata["Name"]), d)
    dists = needed_distributions(ROOT_DISTRIBUTION, extras, installed)
    for name in also:
        taken = {canonical(d.metadata["Name"]) for d in dists}
        dists += [d for d in needed_distributions(name, (), installed) if canonical(d.metadata["Name"]) not in taken]
    prefix, base = Path(sys.prefix), Path(sys.base_prefix)
    ours = [d for d in dists if from_source_tree(d, prefix, base) or _under(_metadata_dir(d), prefix)]
    from_system = [d for d in dists if d not in ours]
    relative_site = site.relative_to(Path(sys.prefix))
    members: list[tuple[Path, str]] = []
    for dist in ours:
        members += [(path, str(relative_site / name)) for path, name in distribution_files(dist, site)]
    manifest = {
        "kind": "venv",
        "python": sys.version.split()[0],
        "base_interpreter": _base_interpreter(),
        "system_site_packages": True,
        "extras": list(extras),
        "with": list(also),
        "packed": {d.metadata["Name"]: d.version for d in ours},
        "from_the_system": {d.metadata["Name"]: d.version for d in from_system},
        "system_modules": list(SYSTEM_MODULES),
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
    return members, manifest


def _base_interpreter() -> str:
    """The interpreter the venv's python links to (what the worker must have at the same path)."""
    base = getattr(sys, "_base_executable", "") or sys.executable
    return str(Path(base).absolute())


def run_in_env(kind: str, manifest: dict) -> str:
    """The bin/run_in_env script of an environment of KIND."""
    if kind == "conda":
        setup, activate = CONDA_SETUP, CONDA_ACTIVATE
    else:
        major, minor = manifest["python"].split(".")[:2]
        setup = (
            VENV_SETUP.replace("@MAJOR@", major)
            .replace("@MINOR@", minor)
            .replace("@BASE@", manifest["base_interpreter"])
            .replace("@SYSTEM_MODULES@", " ".join(manifest["system_modules"]))
        )
        activate = VENV_ACTIVATE
    return RUN_IN_ENV_SCRIPT.replace("@KIND@", kind).replace("@SETUP@", setup).replace("@ACTIVATE@", activate)


def _text_member(name: str, text: str, mode: int = 0o644) -> tuple[tarfile.TarInfo, io.BytesIO]:
    data = text.encode()
    info = tarfile.TarInfo(name)
    info.size, info.mode, info.mtime = len(data), mode, int(time.time())
    return info, io.BytesIO(data)


def _add(tar: tarfile.TarFile, path: Path, name: str) -> None:
    info = tar.gettarinfo(str(path), arcname=name)
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    if info.isreg():
        with open(path, "rb") as f:
            tar.addfile(info, f)
    else:
        tar.addfile(info)


def write_venv(output: Path, extras: tuple[str, ...], also: tuple[str, ...] = ()) -> dict:
    """Pack this venv's needed distributions into OUTPUT; returns the manifest."""
    members, manifest = venv_members(extras, also)
    version = ".".join(manifest["python"].split(".")[:2])
    cfg = (
        f"home = {Path(manifest['base_interpreter']).parent}\ninclude-system-site-packages = true\n"
        f"version = {manifest['python']}\nexecutable = {manifest['base_interpreter']}\n"
    )
    with tarfile.open(output, "w:gz", compresslevel=COMPRESS_LEVEL) as tar:
        tar.addfile(*_text_member(RUN_IN_ENV, run_in_env("venv", manifest), 0o755))  # first: found at once
        tar.addfile(*_text_member(MANIFEST, json.dumps(manifest, indent=1) + "\n"))
        tar.addfile(*_text_member("pyvenv.cfg", cfg))
        for name in ("python", "python3", f"python{version}"):
            link = tarfile.TarInfo(f"bin/{name}")
            link.type, link.linkname, link.mode = tarfile.SYMTYPE, manifest["base_interpreter"], 0o777
            tar.addfile(link)
        for path, name in members:
            _add(tar, path, name)
    return manifest


def write_conda(output: Path) -> dict:
    """Pack this whole conda environment with conda-pack, plus the projects installed editable in it (hepvine from
    its checkout: conda-pack leaves those out), run_in_env and the manifest, into OUTPUT."""
    import conda_pack

    prefix = Path(sys.prefix)
    site = _site_packages(prefix)
    dists = {d.metadata["Name"]: d for d in importlib.metadata.distributions() if d.metadata["Name"]}
    editable = [d for d in dists.values() if from_source_tree(d, prefix, Path(sys.base_prefix))]
    manifest = {
        "kind": "conda",
        "python": sys.version.split()[0],
        "prefix": sys.prefix,
        "packed": {name: d.version for name, d in sorted(dists.items())},
        "from_source_tree": sorted(d.metadata["Name"] for d in editable),
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
    with tempfile.TemporaryDirectory(dir=output.parent) as tmp:
        plain = Path(tmp) / "env.tar"
        try:
            conda_pack.pack(prefix=sys.prefix, output=str(plain), format="tar", ignore_editable_packages=True)
        except conda_pack.CondaPackException as e:
            raise PackError(f"conda-pack cannot pack {sys.prefix}: {e}") from e
        with tarfile.open(plain, "a") as tar:
            tar.addfile(*_text_member(RUN_IN_ENV, run_in_env("conda", manifest), 0o755))
            tar.addfile(*_text_member(MANIFEST, json.dumps(manifest, indent=1) + "\n"))
            for dist in editable:
                for path, name in distribution_files(dist, site):
                    _add(tar, path, str(site.relative_to(prefix) / name))
        with open(plain, "rb") as src, gzip.open(output, "wb", compresslevel=COMPRESS_LEVEL) as dst:
            shutil.copyfileobj(src, dst, 1 << 20)
    return manifest


def pack(output: Path, extras: tuple[str, ...] = (), also: tuple[str, ...] = ()) -> dict:
    """Pack the running environment into OUTPUT (written under a temporary name, then renamed); its manifest."""
    kind = environment_kind()
    if kind == "conda" and (extras or also):
        raise PackError("--extra and --with apply to a venv only: a conda environment is packed whole")
    with atomic.replacing(output.absolute()) as tmp:
        return write_conda(tmp) if kind == "conda" else write_venv(tmp, extras, also)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="hepvine pack-env", description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "file",
        type=Path,
        help="the environment file to write (e.g. hepvine-env.tar.gz); give it "
        "to the executor as --taskvine-environment FILE",
    )
    parser.add_argument(
        "--extra",
        action="append",
        default=[],
        metavar="NAME",
        help="(venv) also pack what hepvine's optional dependencies NAME need, e.g. recompress (ROOT); repeatable",
    )
    parser.add_argument(
        "--with",
        dest="also",
        action="append",
        default=[],
        metavar="DISTRIBUTION",
        help="(venv) also pack the installed distribution DISTRIBUTION and what it requires: an analysis's own "
        "package (pip install -e it in the venv; then analysis=<module>:<Name>), its dependencies; repeatable",
    )
    args = parser.parse_args(argv)
    if not str(args.file).endswith((".tar.gz", ".tgz")):
        parser.error(f"{args.file}: name it *.tar.gz (it is a gzipped tarball)")
    began = time.monotonic()
    try:
        manifest = pack(args.file, tuple(args.extra), tuple(args.also))
    except PackError as e:
        print(f"hepvine pack-env: {e}", file=sys.stderr)
        return 1
    size = args.file.stat().st_size
    print(
        f"hepvine pack-env: {args.file}: {manifest['kind']} environment, Python {manifest['python']}, "
        f"{len(manifest['packed'])} distributions packed, {size / 1e6:.1f} MB, in {time.monotonic() - began:.0f} s"
        + (
            f"; from the workers' system: {', '.join(sorted(manifest['from_the_system'])) or 'nothing'} and "
            f"{', '.join(manifest['system_modules'])}"
            if manifest["kind"] == "venv"
            else ""
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
