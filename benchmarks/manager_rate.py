"""``make bench`` (manager part; issue 12 item 5): how fast the plugin's TaskVine manager dispatches with thousands
of tasks queued, the question behind ``--taskvine-max-tasks`` (cctools #3957: ~12,000 ready tasks stalled a manager
for 10 minutes).

For each queue depth D it starts a manager (the plugin's own adapter, ``taskvine.Manager``: the files scheduler, a
password, the loopback catalog, as in a campaign) and local workers, submits D tasks, and keeps D of them queued by
submitting one more each time one ends (what the plugin's queue does with ``--taskvine-max-tasks D``) until a window
of completions has passed. Each task has an environment file, like a campaign's jobs; runs go over the combinations
of ``--inputs`` (how many distinct input files the tasks read, for the files scheduler to weigh) and ``--task-s``
(0: the task does nothing, so the rate is the manager's and the workers' overhead; a sleep fills the workers, so the
manager holds ready tasks it cannot place: the case of cctools #3957). It reports, per run: the time and this
process's CPU to submit the first D, the completion rate over the window, this process's CPU per task in the window
(the manager is in-process: TaskVine's C library and the adapter), and the time to cancel the D still queued at the
end (Ctrl-C). Writes results/bench/manager-rate.json (and the runs' logs beside it).

Run it on the sandbox (``make run CMD='python benchmarks/manager_rate.py'``); it needs no service but TaskVine.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path

from snakemake_executor_plugin_taskvine import taskvine

REPO = Path(__file__).resolve().parent.parent
WARMUP = 100  # completions before the window opens: workers connected, caches of the task's sandbox warm


def spec(i: int, inputs: list[Path], task_s: float) -> taskvine.TaskSpec:
    """Task I: like a campaign's job, an environment file (one for all) and, with INPUTS, one of those files (each
    sent to a worker once and cached there), so that the files scheduler has inputs to weigh."""
    files = ((str(inputs[i % len(inputs)]), "input.dat"),) if inputs else ()
    command = f"sleep {task_s}" if task_s else "true"
    return taskvine.TaskSpec(
        command=command,
        tag=f"t{i}",
        category="noop",
        cores=1,
        memory_mb=10,
        disk_mb=10,
        env={"HEPVINE_BENCH": "1"},
        inputs=files,
    )


def depth_run(
    depth: int, window: int, workers: int, cores: int, inputs: int, task_s: float, scratch: Path, timeout_s: float
) -> dict:
    """One manager with DEPTH tasks kept queued, WORKERS local workers of CORES cores, over WINDOW completions; the
    tasks read INPUTS distinct files and take TASK_S seconds each."""
    files = []
    for k in range(inputs):
        files.append(scratch / f"input-{k}.dat")
        files[-1].write_bytes(b"x" * 4096)
    password = taskvine.write_password_file(scratch)
    manager = taskvine.Manager(port=0, password_file=password, run_info_dir=scratch / "run-info")
    started = []
    try:
        cpu0, wall0 = time.process_time(), time.perf_counter()
        live = {manager.submit(spec(i, files, task_s)) for i in range(depth)}
        submitted = depth
        submit_wall, submit_cpu = time.perf_counter() - wall0, time.process_time() - cpu0
        started = [
            taskvine.Worker(
                manager_host="127.0.0.1",
                manager_port=manager.port,
                workspace=scratch / f"w{k}",
                password_file=password,
                cores=cores,
                memory_mb=1000,
                disk_mb=2000,
            )
            for k in range(workers)
        ]
        done = failed = 0
        window_start = None
        deadline = time.monotonic() + timeout_s
        while done < WARMUP + window and time.monotonic() < deadline:
            result = manager.wait(1)
            if result is None:
                continue
            live.discard(result.task_id)
            done += 1
            failed += not result.successful
            live.add(manager.submit(spec(submitted, files, task_s)))
            submitted += 1
            if done == WARMUP:
                window_start = (time.perf_counter(), time.process_time())
        if window_start is None or done < WARMUP + window:
            raise SystemExit(
                f"depth {depth}: only {done} of {WARMUP + window} tasks ended within {timeout_s:.0f} s; "
                f"worker logs under {scratch}"
            )
        if failed:  # failed tasks end quickly: their rate would look like dispatch
            raise SystemExit(f"depth {depth}: {failed} of {done} tasks failed; worker logs under {scratch}")
        wall, cpu = time.perf_counter() - window_start[0], time.process_time() - window_start[1]
        queued = sum(manager.is_waiting(t) for t in live)
        cancel0 = time.perf_counter()
        for task_id in live:
            manager.cancel(task_id)
        cancel_s = time.perf_counter() - cancel0
        row = {
            "depth": depth,
            "inputs": inputs,
            "task_s": task_s,
            "workers": workers,
            "worker_cores": cores,
            "window_tasks": window,
            "submit_s": round(submit_wall, 3),
            "submit_cpu_ms_per_task": round(1e3 * submit_cpu / depth, 3),
            "tasks_per_s": round(window / wall, 1),
            "cpu_ms_per_task": round(1e3 * cpu / window, 2),
            "queued_at_end": queued,
            "cancel_s": round(cancel_s, 3),
        }
        print(json.dumps(row), flush=True)  # before the teardown, whatever it takes
    finally:
        stop0 = time.perf_counter()
        taskvine.stop_all(started)
        stop_s = time.perf_counter() - stop0
    time.sleep(2)  # what the last SIGTERM reached has ended by now
    left = taskvine.still_running(started)
    print(f"depth {depth}: {len(started)} workers stopped in {stop_s:.1f} s; left running: {left}", flush=True)
    return {**row, "stop_s": round(stop_s, 2), "left_running": left}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--depths",
        default="100,1000,3000,10000,30000",
        help="queue depths to measure, comma-separated (tasks kept queued at the manager)",
    )
    parser.add_argument("--window", type=int, default=1000, help="completions measured at each depth")
    parser.add_argument("--workers", type=int, default=2, help="local vine_worker processes")
    parser.add_argument(
        "--worker-cores",
        type=int,
        default=4,
        help="cores each worker offers (the tasks do nothing, so more than the machine's is fine)",
    )
    parser.add_argument(
        "--inputs",
        default="0,100",
        help="runs over: how many distinct input files the tasks read (0: none), comma-separated",
    )
    parser.add_argument(
        "--task-s",
        default="0,0.1",
        help="runs over: seconds each task sleeps (0: it does nothing), comma-separated; with a sleep "
        "the workers are full and the manager holds ready tasks it cannot place (cctools #3957)",
    )
    parser.add_argument("--timeout", type=float, default=900, help="seconds one depth may take at most")
    parser.add_argument("--output", type=Path, default=REPO / "results" / "bench" / "manager-rate.json")
    args = parser.parse_args(argv)
    rows = []
    # Each run's workers and TaskVine logs, kept for a look (the managers write theirs as the process ends).
    scratch = args.output.with_suffix(".logs")
    shutil.rmtree(scratch, ignore_errors=True)
    runs = [
        (float(t), int(k), int(d))
        for t in args.task_s.split(",")
        for k in args.inputs.split(",")
        for d in args.depths.split(",")
    ]
    for n, (task_s, inputs, depth) in enumerate(runs):
        run_dir = Path(scratch) / str(n)
        run_dir.mkdir(parents=True)
        rows.append(
            depth_run(depth, args.window, args.workers, args.worker_cores, inputs, task_s, run_dir, args.timeout)
        )
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(
        json.dumps({"when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "rows": rows}, indent=1) + "\n"
    )
    print(f"written {args.output}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
