"""``make bench`` (dispatch part): 200 short jobs and a fan-in, run side by side in one session on the sandbox by
Snakemake's local executor, ``--executor taskvine`` with local workers and with HTCondor workers (each job a
process, or with ``--taskvine-library`` a call of a library on the worker), and the HTCondor executor plugin on the
same pool. Writes makespan and per-job overhead to results/bench/dispatch.json,
and a profile of where a TaskVine job's time goes.

Per-job overhead (core-seconds) = makespan × cores the variant was given ÷ jobs: the jobs themselves do no work
(each writes one line), so all of it is overhead. The sandbox pool's 4 cores are 2 machine cores overcommitted,
so the same figure is also given for the machine's cores.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

from snakemake_executor_plugin_taskvine.tasks import JOB_MAIN

SNAKEFILE = """
N = {n}

rule all:
    input: "fanin.txt"

rule fanin:
    input: expand("small/{{i}}.txt", i=range(N))
    output: "fanin.txt"
    shell: "cat {{input}} > {{output}}"

rule small:
    output: "small/{{i}}.txt"
    shell: "echo {{wildcards.i}} > {{output}}"
"""

MACHINE_CORES = os.cpu_count() or 1
POOL_CORES = 4  # the sandbox pool: two partitionable slots of 2 cores (sandbox/services.py)
TASKVINE_WORKER = [
    "--taskvine-worker-memory-mb",
    "1000",
    "--taskvine-worker-disk-mb",
    "2000",
    "--default-resources",
    "mem_mb=100",
    "disk_mb=10",
]

# name → (snakemake arguments, cores the variant was given)
VARIANTS = {
    "local": (["--cores", str(MACHINE_CORES)], MACHINE_CORES),
    "taskvine-local": (
        [
            "--executor",
            "taskvine",
            "--jobs",
            "100",
            "--taskvine-workers",
            "local",
            "--taskvine-min-workers",
            str(MACHINE_CORES),
            "--taskvine-max-workers",
            str(MACHINE_CORES),
            "--taskvine-worker-cores",
            "1",
            *TASKVINE_WORKER,
        ],
        MACHINE_CORES,
    ),
    "taskvine-condor": (
        [
            "--executor",
            "taskvine",
            "--jobs",
            "100",
            "--taskvine-workers",
            "condor",
            "--taskvine-min-workers",
            "2",
            "--taskvine-max-workers",
            "2",
            "--taskvine-worker-cores",
            str(POOL_CORES // 2),
            *TASKVINE_WORKER,
        ],
        POOL_CORES,
    ),
    # The same, each job a call of a TaskVine library on the workers (Snakemake imported once per worker).
    "taskvine-local-library": (
        [
            "--executor",
            "taskvine",
            "--jobs",
            "100",
            "--taskvine-workers",
            "local",
            "--taskvine-min-workers",
            str(MACHINE_CORES),
            "--taskvine-max-workers",
            str(MACHINE_CORES),
            "--taskvine-worker-cores",
            "1",
            "--taskvine-library",
            *TASKVINE_WORKER,
        ],
        MACHINE_CORES,
    ),
    "taskvine-condor-library": (
        [
            "--executor",
            "taskvine",
            "--jobs",
            "100",
            "--taskvine-workers",
            "condor",
            "--taskvine-min-workers",
            "2",
            "--taskvine-max-workers",
            "2",
            "--taskvine-worker-cores",
            str(POOL_CORES // 2),
            "--taskvine-library",
            *TASKVINE_WORKER,
        ],
        POOL_CORES,
    ),
    # It checks job status every 10 s by default; every second here, so that it is not charged for polling.
    "htcondor-plugin": (
        [
            "--executor",
            "htcondor",
            "--jobs",
            str(POOL_CORES),
            "--envvars",
            "PATH",
            "--seconds-between-status-checks",
            "1",
            "--default-resources",
            "mem_mb=100",
            "disk_mb=10",
        ],
        POOL_CORES,
    ),
}


def run_variant(name: str, workdir: Path, n: int, timeout_s: float) -> dict:
    args, cores = VARIANTS[name]
    shutil.rmtree(workdir, ignore_errors=True)
    workdir.mkdir(parents=True)
    (workdir / "Snakefile").write_text(SNAKEFILE.format(n=n))
    cmd = [sys.executable, "-m", "snakemake", *args]
    start = time.monotonic()
    done = subprocess.run(cmd, cwd=workdir, capture_output=True, text=True, timeout=timeout_s)
    makespan = time.monotonic() - start
    fanin = workdir / "fanin.txt"
    ok = done.returncode == 0 and fanin.exists() and len(fanin.read_text().split()) == n
    record = {
        "variant": name,
        "ok": ok,
        "jobs": n + 1,
        "cores": cores,
        "makespan_s": round(makespan, 2),
        "jobs_per_s": round((n + 1) / makespan, 2),
        "overhead_core_s_per_job": round(makespan * cores / (n + 1), 3),
        # Every variant runs on the same machine, whatever cores it was given: its physical cost.
        "overhead_machine_core_s_per_job": round(makespan * MACHINE_CORES / (n + 1), 3),
        "command": " ".join(cmd[1:]),
    }
    if not ok:
        record["error"] = done.stderr[-2000:]
    record.update(taskvine_profile(workdir))
    print(
        f"bench: {name:16} {'ok' if ok else 'FAILED':6} makespan {makespan:7.1f} s, "
        f"{record['overhead_core_s_per_job']:.2f} core-s/job",
        file=sys.stderr,
    )
    return record


def taskvine_profile(workdir: Path) -> dict:
    """From TaskVine's transaction log: how long a job ran on its worker, and how long it waited to be dispatched."""
    logs = list(workdir.glob(".snakemake/taskvine/*/manager/*/vine-logs/transactions"))
    if not logs:
        return {}
    ready, running, walls = {}, {}, []
    for line in logs[0].read_text().splitlines():
        fields = line.split()
        if len(fields) < 5 or fields[2] != "TASK":
            continue
        t, task, state = int(fields[0]) / 1e6, fields[3], fields[4]
        if state == "READY":
            ready[task] = t
        elif state == "RUNNING":
            running.setdefault(task, t)
        elif state == "RETRIEVED" and '"wall_time":[' in line:
            walls.append(float(line.split('"wall_time":[')[1].split(",")[0]))
    waits = [running[t] - ready[t] for t in running if t in ready]
    return {
        "task_wall_s_mean": round(statistics.mean(walls), 3) if walls else None,
        "task_wall_s_median": round(statistics.median(walls), 3) if walls else None,
        "dispatch_wait_s_median": round(statistics.median(waits), 3) if waits else None,
    }


def time_command(cmd: list[str], repeat: int = 5) -> float:
    best = float("inf")
    for _ in range(repeat):
        start = time.monotonic()
        subprocess.run(cmd, check=True, capture_output=True)
        best = min(best, time.monotonic() - start)
    return round(best, 3)


def job_profile(workdir: Path) -> dict:
    """Where one job's seconds go on a worker: the interpreter, Snakemake's imports, and a whole remote-mode job
    (parse the Snakefile, build the one-job DAG, run it), each timed alone here (best of 5)."""
    python = sys.executable
    one = workdir / "profile"
    shutil.rmtree(one, ignore_errors=True)
    one.mkdir(parents=True)
    (one / "Snakefile").write_text(SNAKEFILE.format(n=1))
    job = [
        python,
        "-m",
        "snakemake",
        "--snakefile",
        str(one / "Snakefile"),
        "--directory",
        str(one),
        "--target-jobs",
        "small:i=0",
        "--allowed-rules",
        "small",
        "--cores",
        "1",
        "--force",
        "--nolock",
        "--quiet",
        "all",
        "--mode",
        "remote",
    ]
    return {
        "python_start_s": time_command([python, "-c", "pass"]),
        "import_snakemake_cli_s": time_command([python, "-c", "import snakemake.cli"]),
        # As Snakemake's remote executors run it, and as the TaskVine plugin does (without waiting for the timer).
        "remote_job_s": time_command(job),
        "remote_job_taskvine_s": time_command([python, "-c", JOB_MAIN, *job[3:]]),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=200, help="short jobs before the fan-in (default 200)")
    parser.add_argument(
        "--variants", default=",".join(VARIANTS), help="comma-separated subset of: " + ", ".join(VARIANTS)
    )
    parser.add_argument("--workdir", default="results/bench/dispatch-work")
    parser.add_argument("--output", default="results/bench/dispatch.json")
    parser.add_argument("--timeout", type=float, default=1800, help="seconds allowed per variant")
    args = parser.parse_args(argv)
    workdir = Path(args.workdir).absolute()
    records = [run_variant(name, workdir / name, args.jobs, args.timeout) for name in args.variants.split(",")]
    by_name = {r["variant"]: r for r in records}
    result = {
        "when": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "machine": {"cores": MACHINE_CORES, "pool_cores": POOL_CORES},
        "variants": records,
        "profile": job_profile(workdir),
    }
    for variant in ("taskvine-condor", "taskvine-condor-library"):
        if variant in by_name and "htcondor-plugin" in by_name:
            result[f"speedup_{variant.replace('-', '_')}_vs_htcondor_plugin"] = round(
                by_name["htcondor-plugin"]["makespan_s"] / by_name[variant]["makespan_s"], 2
            )
    Path(args.output).parent.mkdir(parents=True, exist_ok=True)
    Path(args.output).write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    return 0 if all(r["ok"] for r in records) else 1


if __name__ == "__main__":
    sys.exit(main())
