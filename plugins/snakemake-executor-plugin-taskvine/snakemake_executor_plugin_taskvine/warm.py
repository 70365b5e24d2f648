"""Warm Python for a library call's commands (``--taskvine-library-preload``): ``$TASKVINE_WARM_PYTHON MODULE ARGS``
runs ``python -m MODULE ARGS`` in a process forked from the library's, which has imported the preloaded modules
once, instead of in a new interpreter that imports them again (coffea's 0.7 s, for instance, in every job).

Each call starts its own server (``start``) before Snakemake runs the job — a fork of the call while it is still one
thread, so the forks it makes run no thread but their own — and ends it after (``stop``). The command's client
(this file run as a script: ``python warm.py MODULE ARGS``, importing nothing of the plugin) sends the server its
arguments, working directory, environment and standard input, output and error (as file descriptors, so ``2> log``
holds); the server forks the command from itself, waits for it and sends back its exit status. A command whose
client ends (killed with its job) is killed too. Where no server answers (the variable unset, a job run as a
process of its own) the client runs ``python -m MODULE ARGS`` in its place: the same command, cold.
"""

from __future__ import annotations

import json
import os
import select
import shutil
import signal
import socket
import sys
import tempfile
import threading

VARIABLE = "TASKVINE_WARM_PYTHON"  # the command's prefix, set in a call's environment while its server runs
SOCKET_VARIABLE = "TASKVINE_WARM_SOCKET"


def start() -> tuple[int, str] | None:
    """Fork this call's server, listening on a socket in a directory of its own that only this user can enter (a
    short path: a socket's is at most 107 bytes, a worker's sandboxes are deeper); (its pid, the socket's path), or
    None when this process runs threads (a fork would copy their locks: the commands then run cold). The call's
    environment gets VARIABLE and SOCKET_VARIABLE, so that the job's commands find it."""
    if threading.active_count() > 1:
        return None
    path = os.path.join(tempfile.mkdtemp(prefix="vine-warm-", dir="/tmp"), "s")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    listener.bind(path)
    listener.listen()
    pid = os.fork()
    if pid == 0:
        try:
            _serve(listener)
        finally:
            os._exit(0)
    listener.close()
    os.environ[SOCKET_VARIABLE] = path
    os.environ[VARIABLE] = f"{sys.executable} -I {os.path.abspath(__file__)}"
    return pid, path


def stop(server: tuple[int, str] | None) -> None:
    """End the server START made (and whatever command it still runs: its client is gone with the job)."""
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


def _serve(listener: socket.socket) -> None:
    """The server: one command at a time (a job runs its commands one after another)."""
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGCHLD):
        signal.signal(sig, signal.SIG_DFL)
    while True:
        conn, _ = listener.accept()
        with conn:
            message, fds, _, _ = socket.recv_fds(conn, 1 << 22, 3)
            if not message or len(fds) != 3:  # a client that ended before it asked
                for fd in fds:
                    os.close(fd)
                continue
            pid = os.fork()
            if pid == 0:
                listener.close()
                _run(json.loads(message), fds)
            for fd in fds:
                os.close(fd)
            ended = os.pidfd_open(pid)
            ready, _, _ = select.select([conn, ended], [], [])
            if ended not in ready:  # the client said nothing more: it has ended, and so does its command
                os.kill(pid, signal.SIGKILL)
            _, status = os.waitpid(pid, 0)
            os.close(ended)
            try:
                conn.sendall(str(os.waitstatus_to_exitcode(status)).encode())
            except OSError:
                pass


def _run(request: dict, fds: list[int]) -> None:
    """In the forked command: become ``python -m MODULE ARGS`` as REQUEST says, with the client's descriptors FDS as
    standard input, output and error; never returns."""
    import runpy
    import traceback

    for target, fd in enumerate(fds):
        os.dup2(fd, target)
        os.close(fd)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    os.chdir(request["cwd"])
    os.environ.clear()
    # (Without the server's variables: a command it runs that runs another runs that one cold, never waiting here.)
    os.environ.update({k: v for k, v in request["env"].items() if k not in (VARIABLE, SOCKET_VARIABLE)})
    # As `python -m` begins its path: the working directory, then PYTHONPATH's entries.
    sys.path[0:0] = [request["cwd"], *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    sys.argv = [request["module"], *request["args"]]
    code = 0
    try:
        runpy.run_module(request["module"], run_name="__main__", alter_sys=True)
    except SystemExit as e:
        if isinstance(e.code, int) or e.code is None:
            code = e.code or 0
        else:
            print(e.code, file=sys.stderr)
            code = 1
    except BaseException:
        traceback.print_exc()
        code = 1
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(code)


def client(argv: list[str]) -> int:
    """``warm.py MODULE ARGS``: the command run by this call's server, or as ``python -m`` where none answers. Its
    exit status is the command's (a command killed by a signal: this client too)."""
    module, args = argv[0], argv[1:]
    path = os.environ.get(SOCKET_VARIABLE)
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    try:
        if not path:
            raise OSError("no server")
        conn.connect(path)
    except OSError:
        conn.close()
        env = {k: v for k, v in os.environ.items() if k not in (VARIABLE, SOCKET_VARIABLE)}
        os.execve(sys.executable, [sys.executable, "-m", module, *args], env)
    request = {"module": module, "args": args, "cwd": os.getcwd(), "env": dict(os.environ)}
    socket.send_fds(conn, [json.dumps(request).encode()], [0, 1, 2])
    reply = conn.recv(64)
    code = int(reply) if reply else 1
    if code < 0:  # killed by a signal: so is this client, as the command's own interpreter would have been
        signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
    return code


if __name__ == "__main__":
    sys.exit(client(sys.argv[1:]))
