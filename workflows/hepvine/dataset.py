"""Dataset specs: the Analysis Grand Challenge shape ``{process: {variation: {"nevts_total": N, "files": [{"path": P,
"nevts": n}]}}}`` plus a per-process ``"xsec"`` (pb; absent for data), an optional per-process ``"era"`` (one of
``hepvine.eras.ERAS``; absent: each file's era is decided from the file) and an optional per-file ``"bytes"`` (its
size, for its time limit and disk; absent: estimated from ``nevts``, see ``hepvine.limits``), in JSON or YAML.

``load`` reads and validates a spec; every problem found is reported together, each naming the file, the entry
(``ttbar/nominal/files[3]``) and what is wrong, before any task starts. A path listed twice anywhere in the spec is
refused, naming both places: it would be counted twice. ``tasks`` flattens a spec into one ``FileTask`` per input
file, identified by ``<process>/<variation>/<index>`` — unique (names cannot contain ``/``), stable while the spec's
order is, and readable.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

import yaml

from hepvine.eras import ERAS

PROCESS_KEYS = ("xsec", "era")  # a process's keys that are not variations
NAME = re.compile(r"^[A-Za-z0-9_.-]+\Z")


class DatasetError(ValueError):
    """A dataset spec that cannot be used; the message lists every problem."""


@dataclass(frozen=True)
class FileTask:
    """One input file of the campaign and what its analysis needs to know."""

    fid: str  # <process>/<variation>/<index>: the file's identity in the campaign
    process: str
    variation: str
    index: int
    path: str
    nevts: int
    nevts_total: int
    xsec: float | None
    era: str | None = None  # the spec's era for the file's process (hepvine.eras); None: decided from the file
    bytes: int | None = None  # the file's size, if the spec gives it (hepvine.limits estimates it otherwise)


def _read(path: Path):
    try:
        text = path.read_text()
    except OSError as e:
        raise DatasetError(f"dataset spec {path}: cannot be read ({e.strerror}); check the path") from e
    try:
        return yaml.safe_load(text) if path.suffix in (".yaml", ".yml") else json.loads(text)
    except (yaml.YAMLError, json.JSONDecodeError) as e:
        raise DatasetError(f"dataset spec {path}: not valid {'YAML' if path.suffix != '.json' else 'JSON'}: {e}")


def _positive_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def problems(spec) -> list[str]:
    """Every problem of SPEC, as 'entry: what is wrong'."""
    if not isinstance(spec, dict) or not spec:
        return ["the spec must be a non-empty mapping of process name to variations"]
    found = []
    seen: dict[str, str] = {}  # path → where it was first listed
    for process, variations in spec.items():
        if not NAME.match(str(process)):
            found.append(f"{process}: a process name may use letters, digits, '_', '.' and '-' only")
        if not isinstance(variations, dict):
            found.append(f"{process}: must map variation names (and 'xsec') to file lists")
            continue
        xsec = variations.get("xsec")
        if xsec is not None and (isinstance(xsec, bool) or not isinstance(xsec, (int, float)) or xsec <= 0):
            found.append(f"{process}/xsec: must be a positive number (pb), or absent for data")
        era = variations.get("era")
        if era is not None and era not in ERAS:
            found.append(f"{process}/era: {era!r} is not an era of hepvine; use one of {', '.join(ERAS)} "
                         "(docs/eras.md), or leave it out to decide each file's era from the file")
        samples = {k: v for k, v in variations.items() if k not in PROCESS_KEYS}
        if not samples:
            found.append(f"{process}: has no variation (e.g. 'nominal')")
        for variation, sample in samples.items():
            where = f"{process}/{variation}"
            if not NAME.match(str(variation)):
                found.append(f"{where}: a variation name may use letters, digits, '_', '.' and '-' only")
            if not isinstance(sample, dict):
                found.append(f"{where}: must be a mapping with 'nevts_total' and 'files'")
                continue
            unknown = sorted(set(sample) - {"nevts_total", "files"})
            if unknown:
                found.append(f"{where}: unknown key(s) {', '.join(unknown)} (expected 'nevts_total' and 'files')")
            if not _positive_int(sample.get("nevts_total")):
                found.append(f"{where}/nevts_total: must be a positive integer, got {sample.get('nevts_total')!r}")
            files = sample.get("files")
            if not isinstance(files, list) or not files:
                found.append(f"{where}/files: must be a non-empty list of {{path, nevts}}")
                continue
            for i, entry in enumerate(files):
                at = f"{where}/files[{i}]"
                if not isinstance(entry, dict):
                    found.append(f"{at}: must be a mapping with 'path' and 'nevts'")
                    continue
                path = entry.get("path")
                if not isinstance(path, str) or not path:
                    found.append(f"{at}/path: must be a local path or a root:// URL")
                elif path in seen:
                    found.append(f"{at}/path: {path} is listed twice, here and at {seen[path]}; it would be counted "
                                 "twice: keep one of them")
                else:
                    seen[path] = at
                if not _positive_int(entry.get("nevts")):
                    found.append(f"{at}/nevts: must be a positive integer, got {entry.get('nevts')!r}")
                if "bytes" in entry and not _positive_int(entry["bytes"]):
                    found.append(f"{at}/bytes: the file's size must be a positive integer, got {entry['bytes']!r} "
                                 "(or leave it out: it is then estimated from nevts)")
    return found


def load(path: str | Path) -> dict:
    """The validated spec at PATH (JSON, or YAML by its suffix)."""
    path = Path(path)
    spec = _read(path)
    found = problems(spec)
    if found:
        raise DatasetError(f"dataset spec {path} has {len(found)} problem(s):\n  - " + "\n  - ".join(found))
    return spec


def tasks(spec: dict) -> list[FileTask]:
    """One task per input file, in a stable order."""
    out = []
    for process in sorted(spec):
        xsec, era = spec[process].get("xsec"), spec[process].get("era")
        for variation in sorted(k for k in spec[process] if k not in PROCESS_KEYS):
            sample = spec[process][variation]
            for i, entry in enumerate(sample["files"]):
                out.append(FileTask(fid=f"{process}/{variation}/{i}", process=process, variation=variation,
                                    index=i, path=entry["path"], nevts=entry["nevts"],
                                    nevts_total=sample["nevts_total"], xsec=xsec, era=era,
                                    bytes=entry.get("bytes")))
    return out
