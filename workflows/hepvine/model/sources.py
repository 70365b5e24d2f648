"""The local files a user's analysis is made of: an input of every job that runs it, so they are shipped to workers
that share no filesystem with the login node, and a change of any of them reruns those jobs.

Names are looked up where the job's Python looks them up: for an analysis named ``<file.py>:<Name>``, the file's
directory first (``hepvine.work.processor`` puts it on the job's import path), then the directory Snakemake runs in
(the job's ``python -m`` puts it there); for ``<module>:<Name>``, that directory. A name found there as a module
``x.py`` or a package directory ``x/`` (with ``__init__.py``, or without one — a namespace package — when nothing
installed provides the name) is local: the analysis is its file, then the local modules and packages it imports,
and what those import, followed the same way. A package is shipped with every file in it (its data files too: a
package may read a correction or a model beside its code), ``__pycache__``, hidden entries, compiled and backup files
left out. Anything else (the standard library, coffea, an installed package) is not shipped: it comes with the
environment.

Imports are read from the source (``ast``), never executed: the workflow's parse must not import the user's code.
An import made only at run time (``importlib.import_module(name)``) is not seen: keep such modules in a package.
Every job that runs the analysis has each of these files as an input, so what is shipped is capped (MAX_FILES,
MAX_BYTES): a larger package belongs in the jobs' environment.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import importlib.machinery
import importlib.util
import os
from pathlib import Path

MAX_FILES = 200
MAX_BYTES = 50 * 2**20
LEFT_OUT_SUFFIXES = (".pyc", ".pyo", "~", ".swp", ".bak", "#")  # (#name#: an editor's autosave)


class SourcesError(ValueError):
    """The analysis's local files cannot be shipped as they are; the message says what to change."""


def _parsed(path: Path, keep: bool = False) -> ast.Module:
    """The Python file PATH parsed; with KEEP (the analysis's own file, which ``local_sources`` and ``check_names``
    both read at the parse) once for its contents as they are, the few last kept. What reading or parsing it raises is
    raised each time."""
    source = path.read_bytes()
    return _parsed_source(source, str(path)) if keep else ast.parse(source, filename=str(path))


@functools.lru_cache(maxsize=4)
def _parsed_source(source: bytes, filename: str) -> ast.Module:
    return ast.parse(source, filename=filename)


def _imported_top_names(path: Path, keep: bool = False) -> set[str]:
    """The top-level names of the absolute imports in the Python file PATH (``import a.b`` and ``from a.b import c``
    give ``a``; relative imports stay inside their package, which is shipped whole); KEEP: ``_parsed``'s."""
    try:
        tree = _parsed(path, keep)
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
    """Every file of the package DIRECTORY, sorted; ``__pycache__``, hidden entries, compiled and backup files left
    out."""
    return sorted(
        p
        for p in directory.rglob("*")
        if p.is_file()
        and not p.name.endswith(LEFT_OUT_SUFFIXES)
        and not any(part == "__pycache__" or part.startswith(".") for part in p.relative_to(directory).parts)
    )


def _installed(name: str) -> bool:
    """Whether NAME is a module or regular package that the environment provides (found without importing it)."""
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return False
    return spec is not None and spec.origin not in (None, "namespace")


def _local(name: str, bases: list[Path]) -> list[Path]:
    """The files of the module or package NAME as the first of BASES (directories on the job's import path) that
    has it provides it, in Python's order: the package ``BASE/NAME/``, the compiled extension module
    (``BASE/NAME.cpython-313-x86_64-linux-gnu.so``...) or the module ``BASE/NAME.py``, a namespace package (without
    ``__init__.py``) only when nothing installed provides NAME; [] when none does."""
    for base in bases:
        package = base / name
        if (package / "__init__.py").is_file():
            return _package_files(package)
        for suffix in (*importlib.machinery.EXTENSION_SUFFIXES, ".py"):
            module = base / f"{name}{suffix}"
            if module.is_file():
                return [module]
        if package.is_dir() and name.isidentifier() and not _installed(name):
            return _package_files(package)
    return []


def local_sources(spec: str) -> list[str]:
    """The local files of the analysis SPEC (``<file.py>:<Name>`` or ``<module>:<Name>``), as paths relative to the
    directory Snakemake runs in (or as the spec gives the file): the file (or the module's package) first, then what
    it imports locally, in the order met. Raises SourcesError when they are more than MAX_FILES or MAX_BYTES."""
    where = spec.rpartition(":")[0]
    here = Path(".")
    if where.endswith(".py"):
        bases = [Path(where).parent, here] if Path(where).parent != here else [here]
        found, names = [Path(where)], set()
    else:
        bases = [here]
        found, names = _local(where.split(".")[0], bases), {where.split(".")[0]}
    seen = set(found)
    for path in found:  # grows as it goes: what each local module imports, each name looked up once
        if path.suffix != ".py":
            continue
        for name in sorted(_imported_top_names(path, keep=path == found[0]) - names):
            names.add(name)
            for more in _local(name, bases):
                if more not in seen:
                    seen.add(more)
                    found.append(more)
    size = sum(p.stat().st_size for p in found if p.exists())
    if len(found) > MAX_FILES or size > MAX_BYTES:
        raise SourcesError(
            f"analysis={spec}: its local files ({len(found)} files, {size / 2**20:.0f} MB, from "
            f"{', '.join(map(str, bases))}) are an input of every job that runs it, and are more than {MAX_FILES} "
            f"files or {MAX_BYTES // 2**20} MB; install the package in the jobs' environment (pip install; for "
            "workers with nothing installed, hepvine pack-env --with <its distribution> and --taskvine-environment) "
            "and name it as <module>:<Name> from a directory without it, or keep large data out of the package"
        )
    return [str(p) for p in found]


def version(spec: str) -> str | None:
    """The version of the analysis SPEC a job runs: a digest (SHA-256, its first 16 hex digits) of its local files'
    names and contents (``local_sources``: the names as every job of the run has them, relative to the directory it
    runs in), read when the job loads it. None for an analysis without local files (an installed module: the
    environment's). Each file's record keeps it, and the report counts the versions the campaign's files ran
    (``hepvine.products.report``): a file changed while the campaign ran leaves jobs that ran before the change,
    or during it, whose outputs are newer than the change, so the next command would not run them again."""
    digest = hashlib.sha256()
    files = local_sources(spec)
    for name in files:
        digest.update(name.encode() + b"\0")
        try:
            digest.update(Path(name).read_bytes())
        except OSError as e:  # (gone, or unreadable: as such)
            digest.update(f"({type(e).__name__})".encode())
        digest.update(b"\0")
    return digest.hexdigest()[:16] if files else None


def check_sendable(spec: str, files: list[str], workdir: Path) -> None:
    """Raise SourcesError naming FILES (``local_sources`` of SPEC) that lie outside WORKDIR, the directory Snakemake
    runs in: without a shared filesystem a job is sent files under it only, so every job would fail on them (the
    executor's error, job after job, once workers were started). A link under WORKDIR to the analysis's directory is
    sent as the files it links to. Also raised when SPEC names its file under WORKDIR otherwise than relative to it
    (an absolute path, ``../wf/ana.py``), saying the name to give."""
    where, _, name = spec.rpartition(":")
    outside = [f for f in files if not Path(os.path.abspath(f)).is_relative_to(os.path.abspath(workdir))]
    if outside:
        raise SourcesError(
            f"analysis={spec}: {', '.join(outside[:3])}{' ...' if len(outside) > 3 else ''} lie(s) outside {workdir}, "
            "the directory Snakemake runs in, and jobs without a shared filesystem (--shared-fs-usage none, as in "
            "the TaskVine profiles) are sent only the files under it. Link the analysis's directory into it and "
            f"name the analysis through the link: ln -s {os.path.abspath(Path(where).parent)} my-analysis, then "
            f"analysis=my-analysis/{Path(where).name}:{name} (or copy the directory there)"
        )
    relative = os.path.relpath(os.path.abspath(where), os.path.abspath(workdir))
    if where.endswith(".py") and relative != os.path.normpath(where):
        raise SourcesError(
            f"analysis={spec}: name the file relative to {workdir}, the directory Snakemake runs in: "
            f"analysis={relative}:{name}. Jobs without a shared filesystem (--shared-fs-usage none, as in the "
            "TaskVine profiles) are sent it under that name, and each job opens the file the analysis names"
        )


# Names whose use at a module's top level can bind any name: check_names cannot tell what such a module defines.
DYNAMIC_BINDERS = frozenset({"globals", "locals", "vars", "exec", "setattr"})
DEFINITIONS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)


def check_names(spec: str, args: dict) -> None:
    """Raise SourcesError when the file of the analysis SPEC (``<file.py>:<Name>``) plainly binds no Name at its top
    level, or binds it only to plain functions while ARGS (analysis_args) are given: what the first job would stop
    on, said before any job (and any worker) starts. Read from the source like its imports, never run; silent where
    the source cannot tell (a star import, ``globals()`` and the like, a module ``__getattr__``, a name bound in a way
    not followed here, a file that does not parse: the job says) and for ``<module>:<Name>``."""
    where, _, name = spec.rpartition(":")
    if not where.endswith(".py"):
        return
    try:
        tree = _parsed(Path(where), keep=True)
    except (OSError, SyntaxError, ValueError):
        return
    bound: dict[str, list[ast.AST]] = {}
    for node in _top_level(tree.body):
        if isinstance(node, DEFINITIONS):
            bound.setdefault(node.name, []).append(node)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            for alias in node.names:
                if alias.name == "*":
                    return
                bound.setdefault(alias.asname or alias.name.split(".")[0], []).append(node)
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
                for n in ast.walk(target):
                    if isinstance(n, ast.Name):
                        bound.setdefault(n.id, []).append(node)
    named = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
    if "__getattr__" in bound or named & DYNAMIC_BINDERS:
        return
    if name not in bound and name not in named:  # named anywhere: bound in a way not followed here, perhaps
        defined = sorted(n for n, nodes in bound.items() if any(isinstance(node, DEFINITIONS) for node in nodes))
        raise SourcesError(
            f"analysis={spec}: {where} defines no {name} (its classes and functions: "
            f"{', '.join(defined) or 'none'}); name the processor class or function it defines"
        )
    plain_function = (ast.FunctionDef, ast.AsyncFunctionDef)
    if args and name in bound and all(isinstance(n, plain_function) and not n.decorator_list for n in bound[name]):
        raise SourcesError(
            f"analysis={spec}: {name} is a function, which takes no analysis_args (only a processor class is "
            f"instantiated with them: {', '.join(sorted(args))}); drop analysis_args"
        )


def _top_level(body: list[ast.stmt]):
    """The statements of a module's BODY that bind its top-level names: those in its compound statements too
    (``if``, ``try``, ``with``, ``for``, ``while``, ``match``), not those inside its functions and classes."""
    for node in body:
        yield node
        if isinstance(node, DEFINITIONS):
            continue
        for field in ("body", "orelse", "finalbody", "handlers", "cases"):
            for child in getattr(node, field, None) or []:
                if isinstance(child, (ast.ExceptHandler, ast.match_case)):
                    yield from _top_level(child.body)
                elif isinstance(child, ast.stmt):
                    yield from _top_level([child])
