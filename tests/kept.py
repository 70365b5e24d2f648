"""Expensive, deterministic test inputs made once and kept: files that hepvine.devtools.generate writes, and the
environment that `hepvine pack-env` packs. Each is kept under a key made of its arguments and of everything its content
depends on, so that a change to any of those makes it anew; a test gets a copy (generated files) or the kept file itself
(environments, which tests only read).

Where: $HEPVINE_TEST_CACHE, by default /var/tmp/hepvine-test-cache (in the sandbox, the userland's /var/tmp: it lasts
across `make test` runs and both of its passes, and goes with the sandbox). Invalidation: by key only. An entry's
time is set each time it is used; when an entry is made, the entries of the same kind made from other sources and
unused for a day are removed (checkouts that differ, such as a CI clone and a developer's, keep theirs meanwhile).
Delete the directory to start afresh.

Generated files are written with ZLIB-1 unless a test asks for another codec: generate's default, LZMA-9 (CMS
NanoAOD's), takes ~1.6 ms an event to compress here, ZLIB-1 ~0.1 ms, for files ~7% larger (measured on compact
files of 20,000 events: 33 s and 2.1 s). A test whose claim is about the codec asks for it (test_generate: LZMA-9).

- generated files: the key is write_file's arguments, the sources of hepvine.devtools.generate and of the modules it
  imports from hepvine (nanoschema, atomic), and the versions of uproot, awkward and numpy.
- packed environments: the key is pack-env's arguments and the content of every file it packs (the venv's
  distributions, hepvine's and the plugin's sources, packenv itself among them), listed by pack-env's own
  venv_members().
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import importlib.metadata
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from unittest import mock

import uproot

from hepvine.devtools import generate

CACHE = Path(os.environ.get("HEPVINE_TEST_CACHE") or "/var/tmp/hepvine-test-cache")
GENERATOR_SOURCES = ("devtools/generate.py", "devtools/nanoschema.py", "devtools/nanoschema.json", "model/atomic.py")
GENERATOR_LIBRARIES = ("uproot", "awkward", "numpy")
WRITE_FILE = generate.write_file  # the real writer: generated_dataset() routes generate.generate's calls here
QUICK = uproot.ZLIB(1)  # the codec of generated files whose codec does not matter to the test
STALE_S = 24 * 3600  # an entry of other sources unused this long goes when a new one of its kind is made


def _directory() -> Path:
    """The cache directory, made writable for every user of the sandbox (the analysis user's pass and root's pass
    share it), like /tmp."""
    if not CACHE.is_dir():
        CACHE.mkdir(parents=True, exist_ok=True)
        try:
            CACHE.chmod(0o1777)
        except PermissionError:
            pass  # made in the same instant by another user, who set the mode
    return CACHE


def _digest(*parts: bytes) -> str:
    h = hashlib.sha256()
    for part in parts:
        h.update(hashlib.sha256(part).digest())
    return h.hexdigest()


def _keep(kind: str, sources: str, key: str, suffix: str, make) -> Path:
    """The entry KIND-SOURCES-KEY: made by MAKE(temporary path) the first time, under a temporary name then renamed
    (a run that is killed leaves no half entry); entries of KIND from other SOURCES unused for STALE_S are removed
    then."""
    directory = _directory()
    entry = directory / f"{kind}-{sources[:16]}-{key[:24]}{suffix}"
    if entry.exists():
        with contextlib.suppress(PermissionError):  # another user's entry keeps its time
            os.utime(entry)
        return entry
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=f".{kind}-", suffix=suffix)
    os.close(fd)
    try:
        make(Path(tmp))
        os.chmod(tmp, 0o644)
        os.replace(tmp, entry)
    finally:
        Path(tmp).unlink(missing_ok=True)
    now = time.time()
    for other in directory.glob(f"{kind}-*{suffix}"):
        with contextlib.suppress(FileNotFoundError):
            if not other.name.startswith(f"{kind}-{sources[:16]}-") and now - other.stat().st_mtime > STALE_S:
                other.unlink()
    return entry


_generator_sources: str | None = None


def generator_sources() -> str:
    """The digest of what a generated file's content depends on besides write_file's arguments."""
    global _generator_sources
    if _generator_sources is None:
        package = Path(generate.__file__).parents[1]
        _generator_sources = _digest(
            *(package.joinpath(m).read_bytes() for m in GENERATOR_SOURCES),
            *(f"{n} {importlib.metadata.version(n)}".encode() for n in GENERATOR_LIBRARIES),
        )
    return _generator_sources


def generated_file(
    path: Path,
    process: str,
    n_events: int,
    index: int = 0,
    seed: int = 1,
    compression=QUICK,
    schema: str = "compact",
    physics: str | None = None,
) -> dict:
    """generate.write_file(PATH, ...), its result and its file, from the cache: a copy of the file the same
    arguments and sources made before (the copy is the test's to change). COMPRESSION: an uproot compression
    (default ZLIB-1; None: write_file's own default, LZMA-9)."""
    arguments = json.dumps([process, n_events, index, seed, repr(compression), schema, physics or schema]).encode()
    kept = _keep(
        "generated",
        generator_sources(),
        _digest(arguments),
        ".root",
        lambda tmp: WRITE_FILE(
            tmp, process, n_events, index=index, seed=seed, compression=compression, schema=schema, physics=physics
        ),
    )
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(kept, path)
    return {"path": str(path), "nevts": n_events}


def generated_dataset(
    outdir: Path,
    files_per_process: dict[str, int],
    events_per_file: int,
    seed: int = 1,
    schema: str = "compact",
    compression=QUICK,
) -> dict:
    """generate.generate(OUTDIR, ...): its spec, its files from the cache (generated_file), written with
    COMPRESSION (as generated_file's)."""
    with mock.patch.object(generate, "write_file", functools.partial(generated_file, compression=compression)):
        return generate.generate(outdir, files_per_process, events_per_file, seed=seed, schema=schema)


def packed_environment(*extras: str) -> Path:
    """The file that `hepvine pack-env FILE --extra EXTRA...` writes for this venv, from the cache (tests only read
    it). A miss runs the command itself, as a user does."""
    from hepvine.commands import packenv

    members, _ = packenv.venv_members(tuple(extras))
    h = hashlib.sha256(json.dumps(extras).encode())
    for path, name in sorted(members, key=lambda m: m[1]):
        h.update(name.encode() + b"\0")
        with open(path, "rb") as f:
            h.update(hashlib.file_digest(f, "sha256").digest())
    sources = h.hexdigest()

    def pack(tmp: Path) -> None:
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "hepvine.commands.packenv",
                str(tmp),
                *(a for extra in extras for a in ("--extra", extra)),
            ],
            capture_output=True,
            text=True,
            timeout=900,
        )
        if done.returncode != 0:
            raise RuntimeError(f"hepvine pack-env {tmp} {' '.join(extras)} failed:\n{done.stderr[-3000:]}")

    return _keep("environment", sources, sources, ".tar.gz", pack)
