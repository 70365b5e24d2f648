"""Jobs as function calls (``--taskvine-library``): each worker runs one TaskVine library process that has imported
Snakemake once, and each job is a call of ``run_job`` in a child forked from it — no interpreter start and no
``import snakemake.cli`` per job, which are most of a short job's ~2 s.

The library runs ``warm`` once before its first call, so that no call imports and builds again, in its fork, what
every job needs (Snakemake's parser and plugin registries, its API and DAG modules), and the modules the run names
(``--taskvine-library-preload``): a job's ``$TASKVINE_WARM_PYTHON MODULE ARGS`` then runs ``python -m MODULE ARGS``
forked from the library's process, with them imported (``warm.py``). ``run_job`` takes the job's
command as Snakemake formats it (``<python> -m snakemake <args>``) and runs those arguments through
``snakemake.cli.main`` in the forked child, in DIRECTORY (the workflow directory with a shared filesystem) or in the
call's own sandbox, with ENV (the job's variables, such as the workflow's ``envvars``) added to its environment; any
other command runs in a shell. Everything the job writes to its standard output and error is kept, and its tail is
returned with the exit code. This module imports nothing of TaskVine: the adapter (``taskvine.py``) makes the library
from it.

A call takes one of the worker's function slots (one per core), and nothing limits what it uses: the executor sends
only jobs of one core whose memory fits a slot's share as calls (``tasks.job_task``), the others as processes.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import traceback

from . import warm as warm_commands

OUTPUT_KEEP = 200_000  # characters of output returned to the manager
SNAKEMAKE_COMMAND = re.compile(r"^\S+ -m snakemake (?P<args>.*)$", re.S)
WARM_VARIABLE = "TASKVINE_LIBRARY_WARM_S"
PRELOADED: list[str] = []  # the modules warm imported for the calls' commands (warm.py)
_WARM_S = 0.0  # the seconds warm took (in a library forked from its worker's library server: the first library's)


def warm(preload: list[str] | tuple[str, ...] = (), keep: bool = False) -> None:
    """Run once in the library process, before its first call: what every call would otherwise redo in its fork —
    Snakemake's command-line parser with its plugin registries (~0.5 s: every installed plugin is found and
    imported), and the modules a job's ``snakemake`` imports after reading its command line (the API, the DAG, the
    config's validation, source and report handling); then the modules of PRELOAD, for the calls' warm commands (one
    that cannot be imported here is named in the library's log and left to the commands). The seconds it took go to
    the calls' environment as WARM_VARIABLE (a job can tell it ran in a warmed library). KEEP (its worker is kept
    between commands): the worker's next libraries are forked from this one's imports (``warm.serve_library``); a
    library so forked has them already."""
    import time

    global _WARM_S
    start = time.process_time()
    if warm_commands.LIBRARY_SERVER is not None:
        print(f"library forked from its worker's library server (pid {warm_commands.LIBRARY_SERVER})", flush=True)
    else:
        _import_snakemake()
    PRELOADED[:] = warm_commands.import_modules(preload, "--taskvine-library-preload")
    _WARM_S = _WARM_S or time.process_time() - start
    os.environ[WARM_VARIABLE] = f"{_WARM_S:.3f}"
    if keep and warm_commands.LIBRARY_SERVER is None:
        warm_commands.serve_library(sys.argv[1:])


def _import_snakemake() -> None:
    """Snakemake's command-line parser, and the modules a job's ``snakemake`` imports after reading its command line
    (see ``warm``)."""
    from snakemake.cli import get_argument_parser

    get_argument_parser()
    try:
        import jsonschema  # noqa: F401
        import smart_open  # noqa: F401
        import snakemake.api  # noqa: F401
        import snakemake.dag  # noqa: F401
        import snakemake.jobs  # noqa: F401
        import snakemake.persistence  # noqa: F401
        import snakemake.report  # noqa: F401
        import snakemake.utils  # noqa: F401
        import snakemake.workflow  # noqa: F401
        import yte  # noqa: F401
    except ModuleNotFoundError:  # a Snakemake laid out otherwise: what was imported stays, calls import the rest
        pass


def run_job(command: str, directory: str = "", env: dict | None = None, files_env: dict | None = None) -> dict:
    """Run one job's COMMAND in this process (a fork of the library); {"exit_code", "output"}. FILES_ENV: variables
    to point at files of the call's sandbox (its credentials), made readable by their owner only."""
    os.environ.update(env or {})
    for var, name in (files_env or {}).items():
        os.chmod(name, 0o600)
        os.environ[var] = os.path.abspath(name)
    log = os.path.abspath("job-output.log")
    sys.stdout.flush()
    sys.stderr.flush()
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    sandbox = os.getcwd()  # where TaskVine collects the call's result once it returns
    if directory:
        os.chdir(directory)
    match = SNAKEMAKE_COMMAND.match(command)
    server = warm_commands.start() if PRELOADED else None  # forked while this call is one thread
    try:
        if match:
            import snakemake.cli

            snakemake.cli.main(shlex.split(match.group("args")))
            code = 0
        else:
            code = subprocess.call(command, shell=True)
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    except Exception:  # the job's own failure, reported to the manager with its traceback
        traceback.print_exc()
        code = 1
    finally:
        warm_commands.stop(server)
    sys.stdout.flush()
    sys.stderr.flush()
    os.chdir(sandbox)
    with open(log, errors="replace") as f:
        output = f.read()
    return {"exit_code": code, "output": output[-OUTPUT_KEEP:]}
