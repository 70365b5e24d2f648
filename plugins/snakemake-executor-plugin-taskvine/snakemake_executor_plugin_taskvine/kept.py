"""Workers kept between commands (``--taskvine-keep-workers-s N``): what one command leaves for the next one run in the
same working directory, and how the next one finds it.

A command that keeps its workers leaves its factories running (each ends, removing its workers, once it has seen no
manager for a little longer than N s: taskvine.KEPT_FACTORY_SLACK_S) and its workers connecting again every second (each
ends after N s without a manager), and writes down in a directory of this user's own (mode 0700, under
``$XDG_STATE_HOME``, else ``~/.local/state``; one per working directory) the manager's port, the password the workers
present, and each factory's pid, start time and HTCondor job tag, beside a fingerprint of everything the factories were
started with. The next command that keeps workers takes that directory's lock for its whole run (a second command at the
same time keeps nothing and starts its own workers), listens on the same port with the same password, and adopts the
factories if the fingerprint is its own, each factory still runs and their time is not nearly up; else it stops them and
starts its own. A command that does not keep workers stops any that an earlier one kept, and so does ``python -m
snakemake_executor_plugin_taskvine stop-kept [WORKDIR]`` (default: the working directory) at once.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import stat
import time
from dataclasses import dataclass
from pathlib import Path

from .taskvine import Factory, start_time, stop_all, write_password_file

STATE = "state.json"
LOCK = "lock"
PASSWORD = "vine.password"
ADOPT_MARGIN_S = 5  # kept workers whose time is up within this are not taken: they may be leaving


def state_home() -> Path:
    """Where this user's kept workers are written down: $XDG_STATE_HOME, else ~/.local/state, in a directory of the
    plugin's name."""
    base = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    return Path(base) / "snakemake-executor-plugin-taskvine"


def directory_for(workdir: str) -> Path:
    """The directory of the workers kept for the workflow run in WORKDIR."""
    return state_home() / "kept" / hashlib.sha256(os.path.abspath(workdir).encode()).hexdigest()[:16]


def fingerprint(value) -> str:
    """A digest of VALUE (JSON-able): what the factories were started with."""
    return hashlib.sha256(json.dumps(value, sort_keys=True, default=str).encode()).hexdigest()


@dataclass
class Record:
    """A kept factory as written down: its worker group, pid, start time and HTCondor job tag (None: local)."""

    group: str
    pid: int
    started: int
    tag: str | None


class Kept:
    """The kept workers' directory of one working directory, locked by this command for its whole run."""

    def __init__(self, directory: Path, lock_fd: int):
        self.directory = directory
        self._lock_fd = lock_fd
        self._read()

    @classmethod
    def claim(cls, workdir: str) -> Kept | None:
        """The kept workers' directory of WORKDIR, made if missing and locked; None while another command holds it.
        Raises OSError when it cannot be made or is not this user's alone."""
        directory = directory_for(workdir)
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        info = directory.lstat()
        if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid() or info.st_mode & 0o077:
            raise PermissionError(f"{directory} must be a directory of this user's only (mode 0700)")
        fd = os.open(directory / LOCK, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return None
        return cls(directory, fd)

    def _read(self) -> None:
        """What the last command wrote down: the manager's port, the fingerprint of the factories' settings, the
        factories, and when that command ended (0: it never said so: it was killed) and for how long it kept them."""
        try:
            state = json.loads((self.directory / STATE).read_text())
            self.port = int(state["port"])
            self.fingerprint = str(state["fingerprint"])
            self.records = [Record(**r) for r in state["factories"]]
            self.ended, self.keep_s = float(state["ended"]), int(state["keep_s"])
        except (OSError, ValueError, KeyError, TypeError):  # none yet, or torn: nothing to adopt
            self.port, self.fingerprint, self.records, self.ended, self.keep_s = 0, "", [], 0.0, 0

    def alive(self) -> bool:
        """Whether every factory written down still runs (as the same process)."""
        return bool(self.records) and all(start_time(r.pid) == r.started for r in self.records)

    def adoptable(self, wanted: str, now: float | None = None) -> bool:
        """Whether this command may take the kept factories as its own: started with what it would start them with
        (WANTED, a fingerprint), all still running, and kept by a command that ended ADOPT_MARGIN_S or more before
        their time was up (a factory never ends before it: KEPT_FACTORY_SLACK_S)."""
        now = time.time() if now is None else now
        fresh = self.ended > 0 and now < self.ended + self.keep_s - ADOPT_MARGIN_S
        return self.fingerprint == wanted and fresh and self.alive()

    def password_file(self) -> Path:
        """The password that the kept workers present: kept while they are; a fresh one otherwise."""
        path = self.directory / PASSWORD
        if path.exists() and self.alive():
            return path
        path.unlink(missing_ok=True)
        return write_password_file(self.directory)

    def factory_scratch(self, group: str) -> Path:
        """Where the kept factory of worker group GROUP works (the same for every command: its arguments name it)."""
        return self.directory / "factory" / group

    def save(self, port: int, wanted: str, records: list[Record]) -> None:
        """Write down the port, the fingerprint WANTED and the factories' RECORDS of a run that holds them now."""
        self.port, self.fingerprint, self.records, self.ended, self.keep_s = port, wanted, records, 0.0, 0
        self._write()

    def keep(self, keep_s: int) -> None:
        """Write down that the run has ended now and keeps its workers KEEP_S seconds."""
        self.ended, self.keep_s = time.time(), keep_s
        self._write()

    def _write(self) -> None:
        """Replace the state whole (a reader never sees half of it)."""
        state = {
            "port": self.port,
            "fingerprint": self.fingerprint,
            "factories": [r.__dict__ for r in self.records],
            "ended": self.ended,
            "keep_s": self.keep_s,
        }
        temporary = self.directory / f".{STATE}.{os.getpid()}"
        temporary.write_text(json.dumps(state))
        temporary.replace(self.directory / STATE)

    def stop(self) -> None:
        """Stop the factories written down (and so their workers), those that still run, and forget them."""
        stop_all([Factory.adopted(r.pid, r.started, r.tag) for r in self.records])
        self.forget()

    def forget(self) -> None:
        """Nothing kept any more (the password stays until the next command that keeps workers makes a new one: this
        one's manager may still read it; the lock stays with this command)."""
        self.port, self.fingerprint, self.records, self.ended, self.keep_s = 0, "", [], 0.0, 0
        (self.directory / STATE).unlink(missing_ok=True)

    def release(self) -> None:
        """Let the next command claim the directory (also done by this process's end)."""
        if self._lock_fd >= 0:
            os.close(self._lock_fd)
            self._lock_fd = -1


def main(argv: list[str] | None = None) -> int:
    """``python -m snakemake_executor_plugin_taskvine stop-kept [WORKDIR]``: stop the workers kept for WORKDIR now."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m snakemake_executor_plugin_taskvine", description=main.__doc__)
    parser.add_argument("action", choices=["stop-kept"])
    parser.add_argument("workdir", nargs="?", default=os.curdir, help="the workflow's working directory (default: .)")
    args = parser.parse_args(argv)
    if not directory_for(args.workdir).exists():
        print(f"no workers are kept for {os.path.abspath(args.workdir)}")
        return 0
    kept = Kept.claim(args.workdir)
    if kept is None:
        print(f"a command in {os.path.abspath(args.workdir)} runs now and holds its kept workers: stop it first")
        return 1
    stopped = sum(start_time(r.pid) == r.started for r in kept.records)
    kept.stop()
    print(f"stopped {stopped} factories of kept workers (and their workers) for {os.path.abspath(args.workdir)}")
    return 0
