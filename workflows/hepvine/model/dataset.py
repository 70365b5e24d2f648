"""Dataset specs: the Analysis Grand Challenge shape ``{process: {variation: {"nevts_total": N, "files": [{"path": P,
"nevts": n}]}}}`` plus a per-process ``"xsec"`` (pb; absent for data), an optional per-process ``"era"`` (one of
``hepvine.model.eras.ERAS``; absent: each file's era is decided from the file) and an optional per-file ``"bytes"`` (its
size, for its time limit and disk; absent: estimated from ``nevts``, see ``hepvine.model.limits``), in JSON or YAML.

``load`` reads a spec and validates it against ``workflows/hepvine/model/schemas/dataset.schema.yaml`` (its
``errorMessage``s are the words of the errors); every problem found is reported together, each naming the file, the
entry (``ttbar/nominal/files[3]``) and what is wrong, before any task starts. What the schema cannot say is checked
here: a path listed twice anywhere in the spec is refused, naming both places (it would be counted twice), a variation's
``nevts_total`` may not be less than the events its files list, and a process's ``era`` must be one of
``hepvine.model.eras.ERAS``. At 219,000 files, the structure above the file lists goes through the
schema and each file entry through a fast check that asks the schema only about an entry it does not pass.

``tasks`` flattens a spec into one ``FileTask`` per input file, identified by ``<process>/<variation>/<index>`` —
unique (names cannot contain ``/``), stable while the spec's order is, and readable. Each AGC sample is the coffea
dataset ``<process>__<variation>`` (the AGC's own fileset names) whose metadata are its ``process``, ``variation``,
``xsec``, ``nevts_total`` and ``era``: what an analysis finds in ``events.metadata``.

A coffea fileset (``hepvine.model.fileset``) is accepted wherever a spec is: ``load`` tells the two shapes apart and
``tasks`` and ``updated`` take either.
"""

from __future__ import annotations

import copy
import functools
import importlib.resources
import json
from dataclasses import dataclass
from pathlib import Path

import yaml

from hepvine.model import fileset as hv_fileset
from hepvine.model.eras import ERAS

PROCESS_KEYS = ("xsec", "era")  # a process's keys that are not variations
# Package data (importlib.resources: read where the package is installed, a wheel too).
SCHEMA = importlib.resources.files("hepvine.model") / "schemas" / "dataset.schema.yaml"
SCHEMA_NAME = "hepvine/model/schemas/dataset.schema.yaml"


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
    nevts: int | None  # None: a plain fileset does not say (then nothing checks the events read)
    nevts_total: int | None
    xsec: float | None
    era: str | None = None  # the spec's era for the file's process (hepvine.model.eras); None: decided from the file
    bytes: int | None = None  # the file's size, if the spec gives it (hepvine.model.limits estimates it otherwise)
    dataset: str = ""  # the coffea dataset (fileset key, as written): events.metadata["dataset"]
    treename: str = hv_fileset.DEFAULT_TREE
    metadata: dict | None = None  # the dataset's metadata (in events.metadata beside coffea's own keys)
    uuid: str | None = None  # the file's uuid when a preprocessed fileset gives it (events.metadata["fileuuid"])
    steps: list | None = None  # its chunks ([start, stop] entry ranges) when a preprocessed fileset gives them
    replicas: tuple[str, ...] = ()  # a Rucio file's URLs, PATH first: its fail-overs (hepvine.routing.replicas)

    def events_expected(self) -> int | None:
        """The events a run of the file processes, if the dataset says: NEVTS, or with STEPS the entries they hold of
        its NEVTS (steps may cover part of a file: coffea's ``dataset_tools.max_chunks``, ``slice_chunks``)."""
        if self.nevts is None or self.steps is None:
            return self.nevts
        return sum(max(0, min(stop, self.nevts) - start) for start, stop in self.steps)


def read(path: Path):
    """The document at PATH (JSON, or YAML by its suffix), not yet validated."""
    try:
        text = path.read_text()
    except OSError as e:
        raise DatasetError(f"dataset spec {path}: cannot be read ({e.strerror}); check the path") from e
    try:
        return yaml.safe_load(text) if path.suffix in (".yaml", ".yml") else json.loads(text)
    except (yaml.YAMLError, json.JSONDecodeError) as e:
        raise DatasetError(f"dataset spec {path}: not valid {'YAML' if path.suffix != '.json' else 'JSON'}: {e}") from e


@functools.cache
def _validators() -> tuple:
    """The schema's validators: of the spec above its file lists, and of one file entry (made once, when first
    needed; jsonschema is imported only then: every job on a worker imports this module while parsing the workflow,
    and never loads a spec). The schema's integers are Python ints, never booleans or floats such as 5.0 (JSON
    Schema would take 5.0)."""
    import jsonschema

    strict = jsonschema.validators.extend(
        jsonschema.Draft202012Validator,
        type_checker=(
            jsonschema.Draft202012Validator.TYPE_CHECKER.redefine(
                "integer", lambda checker, value: isinstance(value, int) and not isinstance(value, bool)
            )
        ),
    )
    schema = yaml.safe_load(SCHEMA.read_text())
    above_files = copy.deepcopy(schema)
    del above_files["$defs"]["sample"]["properties"]["files"]["items"]
    return strict(above_files), strict(schema["$defs"]["file"])


def _plain_file(entry) -> bool:
    """Whether ENTRY surely passes the schema's file rule: the common case, checked here without jsonschema (at
    219,000 files ``load`` takes 0.6 s so, 14 s with every entry through jsonschema; Python 3.13, 2026-11-24). False
    means "ask the schema", which explains what is wrong (tests/workflow/test_dataset.py checks that no entry passes
    here that the schema refuses, and that the schema's file rule is still the one written here)."""
    return (
        type(entry) is dict
        and type(entry.get("path")) is str
        and entry["path"] != ""
        and type(entry.get("nevts")) is int
        and entry["nevts"] > 0
        and ("bytes" not in entry or (type(entry["bytes"]) is int and entry["bytes"] > 0))
    )


def _where(path) -> str:
    """An entry's name from its path in the spec: ``ttbar/nominal/files[3]/nevts``."""
    out = ""
    for key in path:
        out += f"[{key}]" if isinstance(key, int) else (f"/{key}" if out else str(key))
    return out


def _explain(error, prefix: tuple = ()) -> str:
    """ERROR (a jsonschema.ValidationError) as 'entry: what is wrong', in the words of the schema's ``errorMessage``."""
    path = [*prefix, *error.absolute_path]
    schema, got = error.schema, repr(error.instance)
    if error.validator == "required":  # named by the missing key, in that key's words
        name = next(k for k in error.validator_value if k not in error.instance)
        path, schema, got = [*path, name], error.schema["properties"][name], "nothing"
    elif list(error.absolute_schema_path)[-2:-1] == ["propertyNames"]:  # a bad name: named by the name itself
        path = [*path, error.instance]
    elif error.validator == "additionalProperties":
        unknown = sorted(set(error.instance) - set(error.schema.get("properties", {})))
        return (
            f"{_where(path)}: unknown key(s) {', '.join(map(str, unknown))} (expected "
            f"{' and '.join(repr(k) for k in error.schema['properties'])})"
        )
    message = schema.get("errorMessage", error.message)
    if isinstance(message, dict):
        message = message.get(error.validator, error.message)
    return f"{_where(path) or '(top level)'}: {message.replace('{got}', got)}"


def problems(spec) -> list[str]:
    """Every problem of SPEC, as 'entry: what is wrong': what the schema refuses (its structure above the file lists
    first, then each file entry), an unknown era, a path listed twice, and a variation whose files list more events
    than its nevts_total."""
    above_files, file_rule = _validators()
    found = list(dict.fromkeys(_explain(e) for e in above_files.iter_errors(spec)))
    if not isinstance(spec, dict):
        return found
    seen: dict[str, str] = {}  # path → where it was first listed
    datasets: dict[str, str] = {}  # coffea dataset name → the sample that has it
    for process, variations in spec.items():
        if not isinstance(variations, dict):
            continue
        era = variations.get("era")
        if isinstance(era, str) and era not in ERAS:
            found.append(
                f"{process}/era: {era!r} is not an era of hepvine; use one of {', '.join(ERAS)} "
                "(docs/eras.md), or leave it out to decide each file's era from the file"
            )
        for variation, sample in variations.items():
            if variation not in PROCESS_KEYS:
                name = f"{process}__{variation}"
                if (other := datasets.setdefault(name, f"{process}/{variation}")) != f"{process}/{variation}":
                    found.append(
                        f"{process}/{variation}: its coffea dataset name {name} (<process>__<variation>) is "
                        f"also {other}'s; rename one of them (e.g. without '__')"
                    )
            files = sample.get("files") if variation not in PROCESS_KEYS and isinstance(sample, dict) else None
            if not isinstance(files, list):
                continue
            listed = 0  # the events its files list
            for i, entry in enumerate(files):
                if _plain_file(entry):
                    listed += entry["nevts"]
                else:
                    found += [_explain(e, (process, variation, "files", i)) for e in file_rule.iter_errors(entry)]
                path = entry.get("path") if isinstance(entry, dict) else None
                if not isinstance(path, str) or not path:
                    continue
                if path in seen:
                    found.append(
                        f"{process}/{variation}/files[{i}]/path: {path} is listed twice, here and at "
                        f"{seen[path]}; it would be counted twice: keep one of them"
                    )
                else:
                    seen[path] = f"{process}/{variation}/files[{i}]"
            total = sample.get("nevts_total")
            if type(total) is int and 0 < total < listed:
                found.append(
                    f"{process}/{variation}/nevts_total: {total} is less than the {listed} events its files "
                    "list (their nevts): it counts every event of the variation, listed or not (the "
                    "weight divides the cross section by it); correct it or the files' nevts"
                )
    return found


def load(path: str | Path) -> dict:
    """The validated spec at PATH (JSON, or YAML by its suffix)."""
    return validated(read(Path(path)), path)


def validated(spec, path: str | Path) -> dict:
    """SPEC (read from PATH) if it is a valid fileset or AGC spec; else a DatasetError naming PATH and every
    problem."""
    if hv_fileset.is_fileset(spec):
        found = hv_fileset.problems(spec)
        if found:
            raise DatasetError(
                f"fileset {path} has {len(found)} problem(s):\n  - "
                + "\n  - ".join(found)
                + '\n(a coffea fileset: {dataset: {"files": {path: treename}, "metadata": {...}}}'
                ", or the preprocessed form of coffea.dataset_tools)"
            )
        return spec
    found = problems(spec)
    if found:
        raise DatasetError(
            f"dataset spec {path} has {len(found)} problem(s):\n  - "
            + "\n  - ".join(found)
            + f"\n(the spec's keys are described in {SCHEMA_NAME})"
        )
    return spec


def tasks(spec: dict) -> list[FileTask]:
    """One task per input file, in a stable order (an AGC spec's or a fileset's)."""
    if hv_fileset.is_fileset(spec):
        return _fileset_tasks(spec)
    out = []
    for process in sorted(spec):
        xsec, era = spec[process].get("xsec"), spec[process].get("era")
        for variation in sorted(k for k in spec[process] if k not in PROCESS_KEYS):
            sample = spec[process][variation]
            for i, entry in enumerate(sample["files"]):
                out.append(
                    FileTask(
                        fid=f"{process}/{variation}/{i}",
                        process=process,
                        variation=variation,
                        index=i,
                        path=entry["path"],
                        nevts=entry["nevts"],
                        nevts_total=sample["nevts_total"],
                        xsec=xsec,
                        era=era,
                        bytes=entry.get("bytes"),
                        replicas=tuple(entry.get("replicas", ())),
                        dataset=f"{process}__{variation}",
                        metadata={
                            "process": process,
                            "variation": variation,
                            "xsec": xsec,
                            "nevts_total": sample["nevts_total"],
                            "era": era,
                        },
                    )
                )
    return out


def _fileset_tasks(doc: dict) -> list[FileTask]:
    out = []
    for key, index, path, about, metadata, tree in hv_fileset.entries(doc):
        name = hv_fileset.safe_name(key)
        about = {"object_path": about} if isinstance(about, str) else (about or {})
        out.append(
            FileTask(
                fid=f"{name}/{hv_fileset.VARIATION}/{index}",
                process=name,
                variation=hv_fileset.VARIATION,
                index=index,
                path=path,
                nevts=about.get("num_entries"),
                nevts_total=None,
                xsec=None,
                bytes=about.get("bytes") or hv_fileset.local_bytes(path),
                replicas=tuple(about.get("replicas", ())),
                dataset=key,
                treename=about.get("object_path") or tree,
                metadata=metadata,
                uuid=about.get("uuid"),
                steps=about.get("steps"),
            )
        )
    return out


def updated(spec: dict, fields) -> dict:
    """A copy of SPEC (an AGC spec or a fileset) in which each file's entry is updated with FIELDS(task, entry) (a
    dict; empty: unchanged); ``path`` in it moves the file. A fileset's files come out as mappings of path to the
    preprocessed form (object_path, num_entries, uuid, steps where known), with the fields beside them."""
    changed = json.loads(json.dumps(spec))
    if not hv_fileset.is_fileset(spec):
        for task in tasks(spec):
            entry = changed[task.process][task.variation]["files"][task.index]
            entry.update(fields(task, entry) or {})
        return changed
    by_dataset: dict[str, dict] = {}
    for task in tasks(spec):
        entry = {
            "object_path": task.treename,
            **({"num_entries": task.nevts} if task.nevts is not None else {}),
            **({"uuid": task.uuid} if task.uuid else {}),
            **({"steps": task.steps} if task.steps else {}),
        }
        entry.update(fields(task, {"path": task.path, **entry}) or {})
        by_dataset.setdefault(task.dataset, {})[entry.pop("path", task.path)] = entry
    for key, files in by_dataset.items():
        value = changed[key] if isinstance(changed[key], dict) else {}
        changed[key] = {**value, "files": files}
    return changed
