"""The local files a user's analysis is made of: an input of every job that runs it, so they are shipped to workers
that share no filesystem with the login node, and a change of any of them reruns those jobs.

An analysis named ``<file.py>:<Name>`` is that file plus what it imports from beside it — a module ``x.py`` or a
package directory ``x/`` (with ``__init__.py``) in the file's directory, which is where ``hepvine.work.processor``
lets its imports look first, as they would for the user. An analysis named ``<module>:<Name>`` whose top-level
package (or module) is in the directory Snakemake runs in is that package, whole. A package is shipped with every
file in it (its data files too: a package may read a correction or a model beside its code), ``__pycache__`` and
hidden entries left out; what a shipped module imports from beside it is followed the same way. Anything else
(the standard library, coffea, an installed package) is not shipped: it comes with the environment.

Imports are read from the source (``ast``), never executed: the workflow's parse must not import the user's code.
An import made only at run time (``importlib.import_module(name)``) is not seen: keep such modules in the package.
"""

from __future__ import annotations

import ast
from pathlib import Path

MAX_FILES = 2000
MAX_BYTES = 200 * 2**20


class SourcesError(ValueError):
    """The analysis's local files cannot be shipped as they are; the message says what to change."""


def _imported_top_names(path: Path) -> set[str]:
    """The top-level names of the absolute imports in the Python file PATH (``import a.b`` and ``from a.b import c``
    give ``a``; relative imports stay inside their package, which is shipped whole)."""
    try:
        tree = ast.parse(path.read_bytes(), filename=str(path))
    except (SyntaxError, ValueError):
        return set()  # the job says what is wrong with it, where the user's frames are shown
    except FileNotFoundError:
        return set()  # a job's parse on a worker that was not sent the analysis (a merge job's, say)
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


def _package_files(directory: Path) -> list[Path]:
    """Every file of the package DIRECTORY, sorted; ``__pycache__`` and hidden entries left out."""
    return sorted(
        p
        for p in directory.rglob("*")
        if p.is_file()
        and not any(part == "__pycache__" or part.startswith(".") for part in p.relative_to(directory).parts)
    )


def _local(name: str, base: Path) -> list[Path]:
    """The files of the module or package NAME when it is local to BASE (a directory on the analysis's import
    path): the package ``BASE/NAME/`` (it has ``__init__.py``) or the module ``BASE/NAME.py``; [] otherwise."""
    package = base / name
    if (package / "__init__.py").is_file():
        return _package_files(package)
    module = base / f"{name}.py"
    return [module] if module.is_file() else []


def local_sources(spec: str, root: Path = Path(".")) -> list[str]:
    """The local files of the analysis SPEC (``<file.py>:<Name>`` or ``<module>:<Name>``) as paths relative to ROOT
    (the directory Snakemake runs in) or as given: its file first, then what it imports from beside it, in the order
    met. Raises SourcesError when they are more than MAX_FILES or MAX_BYTES."""
    where = spec.rpartition(":")[0]
    if where.endswith(".py"):
        first = Path(where)
        base, found = first.parent, [first]
    else:
        base = root
        found = _local(where.split(".")[0], root)
    seen = set(found)
    for path in found:  # grows as it goes: what each local module imports from beside it, once
        if path.suffix != ".py":
            continue
        for name in sorted(_imported_top_names(path)):
            for more in _local(name, base):
                if more not in seen:
                    seen.add(more)
                    found.append(more)
    size = sum(p.stat().st_size for p in found if p.exists())
    if len(found) > MAX_FILES or size > MAX_BYTES:
        raise SourcesError(
            f"analysis={spec}: its local files ({len(found)} files, {size / 2**20:.0f} MB, from {base}) are shipped "
            f"with every job, and are more than {MAX_FILES} files or {MAX_BYTES // 2**20} MB; install the package "
            "in the jobs' environment (pip install; --taskvine-environment) and name it as <module>:<Name> from a "
            "directory without it, or keep large data out of the package"
        )
    return [str(p) for p in found]
