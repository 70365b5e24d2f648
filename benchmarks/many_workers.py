"""``make bench`` (many workers; issue 36): the plugin's TaskVine manager (its adapter, ``taskvine.Manager``, in this
process) with N local ``vine_worker`` processes on loopback (1 core, 50 MB of memory and 100 MB of disk each), for N
in ``--workers`` (default 100, 300, 1000): what grows with N.

For each N it reports: the time for all N workers to connect (started together, as a factory's cycle starts them);
the manager's memory (this process's resident set) idle with N workers and after the tasks; the dispatch of
``--tasks-per-worker`` x N empty tasks (``true``), each reading one of ``--inputs`` distinct small files that the
workers cache (so the files scheduler weighs which worker has which file): tasks a second and this process's CPU per
task; then, with a 60 s task on every worker (all busy), the time to stop all N together (``taskvine.stop_all``:
SIGTERM, SIGKILL after 30 s; then the manager is closed, which the plugin asks for before it stops them) and how many
are left. Stops with the reason at the first N this machine cannot hold (workers that do not connect within
``--connect-timeout``). Writes results/bench/many-workers.json.

With ``--via condor`` the N workers are HTCondor jobs of one ``vine_factory`` (the plugin's ``--taskvine-workers
condor``) on the sandbox's personal pool, which the bench widens for its run to advertise N + 4 cores (partitionable
slots may advertise more cores than the machine has: the workers are mostly idle) by writing the file that the
pool's ``HEPVINE_WIDER_POOL_CONFIG`` names and restarting the startd; it puts the pool back after. The same figures,
plus the time until the workers of its jobs have ended, and until the removed jobs have left the queue (the pool is
narrowed again only after).

Run it on the sandbox (``make run CMD='python benchmarks/many_workers.py'``); it needs no service but TaskVine, and
HTCondor with ``--via condor`` (``make bench`` runs both).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

from snakemake_executor_plugin_taskvine import taskvine

REPO = Path(__file__).resolve().parent.parent
SLOT_MEMORY_QUANTUM_MB = 128
WORKER_MEMORY_MB = 50
WORKER_DISK_MB = 100
QUEUE_EMPTY_TIMEOUT_S = 900  # in all, from the stop: 1,000 removed jobs took more than a minute to leave this pool


def rss_mb() -> float:
    """This process's resident memory now (MB)."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def task(i: int, files: list[Path], command: str) -> taskvine.TaskSpec:
    inputs = ((str(files[i % len(files)]), "input.dat"),) if files else ()
    return taskvine.TaskSpec(
        command=command, tag=f"t{i}", category="bench", cores=1, memory_mb=10, disk_mb=10, inputs=inputs
    )


def left_processes(groups: set[int]) -> list[str]:
    """'pid state command' of each process in one of the process GROUPS."""
    return sorted(f"{pid} {state} {name}" for pid, (name, _, group, state, _) in processes().items() if group in groups)


def processes(*names: str) -> dict[int, tuple[str, int, int, str, str]]:
    """The processes named one of NAMES (all, without NAMES) running now: pid -> (name, parent pid, process group,
    state, command line)."""
    found = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
            name = text[text.index("(") + 1 : text.rindex(")")]
            if names and name not in names:
                continue
            rest = text[text.rindex(")") + 2 :].split()
            cmdline = (stat.parent / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
        except OSError:
            continue
        found[int(stat.parent.name)] = (name, int(rest[1]), int(rest[2]), rest[0], cmdline)
    return found


STRAGGLER_AFTER_S = 15  # vine_workers still running this long after the stop are described in the row


def draining(since: float, timeout_s: float, before: set[int]) -> tuple[float | None, list[list], list[str]]:
    """(when no vine_worker of the run was left, or None after TIMEOUT_S from SINCE; how they went: [seconds after
    SINCE, vine_workers, condor_starters] at each second at which either count changed, the last one with no worker
    left; the vine_workers left STRAGGLER_AFTER_S after SINCE, 'pid parent(name) state command line'). Processes in
    BEFORE (running before the run began) are not the run's and are not counted."""
    samples: list[list] = []
    stragglers: list[str] = []
    while time.perf_counter() < since + timeout_s:
        now = time.perf_counter()
        found = {pid: p for pid, p in processes("vine_worker", "condor_starter").items() if pid not in before}
        workers = {pid: p for pid, p in found.items() if p[0] == "vine_worker"}
        counts = [len(workers), len(found) - len(workers)]
        if not samples or samples[-1][1:] != counts:
            samples.append([round(now - since, 1), *counts])
        if workers and not stragglers and now - since >= STRAGGLER_AFTER_S:
            parents = processes()
            stragglers = [
                f"{pid} {ppid}({parents.get(ppid, ('gone',))[0]}) {state} {cmdline[:120]}"
                for pid, (_, ppid, _, state, cmdline) in sorted(workers.items())
            ]
        if counts[0] == 0:
            return now, samples, stragglers
        time.sleep(max(0.0, 1 - (time.perf_counter() - now)))
    return None, samples, stragglers


def last_line(log: Path) -> str:
    lines = log.read_text(errors="replace").strip().splitlines() if log.exists() else []
    return lines[-1].split("]", 1)[-1].strip() if lines else "(no log)"


def pump(manager: taskvine.Manager, until, timeout_s: float) -> bool:
    """Let the manager work (accept workers, collect results) until UNTIL() holds or TIMEOUT_S pass."""
    deadline = time.monotonic() + timeout_s
    while not until():
        if time.monotonic() > deadline:
            return False
        manager.wait(1)
    return True


def condor(*argv: str) -> str:
    return subprocess.run(argv, capture_output=True, text=True, check=True, timeout=60).stdout


def pool_cores() -> int:
    """The cores the personal pool's partitionable slots advertise in all."""
    return sum(int(c) for c in condor("condor_status", "-af", "TotalSlotCpus").split())


def widen_pool(cores: int | None, timeout_s: float = 120) -> None:
    """Make the sandbox's pool advertise CORES cores (None: back to its own size) and wait until it does."""
    wider = Path(condor("condor_config_val", "HEPVINE_WIDER_POOL_CONFIG").strip())
    if cores is None:
        wider.unlink(missing_ok=True)
    else:  # 128 MB a core besides the pool's own 8 GB: a dynamic slot's memory is rounded up to 128 MB (HTCondor's
        # default MODIFY_REQUEST_EXPR_REQUESTMEMORY); at 64 MB a core only 216 of 300 worker jobs ever started. And
        # a worker's disk a core besides 8 GB: the pool advertises its execute directory's free space otherwise
        # (~50 GB here), room for fewer than 1,000 workers of WORKER_DISK_MB (663 started); the workers of this bench
        # write a few kB each, so advertising more than is free costs nothing (DISK is in kB).
        disk_kb = (8192 + WORKER_DISK_MB * cores) * 1024
        wider.write_text(f"NUM_CPUS = {cores}\nMEMORY = {8192 + SLOT_MEMORY_QUANTUM_MB * cores}\nDISK = {disk_kb}\n")
    # The master refuses to restart a startd that is already restarting (it waits 10 s before it starts it again).
    if not wait_until(
        lambda: subprocess.run(["condor_restart", "-daemon", "startd"], capture_output=True).returncode == 0, 60
    ):
        raise SystemExit("condor_restart -daemon startd was refused for 60 s")
    want = cores or int(condor("condor_config_val", "NUM_CPUS").strip())
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        time.sleep(2)
        try:
            if pool_cores() == want:
                return
        except subprocess.CalledProcessError:
            pass  # the startd is restarting
    raise SystemExit(f"the HTCondor pool did not come to {want} cores within {timeout_s:.0f} s")


def jobs_in_queue() -> int:
    """Jobs in the schedd's queue (the bench runs alone on the pool: its factory's)."""
    return len(condor("condor_q", "-af", "ClusterId").split())


def wait_until(condition, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(1)
    return True


def start_workers(via: str, n: int, manager: taskvine.Manager, password: Path, scratch: Path) -> list:
    """N local vine_workers, or one vine_factory keeping N HTCondor worker jobs."""
    if via == "condor":
        return [
            taskvine.Factory(
                batch_type="condor",
                manager_host="127.0.0.1",
                manager_port=manager.port,
                scratch_dir=scratch / "factory",
                log=scratch / "factory.log",
                password_file=password,
                min_workers=n,
                max_workers=n,
                cores=1,
                memory_mb=WORKER_MEMORY_MB,
                disk_mb=WORKER_DISK_MB,
                # Idle workers leave after this; all N must connect first (~0.7 a second on this machine's pool).
                worker_timeout_s=1200,
            )
        ]
    return [
        taskvine.Worker(
            manager_host="127.0.0.1",
            manager_port=manager.port,
            workspace=scratch / f"w{k}",
            password_file=password,
            cores=1,
            memory_mb=WORKER_MEMORY_MB,
            disk_mb=WORKER_DISK_MB,
        )
        for k in range(n)
    ]


def one_n(
    via: str,
    n: int,
    tasks_per_worker: int,
    inputs: int,
    connect_timeout_s: float,
    scratch: Path,
    queue_wait_s: float = QUEUE_EMPTY_TIMEOUT_S,
) -> dict:
    files = []
    for k in range(inputs):
        files.append(scratch / f"input-{k}.dat")
        files[-1].write_bytes(os.urandom(4096))
    password = taskvine.write_password_file(scratch)
    manager = taskvine.Manager(port=0, password_file=password, run_info_dir=scratch / "run-info")
    row: dict = {"via": via, "workers": n}
    workers = []
    before = set(processes("vine_worker", "condor_starter"))  # not the run's: left by something else
    try:
        began = time.perf_counter()
        workers = start_workers(via, n, manager, password, scratch)
        row["spawn_s"] = round(time.perf_counter() - began, 2)

        def alive() -> int:
            if via == "condor":  # the factory replaces a worker job that ends
                return n
            return sum(w.proc.poll() is None for w in workers)

        # All that still run: a vine_worker may die at its start (cctools: "unable to find a port to start a
        # transfer server"), which a factory would replace; counted and said.
        connected = pump(manager, lambda: manager.workers_connected() >= max(1, alive()), connect_timeout_s)
        row["connect_s"] = round(time.perf_counter() - began, 2)
        row["connected"] = manager.workers_connected()
        died = [w for w in workers if w.proc.poll() is not None and via == "local"]
        if died:
            row["died_at_start"] = len(died)
            row["why"] = sorted({last_line(w.log) for w in died})
        if not connected:
            row["stopped_because"] = (
                f"only {row['connected']} of {n} workers connected within {connect_timeout_s:.0f} s"
            )
            return row
        n = row["connected"]
        row["manager_rss_idle_mb"] = round(rss_mb(), 1)

        count = tasks_per_worker * n
        cpu0, wall0 = time.process_time(), time.perf_counter()
        for i in range(count):
            manager.submit(task(i, files, "true"))
        done = failed = 0
        deadline = time.monotonic() + 600
        while done < count and time.monotonic() < deadline:
            result = manager.wait(1)
            if result is not None:
                done += 1
                failed += not result.successful
        wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
        row.update(
            tasks=count,
            tasks_done=done,
            tasks_failed=failed,
            tasks_per_s=round(done / wall, 1),
            cpu_ms_per_task=round(1e3 * cpu / max(done, 1), 3),
            manager_rss_after_mb=round(rss_mb(), 1),
        )

        busy = [manager.submit(task(count + k, [], "sleep 60")) for k in range(n)]
        pump(manager, lambda: sum(not manager.is_waiting(t) for t in busy) >= n, 120)
        row["busy_when_stopped"] = sum(not manager.is_waiting(t) for t in busy)
    finally:
        print(json.dumps(row), flush=True)  # before the teardown, whatever it takes
        stop0 = time.perf_counter()
        taskvine.stop_all(workers)
        manager.close()  # what it provisioned, then its manager (the plugin overlaps the two)
        row["stop_s"] = round(time.perf_counter() - stop0, 2)
        time.sleep(2)  # what the last SIGTERM reached has ended by now
        row["left_running"] = taskvine.still_running(workers)
        if row["left_running"]:
            row["left"] = left_processes({w.proc.pid for w in workers})
        print(f"{n} workers ({via}) stopped in {row['stop_s']} s; left running: {row['left_running']}", flush=True)
        if via == "condor":  # the factory's stop removed its jobs: their workers end as HTCondor kills them, and the
            # schedd lets the jobs go one shadow at a time; the pool is narrowed again only after (a startd restarted
            # under live shadows leaves them waiting for their starters until the job lease runs out)
            ended, row["left_after_stop"], row["stragglers"] = draining(stop0, queue_wait_s, before)
            row["workers_ended_s"] = round(ended - stop0, 2) if ended is not None else None
            gone = wait_until(lambda: jobs_in_queue() == 0, stop0 + queue_wait_s - time.perf_counter())
            row["jobs_left_in_queue"] = jobs_in_queue()
            row["queue_empty_s"] = round(time.perf_counter() - stop0, 2) if gone else None
            print(
                f"workers ended after {row['workers_ended_s']} s, queue empty after {row['queue_empty_s']} s",
                flush=True,
            )
    return row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", default="100,300,1000", help="numbers of workers, comma-separated")
    parser.add_argument(
        "--via", choices=("local", "condor"), default="local", help="local vine_workers, or HTCondor jobs of a factory"
    )
    parser.add_argument("--tasks-per-worker", type=int, default=5, help="empty tasks dispatched per worker")
    parser.add_argument("--inputs", type=int, default=100, help="distinct small input files the tasks read")
    parser.add_argument("--connect-timeout", type=float, default=300, help="seconds for all workers to connect")
    parser.add_argument(
        "--queue-wait",
        type=float,
        default=QUEUE_EMPTY_TIMEOUT_S,
        help="with --via condor: seconds from the stop to wait for the workers to end and the queue to empty",
    )
    parser.add_argument("--output", type=Path, help="where the table goes (results/bench/many-workers[-condor].json)")
    args = parser.parse_args(argv)
    suffix = "" if args.via == "local" else f"-{args.via}"
    args.output = args.output or REPO / "results" / "bench" / f"many-workers{suffix}.json"
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)  # a socket per worker, and the workers' log files
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    scratch = args.output.with_suffix(".logs")
    shutil.rmtree(scratch, ignore_errors=True)
    rows = []
    if args.via == "condor" and Path(condor("condor_config_val", "HEPVINE_WIDER_POOL_CONFIG").strip()).exists():
        widen_pool(None)  # left widened by a run that crashed
    if args.via == "condor" and jobs_in_queue():
        raise SystemExit("the HTCondor queue is not empty: this bench counts the jobs it leaves, so it runs alone")
    for n in (int(x) for x in args.workers.split(",")):
        run_dir = scratch / str(n)
        run_dir.mkdir(parents=True)
        if args.via == "condor":
            widen_pool(n + 4)
        try:
            rows.append(
                one_n(args.via, n, args.tasks_per_worker, args.inputs, args.connect_timeout, run_dir, args.queue_wait)
            )
        finally:
            if args.via == "condor":
                widen_pool(None)
        if "stopped_because" in rows[-1]:
            print(f"stopped at {n} workers: {rows[-1]['stopped_because']}; their logs are in {run_dir}")
            break
        for log in run_dir.glob("run-info/*/vine-logs/transactions"):  # what each worker did, kept
            shutil.copyfile(log, scratch / f"{n}-transactions")
        shutil.rmtree(run_dir, ignore_errors=True)  # N workspaces
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(
        json.dumps(
            {"when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "open_files": [soft, hard], "rows": rows},
            indent=1,
        )
        + "\n"
    )
    print(f"written {args.output}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
