"""Warm Python (``--taskvine-library-preload``, ``--taskvine-local-preload``): ``$TASKVINE_WARM_PYTHON MODULE ARGS``
runs ``python -m MODULE ARGS`` in a process forked from one that has imported the preloaded modules once, instead of
in a new interpreter that imports them again (coffea's 0.7 s, for instance, in every job).

Two kinds of server do it (and a third runs TaskVine libraries themselves: ``serve_library``). A library call starts
its own (``start``) before Snakemake runs the job — a fork of the call while it is still one thread, so the forks it
makes run no thread but their own — and ends it after (``stop``).
The executor starts one for the jobs Snakemake runs on this node, its local rules (``serve``): a process of its own
(this file run as ``python warm.py --serve``; the executor runs threads, so nothing is forked from it), which imports
the modules while the run begins, and ends with the run (``stop``, or when the executor's process ends).

The command's client (this file run as a script: ``python warm.py MODULE ARGS``, importing nothing of the plugin)
sends the server its arguments, working directory, environment, umask and standard input, output and error (as file
descriptors, so ``2> log`` holds). For each command the server forks a minder, which forks the command, tells the
client it has started, waits for it and sends back its exit status (a command killed by a signal kills its client
with the same signal): commands run side by side, as many as the jobs that run them. A command ends with its client
(killed with its job) and with its server. Where no server starts it (the variable unset, a job run as a process of
its own on a worker, a server that could not start, has ended or cannot fork, or a job whose ``python`` on PATH is
another interpreter's: a conda environment of its own) the client runs ``python -m MODULE ARGS`` in its place: the
same command, cold.

A command's module is run afresh as ``__main__``, even when it was preloaded (what it imports stays imported).

On a worker kept between commands (``--taskvine-keep-workers-s``), the first library leaves a library server behind
(``serve_library``), and the worker's next libraries run as ``python warm.py --library library_code.py ARGS``: the
client (``library_client``) sends the server the library's pipes to its worker besides its standard descriptors, and
the library is forked from the first one's imports (docs/kept-workers.md).

Limits: the command is the server's interpreter, forked: interpreter settings from the job's environment
(``PYTHONWARNINGS``, ``PYTHONHASHSEED``, ``-X`` options), and what the preloaded modules read from the environment
when they were imported (e.g. thread counts), are the server's.
"""

from __future__ import annotations

import fcntl
import json
import os
import select
import shutil
import signal
import socket
import stat
import struct
import sys
import tempfile
import threading
import traceback
import warnings

VARIABLE = "TASKVINE_WARM_PYTHON"  # the prefix: in a call's (or the executor's) environment while its server runs
SOCKET_VARIABLE = "TASKVINE_WARM_SOCKET"
PR_SET_PDEATHSIG = 1  # prctl(2): the signal a process gets when its parent ends
SERVER_FD = 3  # where the node's server finds its listening socket (serve)
STANDARD_FDS = [0, 1, 2]
MAX_FDS = 8  # the most descriptors a client sends (a library's: its standard ones and two pipes)
LIBRARY = "--library"  # warm.py --library SCRIPT ARGS: a TaskVine library, forked from its worker's library server
STARTED = b"+"  # a minder's first word to its client: the command is forked (before it, the client may run it cold)
LIBRARY_SERVER: int | None = None  # in a worker's library server and the libraries forked from it: the server's pid
_LOADED: dict[str, tuple[int, ...] | None] = {}  # in a library server: its modules' files, as they were (_takes)
_LIBRARY_SOCKET = ""  # in a library server: where it listens
_WORKER = 0  # in a library server: its worker's pid
# The node's server's own PYTHONPATH entries: not the command's (it has its own).
_SERVER_PATH: list[str] = []


def start() -> tuple[int, str] | None:
    """Fork this call's server, listening on a socket in a directory of its own that only this user can enter (a
    short path: a socket's is at most 107 bytes, a worker's sandboxes are deeper); (its pid, the socket's path). None
    when it cannot start — this process runs threads (a fork would copy their locks), the system lacks what it needs
    (``pidfd_open``), or a directory, socket or fork fails (said on standard error) — and the commands then run
    cold. The call's environment gets VARIABLE and SOCKET_VARIABLE, so that the job's commands find it. The server
    ends when the call does, even killed, and removes its directory."""
    if threading.active_count() > 1:
        return None
    directory = call = None
    try:
        call = os.pidfd_open(os.getpid())
        directory = tempfile.mkdtemp(prefix="vine-warm-", dir="/tmp")
        path = os.path.join(directory, "s")
        with socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET) as listener:
            listener.bind(path)
            listener.listen()
            pid = _fork()
            if pid == 0:
                code = 0
                try:
                    _serve(listener, call)
                    shutil.rmtree(directory, ignore_errors=True)
                except BaseException:
                    traceback.print_exc()
                    code = 1
                finally:
                    os._exit(code)
    except OSError as e:
        return _not_started("--taskvine-library-preload: this call's", e, directory)
    finally:
        if call is not None:
            os.close(call)
    return _started(pid, path)


def stop(server: tuple[int, str] | None) -> None:
    """End the server START or SERVE made; a command it still runs ends with it (see ``_run``)."""
    if server is None:
        return
    pid, path = server
    os.environ.pop(VARIABLE, None)
    os.environ.pop(SOCKET_VARIABLE, None)
    try:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    except (ProcessLookupError, ChildProcessError):
        pass
    shutil.rmtree(os.path.dirname(path), ignore_errors=True)


def serve(preload: list[str] | tuple[str, ...], log: str) -> tuple[int, str] | None:
    """Start the server of the commands Snakemake runs on this node, importing PRELOAD (what fails to import is said
    in LOG, where the server writes): ``python warm.py --serve`` spawned (never forked: this process runs threads),
    given a socket that listens from now on, in a directory of its own that only this user can enter (a command that
    comes while the modules import waits for them), and ending when this process does. (its pid, the socket's
    path), for ``stop``; None when it cannot start (said on standard error), and the commands then run cold. This
    process's environment gets VARIABLE and SOCKET_VARIABLE, which the local jobs' commands inherit (and nothing this
    plugin starts on a worker is given)."""
    directory = None
    try:
        os.close(os.pidfd_open(os.getpid()))  # (what the server and its minders need)
        directory = tempfile.mkdtemp(prefix="vine-warm-", dir="/tmp")
        path = os.path.join(directory, "s")
        with socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET) as listener:
            listener.bind(path)
            listener.listen(64)
            # The server's descriptor 3 (a dup2 onto itself would keep its close-on-exec).
            fd = listener.fileno() if listener.fileno() != SERVER_FD else os.dup(listener.fileno())
            env = {k: v for k, v in os.environ.items() if k not in (VARIABLE, SOCKET_VARIABLE)}
            argv = [sys.executable, os.path.abspath(__file__), "--serve", str(os.getpid()), *preload]
            try:
                pid = os.posix_spawn(
                    sys.executable,
                    argv,
                    env,
                    file_actions=[
                        (os.POSIX_SPAWN_DUP2, fd, SERVER_FD),
                        (os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0),
                        (os.POSIX_SPAWN_OPEN, 1, log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644),
                        (os.POSIX_SPAWN_DUP2, 1, 2),
                    ],
                )
            finally:
                if fd != listener.fileno():
                    os.close(fd)
    except OSError as e:
        return _not_started("--taskvine-local-preload: the local jobs'", e, directory)
    return _started(pid, path)


def _started(pid: int, path: str) -> tuple[int, str]:
    """The server PID listening at PATH, named in this process's environment for the commands it starts."""
    os.environ[SOCKET_VARIABLE] = path
    os.environ[VARIABLE] = f"{sys.executable} {os.path.abspath(__file__)}"
    return pid, path


def _not_started(whose: str, error: OSError, directory: str | None) -> None:
    """Say that WHOSE commands run cold, and why (ERROR); remove the server's DIRECTORY, if made."""
    print(f"{whose} commands run cold: {type(error).__name__}: {error}", file=sys.stderr)
    if directory is not None:
        shutil.rmtree(directory, ignore_errors=True)


def _serve_node(argv: list[str]) -> None:
    """``warm.py --serve PARENT MODULES``: the server ``serve`` starts, listening on descriptor SERVER_FD. It imports
    MODULES, ends when PARENT does (removing its directory), and serves commands as ``python -m`` would run them: this
    file's directory (a script's first path entry) is no place to import from, and the server's own PYTHONPATH
    entries are not the command's. A module that starts a thread ends it at once: its commands run cold."""
    parent, modules = int(argv[0]), argv[1:]
    here = os.path.dirname(os.path.realpath(__file__))
    sys.path[:] = [p for p in sys.path if os.path.realpath(p or os.curdir) != here]
    _SERVER_PATH.extend(filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep)))
    listener = socket.socket(fileno=SERVER_FD)
    directory = os.path.dirname(listener.getsockname())
    watch = os.pidfd_open(parent)
    if os.getppid() == parent:  # (else its parent ended before it could watch it)
        import_modules(modules, "--taskvine-local-preload")
        if threading.active_count() > 1:
            names = ", ".join(t.name for t in threading.enumerate() if t is not threading.current_thread())
            print(f"--taskvine-local-preload: imports started threads ({names}): commands run cold", file=sys.stderr)
        else:
            sys.stderr.flush()
            _serve(listener, watch)
    shutil.rmtree(directory, ignore_errors=True)


def library_socket(worker: int) -> str:
    """Where the library server of the worker whose pid is WORKER listens (``serve_library``): in a directory of this
    user's under /tmp (a worker's own directories may be too deep for a socket's path)."""
    return os.path.join("/tmp", f"vine-library-{os.getuid()}", f"{worker}.s")


def serve_library(args: list[str]) -> int | None:
    """In a TaskVine library whose worker is kept between commands (ARGS: the library's own, naming its worker's
    pid), once it has imported what its calls need (``library.warm``): start the worker's library server, from which
    the worker's next libraries — one per manager that takes the worker — are forked with all of it imported
    (``library_client``), instead of starting a new interpreter and importing it again. It is forked twice, so that it
    is no child of this library (whose own reaping takes every child for a call of its), in a session of its own (the
    worker ends this library's group when its manager leaves), and ends when the worker does, or when a later library
    finds a module it imported changed on disk, or comes from another interpreter (that library starts cold, and
    makes the next server). Its pid; None where one already serves this worker or none can start (this process runs
    threads; a directory, socket or fork that fails: said on standard error)."""
    try:
        worker = int(_option(args, "--worker-pid") or "")
    except ValueError:
        return None
    path = library_socket(worker)
    if threading.active_count() > 1 or _serving(path):
        return None
    listener = watch = None
    try:
        _private_directory(os.path.dirname(path))
        _forget_ended(os.path.dirname(path))
        watch = os.pidfd_open(worker)
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            os.unlink(path)  # (an ended server's: none answers there)
        except FileNotFoundError:
            pass
        listener.bind(path)
        listener.listen(16)
        loaded = _loaded(os.getcwd())
        first_path = [sys.path[0], *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
        sys.stdout.flush()
        sys.stderr.flush()
        said, told = os.pipe()
        between = _fork()
    except OSError as e:
        print(f"--taskvine-keep-workers-s: worker {worker} keeps no library: {type(e).__name__}: {e}", file=sys.stderr)
        if listener is not None:
            listener.close()
        if watch is not None:
            os.close(watch)
        return None
    if between == 0:
        code = 0
        try:
            os.close(said)
            if _fork() != 0:
                os._exit(0)
            os.setsid()
            os.chdir("/")
            log = os.open(path + ".log", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
            null = os.open(os.devnull, os.O_RDONLY)
            for target, fd in ((0, null), (1, log), (2, log)):
                os.dup2(fd, target)
            _close_all_but([0, 1, 2, listener.fileno(), watch, told])  # (the library's pipes to its worker above all)
            os.write(told, str(os.getpid()).encode())  # once it holds only its own descriptors
            os.close(told)
            global LIBRARY_SERVER, _LIBRARY_SOCKET, _LOADED, _WORKER
            LIBRARY_SERVER, _LIBRARY_SOCKET, _LOADED, _WORKER = os.getpid(), path, loaded, worker
            _SERVER_PATH.extend(first_path)  # (the first library's sandbox and PYTHONPATH are not the next one's)
            print(f"warm: library server {LIBRARY_SERVER} of worker {worker} ({len(loaded)} modules)", file=sys.stderr)
            _serve(listener, watch)
        except BaseException:
            traceback.print_exc()
            code = 1
        finally:
            _end_library_server()
            os._exit(code)
    listener.close()
    os.close(watch)
    os.close(told)
    os.waitpid(between, 0)
    with os.fdopen(said) as reply:
        server = reply.read()
    return int(server) if server.isdigit() else None


def _end_library_server() -> None:
    """Remove this library server's socket and log (in the server, or a minder of it that ends it)."""
    for name in (_LIBRARY_SOCKET, _LIBRARY_SOCKET + ".log"):
        try:
            os.unlink(name)
        except OSError:
            pass


def _serving(path: str) -> bool:
    """Whether a server answers at PATH."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET) as probe:
        try:
            probe.connect(path)
        except OSError:
            return False
    return True


def _private_directory(path: str) -> None:
    """Make directory PATH (mode 0700), or make sure the one there is this user's alone (OSError if not)."""
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    info = os.lstat(path)
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid() or info.st_mode & 0o077:
        raise PermissionError(f"{path} is not a directory of this user's alone (mode 0700)")


def _forget_ended(directory: str) -> None:
    """Remove from DIRECTORY the sockets (and logs) where no server answers any more (one killed with its worker's
    batch job had no time to)."""
    for name in os.listdir(directory):
        if name.endswith(".s") and not _serving(os.path.join(directory, name)):
            for ended in (name, name + ".log"):
                try:
                    os.unlink(os.path.join(directory, ended))
                except OSError:
                    pass


def _identity(path: str) -> tuple[int, ...] | None:
    """What tells the file at PATH from another one, or from itself changed: None if there is none."""
    try:
        info = os.stat(path)
    except OSError:
        return None
    return info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns


def _loaded(sandbox: str) -> dict[str, tuple[int, ...] | None]:
    """Each imported module's file (its real path), with its identity (``_identity``); not those in SANDBOX (the
    library's own: TaskVine's script, which the next library of the same task id finds rewritten in the same
    place)."""
    files = {}
    inside = os.path.join(os.path.realpath(sandbox), "")
    for module in list(sys.modules.values()):
        name = getattr(module, "__file__", None)
        if isinstance(name, str):
            real = os.path.realpath(name)
            if real not in files and not real.startswith(inside):
                files[real] = _identity(real)
    return files


def _takes(request: dict, conn: socket.socket) -> bool:
    """Whether this server takes REQUEST, come through CONN: any command, but a library (``library_client``) only
    from a child of this server's worker, run by the interpreter this server runs, while no module it imported has
    changed on disk. Why not is said on standard error (the server's log); a library refused for its interpreter or
    a change ends the server (its next library starts cold, and makes a new one)."""
    if "python" not in request:
        return True
    peer = struct.unpack("3i", conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i")))[0]
    found = parent_and_start(peer)
    if found is None or found[0] != _WORKER:
        print(f"warm: a library from process {peer}, not a child of worker {_WORKER}: not taken", file=sys.stderr)
        return False
    changed = [name for name, was in _LOADED.items() if _identity(name) != was]
    if request["python"] != os.path.realpath(sys.executable) or changed:
        why = f"{changed[0]} has changed" if changed else f"a library of {request['python']} came"
        print(f"warm: {why} since this server began: it ends", file=sys.stderr, flush=True)
        _end_library_server()
        os.kill(os.getppid(), signal.SIGKILL)  # (the server; this minder ends with it)
        return False
    return True


def parent_and_start(pid: int | str) -> tuple[int, int] | None:
    """(parent pid, start time in clock ticks since boot) of process PID, from /proc; None when it does not run (also
    when it has ended and waits to be reaped)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            line = f.read()
    except OSError:
        return None
    fields = line[line.rindex(")") + 2 :].split()  # after "pid (comm) ": state, ppid, ... starttime (22nd)
    return None if fields[0] == "Z" else (int(fields[1]), int(fields[19]))


def import_modules(names: list[str] | tuple[str, ...], setting: str) -> list[str]:
    """Import NAMES for the warm commands (a server's, or a library's before its calls); the names imported. One that
    cannot be imported is named on standard error with SETTING, and left to the commands: they import it themselves,
    and say why."""
    import importlib

    imported = []
    for name in names:
        try:
            importlib.import_module(name)
        except Exception as e:  # the module's own failure
            print(f"{setting}: {name} not imported: {type(e).__name__}: {e}", file=sys.stderr)
        else:
            imported.append(name)
    return imported


def _serve(listener: socket.socket, parent: int | None = None) -> None:
    """The server: a minder forked for each command, until it is killed or PARENT (a pidfd) ends."""
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGCHLD):
        signal.signal(sig, signal.SIG_DFL)
    server = os.getpid()
    watched = [listener] if parent is None else [listener, parent]
    while True:
        ready, _, _ = select.select(watched, [], [])
        _reap()
        if parent in ready:
            return
        try:
            conn, _ = listener.accept()
        except OSError as e:  # (out of descriptors, say): this command's client gets no answer, the next may
            print(f"warm: a command not taken: {type(e).__name__}: {e}", file=sys.stderr, flush=True)
            continue
        try:
            minder = _fork()
        except OSError as e:  # (at the user's process limit): its client runs it cold
            print(f"warm: a command not taken: {type(e).__name__}: {e}", file=sys.stderr, flush=True)
            conn.close()
            continue
        if minder == 0:
            code = 0
            try:
                listener.close()
                _die_with_parent(server)
                _mind(conn)
            except BaseException:
                traceback.print_exc()
                code = 1
            finally:
                os._exit(code)
        conn.close()


def _reap() -> None:
    """Collect the minders that have ended."""
    while True:
        try:
            if os.waitpid(-1, os.WNOHANG)[0] == 0:
                return
        except ChildProcessError:
            return


def _fork() -> int:
    """os.fork without Python's warning that the process runs threads (3.12+; shown where the node's server runs
    as ``__main__``): the threads here are the numerical libraries' own (OpenBLAS's, jemalloc's), started by the
    preloaded modules' imports, which prepare for a fork themselves; Python threads are none (``start``, and the node's
    server starts none). Parent and child leave the warnings as they were."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r"This process .* is multi-threaded", category=DeprecationWarning)
        return os.fork()


def _mind(conn: socket.socket) -> None:
    """In a minder: run the command CONN's client asks for, and send it its exit status; end it if the client ends."""
    message, fds, _, _ = socket.recv_fds(conn, 1 << 22, MAX_FDS)
    request = json.loads(message) if message else {}
    if len(fds) != len(request.get("fds", STANDARD_FDS)) or not message or not _takes(request, conn):
        for fd in fds:  # (a client that ended before it asked, or a library this server cannot take: it runs cold)
            os.close(fd)
        return
    minder = os.getpid()
    pid = _fork()
    if pid == 0:
        _run(request, fds, minder)
    for fd in fds:
        os.close(fd)
    try:
        conn.sendall(STARTED)
    except OSError:  # the client has ended: so does the command, below
        pass
    ended = os.pidfd_open(pid)
    ready, _, _ = select.select([conn, ended], [], [])
    if ended not in ready:  # the client said nothing more: it has ended, and so does its command
        os.kill(pid, signal.SIGKILL)
    if request.get("group"):  # and what is left of its group (a library's calls), ended or not
        try:
            os.killpg(pid, signal.SIGKILL)  # (its leader, not yet collected, keeps the group's id)
        except ProcessLookupError:  # (it had not yet made its group)
            pass
    _, status = os.waitpid(pid, 0)
    try:
        conn.sendall(str(os.waitstatus_to_exitcode(status)).encode())
    except OSError:
        pass


def _run(request: dict, fds: list[int], minder: int) -> None:
    """In the forked command: become ``python -m MODULE ARGS`` (or ``python SCRIPT ARGS``) as REQUEST (the client's)
    says, with the client's descriptors FDS as its own (standard input, output and error, and a library's pipes to its
    worker); never returns. It ends when its MINDER does (and the minder when the server does)."""
    code = 0
    try:
        targets = request.get("fds", STANDARD_FDS)
        above = [fcntl.fcntl(fd, fcntl.F_DUPFD, max(targets) + 1) for fd in fds]  # (none overwritten before use)
        for target, fd in zip(targets, above):
            os.dup2(fd, target)
        _close_all_but(targets)  # the server's socket, the client's copies, the library's files
        if request.get("group"):
            os.setpgid(0, 0)
        _die_with_parent(minder)
        import atexit
        import runpy

        atexit._clear()  # the library's own exit handlers are not the command's
        signal.signal(signal.SIGINT, signal.default_int_handler)
        os.umask(request["umask"])
        os.chdir(request["cwd"])
        os.environ.clear()
        # (Without the server's variables: a command it runs that runs another runs that one cold, never waiting here.)
        os.environ.update({k: v for k, v in request["env"].items() if k not in (VARIABLE, SOCKET_VARIABLE)})
        tempfile.tempdir = None  # from the command's TMPDIR, not the library's
        # As `python -m` begins its path: the working directory, then PYTHONPATH's entries (the command's, not the
        # node's server's).
        for entry in _SERVER_PATH:
            if entry in sys.path:
                sys.path.remove(entry)
        script = request.get("script")
        first = os.path.dirname(os.path.abspath(script)) if script else request["cwd"]  # (a script's: its directory)
        sys.path[0:0] = [first, *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
        sys.argv = [script or request["module"], *request["args"]]
        # A preloaded module run as the command is run afresh as __main__, as `python -m` runs it: its preloaded copy
        # (and what it imported) stays for others to import.
        if not script:
            sys.modules.pop(request["module"], None)
        try:
            if script:
                runpy.run_path(script, run_name="__main__")
            else:
                runpy.run_module(request["module"], run_name="__main__", alter_sys=True)
        finally:
            for thread in threading.enumerate():  # as the interpreter does at its end: its threads, then atexit
                if thread is not threading.current_thread() and not thread.daemon:
                    thread.join()
            atexit._run_exitfuncs()
    except SystemExit as e:
        if isinstance(e.code, int) or e.code is None:
            code = e.code or 0
        else:
            print(e.code, file=sys.stderr)
            code = 1
    except KeyboardInterrupt:
        code = 128 + signal.SIGINT
    except BaseException:
        traceback.print_exc()
        code = 1
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(code)


def _close_all_but(kept: list[int]) -> None:
    """Close every descriptor of this process but KEPT."""
    bounds = [-1, *sorted(set(kept)), os.sysconf("SC_OPEN_MAX")]
    for low, high in zip(bounds, bounds[1:]):
        if high > low + 1:  # (os.closerange(a, b) with b < a would close all from a)
            os.closerange(low + 1, high)


def _die_with_parent(parent: int) -> None:
    """SIGKILL to this process when its parent (PARENT: the server, or a command's minder) ends, as when the call
    stops the server (Linux's prctl); at once if it has already ended."""
    import ctypes

    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):
        pass
    if os.getppid() != parent:
        os.kill(os.getpid(), signal.SIGKILL)


def client(argv: list[str]) -> int:
    """``warm.py MODULE ARGS``: the command run by the server this job's environment names, or as ``python -m``
    where none starts it (no server, one that cannot take it or has ended, or a ``python`` on PATH other than this
    interpreter's: a job in an environment of its own). Its exit status is the command's (a command killed by a
    signal: this client too)."""
    module, args = argv[0], argv[1:]
    python = shutil.which("python")
    path = os.environ.get(SOCKET_VARIABLE)
    if python and os.path.dirname(os.path.abspath(python)) != os.path.dirname(os.path.abspath(sys.executable)):
        path = None
    env = {k: v for k, v in os.environ.items() if k not in (VARIABLE, SOCKET_VARIABLE)}
    interpreter = python or sys.executable
    request = {"module": module, "args": args}
    return _through(path, request, STANDARD_FDS, [interpreter, "-m", module, *args], env)


def library_client(argv: list[str]) -> int:
    """``warm.py --library SCRIPT ARGS``: a TaskVine library (``python SCRIPT ARGS``, as its worker starts it) forked
    from its worker's library server (``serve_library``) with the library's pipes to its worker, leading a process
    group of its own that ends with this client (which its worker kills); ``python SCRIPT ARGS`` where none takes it.
    """
    script, args = argv[0], argv[1:]
    try:
        pipes = [int(_option(args, "--in-pipe-fd")), int(_option(args, "--out-pipe-fd"))]
        path = library_socket(int(_option(args, "--worker-pid")))
    except (TypeError, ValueError):  # (not a library's arguments: it says so itself, cold)
        pipes, path = [], None
    request = {"script": script, "args": args, "group": True, "python": os.path.realpath(sys.executable)}
    return _through(path, request, [*STANDARD_FDS, *pipes], [sys.executable, script, *args], dict(os.environ))


def _through(path: str | None, request: dict, fds: list[int], cold: list[str], env: dict) -> int:
    """REQUEST (with this process's working directory, environment and umask, and its descriptors FDS) run by the
    server listening at PATH; its exit status. Where none takes it, this process execs COLD with ENV instead."""
    request = {**request, "fds": fds, "cwd": os.getcwd(), "env": dict(os.environ), "umask": _umask()}
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    try:
        if not path:
            raise OSError("no server")
        conn.connect(path)
        socket.send_fds(conn, [json.dumps(request).encode()], fds)
        if conn.recv(64) != STARTED:
            raise OSError("not started")
    except OSError:  # run cold: the command has not begun (a closed standard stream, a huge environment...)
        conn.close()
        os.execve(cold[0], cold, env)
    for fd in fds[len(STANDARD_FDS) :]:  # (the command has its own copies: a library's pipes)
        os.close(fd)
    try:
        reply = conn.recv(64)
    except OSError:
        reply = b""
    code = int(reply) if reply else 1  # (a server that ended while the command ran: the command ended with it)
    if code < 0:  # killed by a signal: so is this client, as the command's own interpreter would have been
        if -code != signal.SIGKILL:
            signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
        return 128 - code
    return code


def _option(args: list[str], name: str) -> str | None:
    """The value of option NAME in ARGS (``NAME VALUE`` or ``NAME=VALUE``), else None."""
    for i, arg in enumerate(args):
        if arg == name and i + 1 < len(args):
            return args[i + 1]
        if arg.startswith(name + "="):
            return arg[len(name) + 1 :]
    return None


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


if __name__ == "__main__":
    if sys.argv[1:2] == ["--serve"]:
        _serve_node(sys.argv[2:])
    elif sys.argv[1:2] == [LIBRARY]:
        sys.exit(library_client(sys.argv[2:]))
    else:
        sys.exit(client(sys.argv[1:]))
