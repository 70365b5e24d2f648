"""``warm``, the server a library call starts for its warm commands, run here as a call runs it (a process of one
thread that starts it, then commands through its client): a command killed by a signal (SIGTERM, SIGKILL) kills its
client with the same signal, as its own interpreter's death would show; a command that cannot start (its working
directory closed to it) fails with why; a client that ends (its job killed) ends its command, and so does the server's
stop; the server refuses to start in a process that runs threads; once stopped, a client runs the command cold."""

from __future__ import annotations

import subprocess
import sys
import textwrap

# Each script's start: what it imports, its directory (its first argument) and a module `sleeper PIDFILE SECONDS
# HOW` that writes its pid, sleeps, then is killed (HOW: term, kill) or exits with status HOW.
PREAMBLE = textwrap.dedent(
    """
    import os, signal, subprocess, sys, threading, time
    from pathlib import Path
    from snakemake_executor_plugin_taskvine import warm

    here = Path(sys.argv[1])
    (here / "sleeper.py").write_text(
        "import os, signal, sys, time\\n"
        "open(sys.argv[1], 'w').write(str(os.getpid()))\\n"
        "time.sleep(float(sys.argv[2]))\\n"
        "sig = {'term': signal.SIGTERM, 'kill': signal.SIGKILL}.get(sys.argv[3])\\n"
        "os.kill(os.getpid(), sig) if sig else sys.exit(int(sys.argv[3]))\\n"
    )

    def ended(pid):
        for _ in range(100):
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                return "ended"
            time.sleep(0.05)
        return f"left running ({pid})"
    """
)


def said_by(script: str, directory, timeout_s: float = 120) -> list[str]:
    """What SCRIPT (run in an interpreter of its own, as a call or the executor, in DIRECTORY) printed, line by line;
    it must succeed within TIMEOUT_S."""
    done = subprocess.run(
        [sys.executable, "-c", script, str(directory)], capture_output=True, text=True, timeout=timeout_s, cwd=directory
    )
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    return done.stdout.splitlines()


CALL = PREAMBLE + textwrap.dedent(
    """
    server = warm.start()
    client = os.environ[warm.VARIABLE].split()

    # Killed by SIGTERM, by SIGKILL: so is the client.
    done = subprocess.run([*client, "sleeper", str(here / "a.pid"), "0", "term"], cwd=here)
    print("term", done.returncode)
    done = subprocess.run([*client, "sleeper", str(here / "a.pid"), "0", "kill"], cwd=here)
    print("kill", done.returncode)

    # A command that cannot start: the server may not enter its working directory (closed after the client's cd).
    closed = here / "closed"
    closed.mkdir()
    starting = subprocess.Popen(
        ["sh", "-c", f"cd {closed} && chmod 000 {closed} && exec " + " ".join(client) + " sleeper x 0 0"],
        stderr=subprocess.PIPE, text=True,
    )
    print("closed", starting.wait(), "PermissionError" in starting.stderr.read())
    closed.chmod(0o755)

    def long_command(name):  # a command of a minute through the client: (the client, its pid once started)
        running = subprocess.Popen([*client, "sleeper", str(here / name), "60", "0"], cwd=here)
        while not (here / name).exists() or not (here / name).read_text():
            time.sleep(0.05)
        return running, int((here / name).read_text())

    # The client killed: its command ends too.
    running, command = long_command("b.pid")
    running.kill()
    running.wait()
    print("after client killed:", ended(command))

    # The server stopped while a command runs: the command ends too.
    running, command = long_command("d.pid")
    warm.stop(server)
    print("after stop:", ended(command))
    running.wait()
    assert warm.VARIABLE not in os.environ
    # No server: the same command, cold (`python -m`), its exit status.
    cold = subprocess.Popen([sys.executable, warm.__file__, "sleeper", str(here / "c.pid"), "0", "5"], cwd=here)
    print("cold", cold.wait(), int((here / "c.pid").read_text()) == cold.pid)

    threading.Thread(target=time.sleep, args=(1,)).start()
    print("with threads", warm.start())
    """
)


def test_warm_commands_exit_status_signals_and_lifetime(tmp_path):
    assert said_by(CALL, tmp_path) == [
        "term -15",
        "kill -9",
        "closed 1 True",
        "after client killed: ended",
        "after stop: ended",
        "cold 5 True",
        "with threads None",
    ]


NODE = PREAMBLE + textwrap.dedent(
    """
    (here / "probe.py").write_text(
        "import os, sys, time\\n"
        "time.sleep(float(sys.argv[2]))\\n"
        "mine = os.path.dirname(os.path.realpath(sys.argv[3]))\\n"
        "foreign = any(os.path.realpath(p or '.') in (mine, sys.argv[4]) for p in sys.path)\\n"
        "said = ('slow' in sys.modules, sys.path[0], foreign)\\n"
        "open(sys.argv[1], 'w').write(repr(said))\\n"
    )
    # The server's own PYTHONPATH: a module that takes a second to import, and one that ends its importer.
    (here / "server-path").mkdir()
    (here / "server-path" / "slow.py").write_text("import time\\ntime.sleep(1)\\n")
    (here / "server-path" / "dies.py").write_text("import os\\nos._exit(3)\\n")
    (here / "server-path" / "again").mkdir()
    (here / "server-path" / "again" / "__init__.py").write_text("")
    (here / "server-path" / "again" / "run.py").write_text("import sys\\nprint(__name__, file=sys.stderr)\\n")
    threading.Thread(target=time.sleep, args=(30,), daemon=True).start()  # as the executor's process runs threads
    os.environ["PYTHONPATH"] = str(here / "server-path")
    server = warm.serve(["xml.dom.minidom", "no_such_module_here", "slow", "again.run"], str(here / "server.log"))
    del os.environ["PYTHONPATH"]
    client = os.environ[warm.VARIABLE].split()
    foreign = [warm.__file__, str(here / "server-path")]  # (what the command's path must not hold)

    # Two commands side by side, sent while the server still imports: each waits for the imports, then runs as
    # python -m runs it (its working directory first on its path; neither the plugin's directory nor the server's
    # PYTHONPATH on it), with the preloaded modules imported.
    began = time.monotonic()
    both = [subprocess.Popen([*client, "probe", str(here / f"{i}.out"), "2", *foreign], cwd=here) for i in range(2)]
    print("codes", [p.wait() for p in both], "side by side", time.monotonic() - began < 4.5)
    print("said", {(here / f"{i}.out").read_text() for i in range(2)} == {repr((True, str(here), False))})

    # A preloaded module run as the command: run again, as __main__, as python -m runs it (no warning of runpy's).
    env = {**os.environ, "PYTHONPATH": str(here / "server-path")}
    again = subprocess.run([*client, "again.run"], cwd=here, capture_output=True, text=True, env=env)
    print("again", repr(again.stderr))

    # Stopped while a command runs: the command ends too, and the variables are gone.
    running = subprocess.Popen([*client, "sleeper", str(here / "s.pid"), "60", "0"], cwd=here)
    while not (here / "s.pid").exists() or not (here / "s.pid").read_text():
        time.sleep(0.05)
    warm.stop(server)
    print("after stop:", ended(int((here / "s.pid").read_text())), warm.VARIABLE in os.environ)
    running.wait()
    print("log", "no_such_module_here not imported: ModuleNotFoundError" in (here / "server.log").read_text())

    # A server that ends while a command waits for it (a preloaded module ends its importer): the command runs cold.
    os.environ["PYTHONPATH"] = str(here / "server-path")
    server = warm.serve(["slow", "dies"], str(here / "server.log"))
    del os.environ["PYTHONPATH"]
    client = os.environ[warm.VARIABLE].split()
    done = subprocess.run([*client, "probe", str(here / "c.out"), "0", *foreign], cwd=here)
    print("cold", done.returncode, (here / "c.out").read_text())
    warm.stop(server)
    """
)

# The executor's process killed (no stop) while a command runs: the server, its minder and the command end, and the
# server's directory is removed.
ORPHAN = PREAMBLE + textwrap.dedent(
    """
    server = warm.serve([], str(here / "server.log"))
    client = subprocess.Popen([*os.environ[warm.VARIABLE].split(), "sleeper", str(here / "s.pid"), "60", "0"], cwd=here)
    while not (here / "s.pid").exists() or not (here / "s.pid").read_text():
        time.sleep(0.05)
    print(server[0], (here / "s.pid").read_text(), os.environ[warm.SOCKET_VARIABLE], flush=True)
    os.kill(os.getpid(), 9)
    """
)


def test_the_nodes_server_runs_commands_side_by_side_warm_and_ends_with_the_run(tmp_path):
    assert said_by(NODE, tmp_path) == [
        "codes [0, 0] side by side True",
        "said True",
        "again '__main__\\n'",
        "after stop: ended False",
        "log True",
        f"cold 0 (False, {str(tmp_path)!r}, False)",
    ]


def test_the_nodes_server_ends_when_the_process_that_started_it_is_killed(tmp_path):
    import time
    from pathlib import Path

    done = subprocess.run([sys.executable, "-c", ORPHAN, str(tmp_path)], capture_output=True, text=True, timeout=60)
    assert done.returncode == -9, done.stderr[-3000:]
    server, command, socket_path = done.stdout.split()

    def gone(pid: str) -> bool:
        for _ in range(100):
            try:
                with open(f"/proc/{pid}/stat") as f:
                    if f.read().rsplit(")", 1)[1].split()[0] == "Z":  # ended, not yet collected
                        return True
            except FileNotFoundError:
                return True
            time.sleep(0.05)
        return False

    assert gone(server) and gone(command), (server, command)
    assert not Path(socket_path).parent.exists()


def test_nothing_the_plugin_starts_for_workers_is_given_the_nodes_server():
    from snakemake_executor_plugin_taskvine import taskvine, warm

    environ = {warm.VARIABLE: "python warm.py", warm.SOCKET_VARIABLE: "/tmp/vine-warm-x/s", "KEPT": "1"}
    assert taskvine.allowed_environment(["*"], environ) == {"KEPT": "1"}
    assert taskvine.allowed_environment(["TASKVINE_*"], environ) == {}


# A server that takes a command's request and ends without starting it (a minder that could not fork).
UNSTARTED = textwrap.dedent(
    """
    import os, socket, subprocess, sys, threading
    from pathlib import Path
    from snakemake_executor_plugin_taskvine import warm

    here = Path(sys.argv[1])
    (here / "hello.py").write_text("import sys\\nopen(sys.argv[1], 'w').write('ran')\\n")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    listener.bind(str(here / "s"))
    listener.listen()

    def take_and_drop():
        conn, _ = listener.accept()
        socket.recv_fds(conn, 1 << 22, 3)
        conn.close()

    threading.Thread(target=take_and_drop).start()
    env = {**os.environ, warm.SOCKET_VARIABLE: str(here / "s")}
    done = subprocess.run([sys.executable, warm.__file__, "hello", str(here / "out")], cwd=here, env=env)
    print(done.returncode, (here / "out").read_text())
    """
)


def test_a_command_the_server_took_but_did_not_start_runs_cold(tmp_path):
    assert said_by(UNSTARTED, tmp_path, timeout_s=60) == ["0 ran"]


# A kept worker's library server (serve_library), with this script as the worker and its first library: a library
# (a stand-in: it says whether it has the first library's module `marker` imported and leads its own group, echoes a
# line from its worker, then, told to, forks a call and says both pids) started through warm.py's client, as its
# worker starts it.
LIBRARY = PREAMBLE + textwrap.dedent(
    """
    (here / "modules").mkdir()
    (here / "modules" / "marker.py").write_text("")
    (here / "sandbox").mkdir()  # the first library's own (TaskVine's script is there)
    (here / "sandbox" / "own.py").write_text("")
    (here / "library.py").write_text(
        "import os, sys, time\\n"
        "args = sys.argv[1:]\\n"
        "pipe_in, pipe_out = (int(args[args.index(o) + 1]) for o in ('--in-pipe-fd', '--out-pipe-fd'))\\n"
        "said = ('marker' in sys.modules, os.getpgid(0) == os.getpid(), sys.path[0] == os.getcwd())\\n"
        "os.write(pipe_out, repr(said).encode() + b'\\\\n')\\n"
        "line = os.read(pipe_in, 100)\\n"
        "if line == b'call\\\\n':\\n"
        "    call = os.fork()\\n"
        "    if call == 0:\\n"
        "        time.sleep(60)\\n"
        "    line = f'{os.getpid()} {call}\\\\n'.encode()\\n"
        "os.write(pipe_out, line)\\n"
        "time.sleep(60 if b' ' in line else 0)\\n"
    )
    sys.path[0:0] = [str(here / "modules"), str(here / "sandbox")]
    import marker, own

    def library(worker, line=b"hello\\n"):  # (the library's process as its worker started it, what it said)
        to_library, library_in = os.pipe()
        library_out, from_library = os.pipe()
        args = ["--in-pipe-fd", str(to_library), "--out-pipe-fd", str(from_library), "--worker-pid", str(worker)]
        started = subprocess.Popen(
            [sys.executable, warm.__file__, warm.LIBRARY, "library.py", *args],
            cwd=here,
            pass_fds=(to_library, from_library),
        )
        os.close(to_library)
        os.close(from_library)
        with os.fdopen(library_out) as said:
            first = said.readline().strip()
            os.write(library_in, line)
            return started, first, said.readline().strip()

    def gone(pid):  # (ended: no such process, or one that waits to be collected)
        for _ in range(100):
            try:
                if Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z":
                    return True
            except FileNotFoundError:
                return True
            time.sleep(0.05)
        return False

    me = os.getpid()
    os.chdir(here / "sandbox")
    pipes = os.pipe()  # (as the first library's to its worker)
    server = warm.serve_library(["--in-pipe-fd", str(pipes[0]), "--worker-pid", str(me)])
    os.chdir(here)
    print("again", warm.serve_library(["--worker-pid", str(me)]))
    # Its standard descriptors, its socket and its worker's pidfd: nothing of the library's. Counted once it has
    # closed the connection the probe above made (it holds it until it reads its end; up to 5 s).
    for _ in range(100):
        descriptors = len(os.listdir(f"/proc/{server}/fd"))
        if descriptors <= 5:
            break
        time.sleep(0.05)
    print("descriptors", descriptors, os.getppid() != server)
    os.utime(here / "sandbox" / "own.py", ns=(0, 0))  # (the next library's script, rewritten: not a change)
    started, first, echoed = library(me)
    print("forked", first, echoed, started.wait())

    # Its client killed (as its worker kills a library when its manager leaves): the library and its call end.
    started, first, echoed = library(me, b"call\\n")
    started.kill()
    started.wait()
    print("killed", first, [gone(int(pid)) for pid in echoed.split()])

    # A module the server imported changes: the library runs cold, and the server ends.
    os.utime(here / "modules" / "marker.py", ns=(0, 0))
    started, first, echoed = library(me)
    print("changed", first, echoed, started.wait(), gone(server), os.path.exists(warm.library_socket(me)))

    # A server ends with its worker, and leaves no socket.
    worker = subprocess.Popen(["sleep", "60"])
    server = warm.serve_library(["--worker-pid", str(worker.pid)])
    worker.kill()
    print("worker ended", gone(server), os.path.exists(warm.library_socket(worker.pid)))
    worker.wait()

    threading.Thread(target=time.sleep, args=(1,)).start()
    print("with threads", warm.serve_library(["--worker-pid", str(me)]))
    """
)


def test_a_kept_workers_libraries_are_forked_from_its_first_librarys_imports(tmp_path):
    assert said_by(LIBRARY, tmp_path) == [
        "again None",
        "descriptors 5 True",
        "forked (True, True, True) hello 0",
        "killed (True, True, True) [True, True]",
        "changed (False, False, True) hello 0 True False",
        "worker ended True False",
        "with threads None",
    ]
