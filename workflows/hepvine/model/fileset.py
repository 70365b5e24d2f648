"""coffea filesets as datasets: ``{dataset: {"files": {path: treename}, "metadata": {...}}}``, the shape coffea's
``processor.Runner`` and ``dataset_tools`` take, in its forms:

- plain: ``"files"`` a mapping of path (or ``root://`` URL) to tree name, or a list of paths (tree ``Events``, or the
  dataset's ``"treename"``); a dataset may also be just such a list;
- preprocessed (``coffea.dataset_tools.preprocess``): each path maps to ``{"object_path", "num_entries", "uuid",
  "steps"}``; ``num_entries`` is then the file's event count (checked when the file is read), ``uuid`` its
  ``fileuuid`` and ``steps`` its chunks. Other keys of a dataset (``form``, ``compressed_form``) are ignored.

Dataset keys are whatever users write, often the DAS name with its slashes (``/TTto.../Run3Summer22.../NANOAODSIM``):
``events.metadata["dataset"]`` and the output keep the key as written, while paths and job names use ``safe_name``
of it (the key itself when it is already a safe name, else its safe characters and a hash of the whole key). A file's
identity is ``<safe name>/files/<index>`` (its place in the dataset's files). Every problem of a fileset is reported
together, each naming its entry, before any job starts; a path listed twice anywhere is refused (it would be counted
twice). Data model only: no ROOT I/O is imported (the workflow's parse imports this module).
"""

from __future__ import annotations

import hashlib
import os
import re

SAFE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*")
UNSAFE_RUN = re.compile(r"[^A-Za-z0-9_.-]+")
VARIATION = "files"  # the second level of a fileset file's identity: <safe name>/files/<index>
DEFAULT_TREE = "Events"
PREPROCESSED_KEYS = ("object_path", "num_entries", "uuid", "steps")
# The metadata names coffea sets itself (``coffea.processor.executor._PROTECTED_NAMES``): its Runner refuses a fileset
# whose metadata holds one, which would otherwise replace ``events.metadata["dataset"]``, a chunk's ``entrystart``...
# (``test_fileset`` checks the list against coffea's.)
RESERVED_METADATA = frozenset(
    {
        "dataset",
        "filename",
        "treename",
        "metadata",
        "entrystart",
        "entrystop",
        "fileuuid",
        "numentries",
        "uuid",
        "clusters",
        "preload",
    }
)


def safe_name(key: str) -> str:
    """KEY as a path component and job name: itself when it is made of letters, digits and ``_ . -`` (not starting
    with ``.`` or ``-``), else its safe runs joined by ``_`` and 8 hex digits of its SHA-256, so two keys never meet."""
    if SAFE.fullmatch(key):
        return key
    readable = UNSAFE_RUN.sub("_", key).strip("_.-")[:80] or "dataset"
    return f"{readable}-{hashlib.sha256(key.encode()).hexdigest()[:8]}"


def is_fileset(doc) -> bool:
    """Whether DOC has the fileset's shape (a dataset's value a list of paths or a mapping with ``files``) rather than
    the AGC spec's (process → variation → {nevts_total, files})."""
    return (
        isinstance(doc, dict)
        and bool(doc)
        and any(isinstance(v, list) or (isinstance(v, dict) and "files" in v) for v in doc.values())
    )


def _files(value) -> tuple[object, dict, str]:
    """(its files, its metadata, its default tree) of one dataset's value."""
    if isinstance(value, list):
        return value, {}, DEFAULT_TREE
    return value.get("files"), value.get("metadata") or {}, value.get("treename") or DEFAULT_TREE


def entries(doc: dict):
    """Per dataset key and file, in order: (key, index, path, what the fileset says of the file (a tree name or the
    preprocessed mapping), the dataset's metadata, the dataset's default tree)."""
    for key, value in doc.items():
        files, metadata, tree = _files(value)
        items = files.items() if isinstance(files, dict) else ((p, None) for p in files)
        for index, (path, about) in enumerate(items):
            yield key, index, path, about, metadata, tree


def _entry_problem(where: str, path, about) -> str | None:
    if not isinstance(path, str) or not path:
        return f"{where}: a file must be a non-empty path or root:// URL, got {path!r}"
    if about is None or isinstance(about, str) and about:
        return None
    if not isinstance(about, dict):
        return (
            f"{where} ({path}): must map to a tree name or to the preprocessed form {{object_path, num_entries, "
            f"uuid, steps}}, got {about!r}"
        )
    if not isinstance(about.get("object_path", DEFAULT_TREE), str):
        return f"{where} ({path}): object_path must be the tree's name"
    n = about.get("num_entries")
    if n is not None and (type(n) is not int or n < 0):
        return f"{where} ({path}): num_entries must be a non-negative integer, got {n!r}"
    steps = about.get("steps")
    if steps is not None and not (
        isinstance(steps, list)
        and all(
            isinstance(s, list) and len(s) == 2 and all(type(x) is int for x in s) and 0 <= s[0] <= s[1] for s in steps
        )
    ):
        return f"{where} ({path}): steps must be a list of [start, stop] entry ranges"
    if steps == []:
        return f"{where} ({path}): steps is empty, so no entry of it would be read: drop the file or give its steps"
    if steps:
        for before, step in zip(steps, steps[1:]):
            if step[0] < before[1]:
                return (
                    f"{where} ({path}): steps {before} and {step} overlap or are out of order: give each entry in one "
                    "step, in order (an entry in two steps would be counted twice)"
                )
        if n is not None and steps[-1][1] > n:
            return f"{where} ({path}): step {steps[-1]} ends past its num_entries, {n}"
    return None


def problems(doc) -> list[str]:
    """Every problem of the fileset DOC, each as 'entry: what is wrong'."""
    if not isinstance(doc, dict) or not doc:
        return ["(top level): a fileset must be a non-empty mapping of dataset name to its files"]
    found, renamed = [], []  # (the second: problems of the metadata, said with those of the files)
    names: dict[str, str] = {}
    for key, value in doc.items():
        if not isinstance(value, (list, dict)):
            found.append(f"{key}: must be a list of files or a mapping with 'files' (and optionally 'metadata')")
            continue
        files, metadata, tree = _files(value)
        if not isinstance(files, (list, dict)) or not files:
            found.append(f"{key}/files: must be a non-empty list of paths or mapping of path to tree name")
        if not isinstance(metadata, dict):
            found.append(f"{key}/metadata: must be a mapping")
        elif reserved := sorted(RESERVED_METADATA & metadata.keys()):
            renamed.append(
                f"{key}/metadata: {', '.join(map(repr, reserved))} is coffea's own (events.metadata holds the chunk's "
                "dataset, filename, treename, entrystart, entrystop and fileuuid; coffea's Runner refuses it too): "
                "rename that entry"
            )
        if not isinstance(tree, str):
            found.append(f"{key}/treename: must be a tree name")
        if (other := names.setdefault(safe_name(key), key)) != key:
            found.append(f"{key}: its safe name {safe_name(key)} is also {other!r}'s; rename one of them")
    if found:
        return found
    seen: dict[str, str] = {}
    for key, index, path, about, _, _ in entries(doc):
        where = f"{key}/files[{index}]"
        if (problem := _entry_problem(where, path, about)) is not None:
            found.append(problem)
        elif path in seen:
            found.append(
                f"{where}: {path} is listed twice, here and at {seen[path]}; it would be counted twice: "
                "keep one of them"
            )
        else:
            seen[path] = where
    return renamed + found


def local_bytes(path: str) -> int | None:
    """The size of a local file (a stat, microseconds), for its time limit; None for a URL or a missing file."""
    if "://" in path:
        return None
    try:
        return os.stat(path).st_size
    except OSError:
        return None
