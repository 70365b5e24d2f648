"""Scale benchmark (issue 12): what a campaign costs as its dataset grows, on generated specs of N root:// files
(the files need not exist: nothing here reads them) on the UChicago site config, with ZSTD recompression.

For each N it measures, each command in its own process (wall seconds and peak RSS of that process):
- ``dry_run``: ``snakemake -n`` of the full campaign — the main process: load and validate the spec, route every
  file, cut the batches, write the index (cold: first run; warm: index already written), build the DAG;
- ``job``: what one job does before its real work — the job's own ``snakemake`` (as the executor runs it on a
  worker: ``--mode remote --target-jobs analyse:batch=...``) parsing the workflow and building its one-job DAG,
  as a dry run;
- ``library_call``: the same job as a ``--taskvine-library`` call (forked from a process that has imported
  Snakemake, run by the plugin's ``library.run_job``): its CPU seconds are a library call's overhead per job;
- ``job_before``: the same job in the workflow as it was before the per-batch index (``--before GIT_REV``; one file
  per job), for the side-by-side ratio; ``dry_run_before`` likewise for N up to ``--before-dry-max``.

With ``--dispatch``: ``first_dispatch``, the seconds from starting ``snakemake --executor taskvine`` on the full
campaign (greedy scheduler, no workers) to its first job handed to TaskVine, and the main process's RSS then.

With ``--steady N``: the main process's own CPU per job while a campaign of N files runs on local TaskVine workers
(a fill phase from the first dispatch, then a steady window, then Ctrl-C), for each ``--steady-variants``
files_per_job:scheduler_subsample[:jobs[:max_jobs_per_timespan[:workers]]] (workers 0: nothing runs, so the steady
window shows what holding the handed-over jobs costs per second). The plugin's TaskVine manager process (spawned by
the main one) is measured apart.

With ``--run N``: a real campaign of N files end to end on local TaskVine workers (2 × 1 core; the files are links
to a few generated ones, so only the per-job costs scale): wall, jobs/s, events/s per core and the main process's
own CPU seconds per job — side by side with the workflow before (``--before``), one file per job.

Writes results/bench/scale.json and results/bench/scale.png (cost against N).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
OUT = REPO / "results" / "bench"
SITE = REPO / "site-configs" / "uchicago-af.yaml"
# The AGC's processes and variations (ttbar has the systematic variations), with shares of the files.
SAMPLES = [
    ("ttbar", "nominal", 0.35),
    ("ttbar", "scaledown", 0.05),
    ("ttbar", "scaleup", 0.05),
    ("ttbar", "ME_var", 0.05),
    ("ttbar", "PS_var", 0.05),
    ("single_top_s_chan", "nominal", 0.02),
    ("single_top_t_chan", "nominal", 0.08),
    ("single_top_tW", "nominal", 0.05),
    ("wjets", "nominal", 0.2),
    ("data", "nominal", 0.1),
]
XSEC = {"ttbar": 729.84, "single_top_s_chan": 6.84, "single_top_t_chan": 214.2, "single_top_tW": 79.3, "wjets": 61457.0}


def spec(n: int) -> dict:
    """An AGC-shaped spec of N root:// files at the site's origin."""
    out: dict = {}
    left = n
    for i, (process, variation, share) in enumerate(SAMPLES):
        count = left if i == len(SAMPLES) - 1 else int(n * share)
        left -= count
        files = [
            {"path": f"root://fax.mwt2.org:1094//store/{process}/{variation}/file_{j:06d}.root", "nevts": 100_000}
            for j in range(count)
        ]
        out.setdefault(process, {})[variation] = {"nevts_total": 100_000 * count, "files": files}
        if process in XSEC:
            out[process]["xsec"] = XSEC[process]
    return out


def measured(cmd: list[str], cwd: Path, env: dict | None = None) -> dict:
    """Run CMD; its wall seconds, peak RSS (MB) and CPU seconds of that process tree, and its output."""
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    output = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({proc.returncode}):\n{output[-3000:]}")
    return {
        "wall_s": round(wall, 2),
        "rss_mb": round(usage.ru_maxrss / 1024, 1),
        "cpu_s": round(usage.ru_utime + usage.ru_stime, 2),
        "output": output,
    }


def library_call(cmd: list[str], cwd: Path, scratch: Path) -> dict:
    """CMD (a job's ``python -m snakemake ...``) as a ``--taskvine-library`` call: run by the plugin's own
    ``library.run_job`` in a child forked from this process, which has run ``library.warm`` (Snakemake's imports) as
    the library does before its first call. The child's wall seconds, CPU seconds and peak RSS (MB)."""
    from snakemake_executor_plugin_taskvine import library

    library.warm()  # outside the measured fork; later runs find everything imported already

    scratch.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    pid = os.fork()
    if pid == 0:  # the call: its own sandbox directory, as on a worker
        code = 70
        try:
            os.chdir(scratch)
            code = library.run_job(shlex.join(cmd), directory=str(cwd))["exit_code"]
        finally:
            os._exit(code)
    _, status, usage = os.wait4(pid, 0)
    wall = time.perf_counter() - start
    if os.waitstatus_to_exitcode(status) != 0:
        output = (scratch / "job-output.log").read_text(errors="replace")
        raise RuntimeError(f"library call of {shlex.join(cmd)} failed:\n{output[-3000:]}")
    return {
        "wall_s": round(wall, 2),
        "rss_mb": round(usage.ru_maxrss / 1024, 1),
        "cpu_s": round(usage.ru_utime + usage.ru_stime, 2),
    }


def snakemake(snakefile: Path, workdir: Path, config: list[str], *extra: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "snakemake",
        "--snakefile",
        str(snakefile),
        "--directory",
        str(workdir),
        "--cores",
        "1",
        "--quiet",
        "rules",
        *extra,
        "--config",
        *config,
    ]


def best_of(rounds: int, measure) -> dict:
    """The fastest of ROUNDS measurements (the first pays for compiling and caching), without its output."""
    best = min((measure() for _ in range(rounds)), key=lambda m: m["wall_s"])
    return {k: v for k, v in best.items() if k != "output"}


def jobs_in(output: str) -> int:
    """The job count of a dry run's stats table ('total N')."""
    match = re.search(r"^total\s+(\d+)", output, re.M)
    return int(match.group(1)) if match else -1


def batches_of(workdir: Path, campaign: str) -> list[str]:
    """The campaign's batches, in order, from its index's ``expected.json``."""
    expected = json.loads((workdir / "results" / campaign / "index" / "expected.json").read_text())
    return list(dict.fromkeys(row[2] for row in expected["files"]))


def analyse_jobs(output: str) -> int:
    """The analyse jobs of a dry run's stats table."""
    match = re.search(r"^analyse\s+(\d+)\s*$", output, re.M)
    return int(match.group(1)) if match else -1


def run(n: int, workdir: Path, before: Path | None, before_dry_max: int, files_per_job: int) -> dict:
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / "spec.json").write_text(json.dumps(spec(n)))
    config = [
        f"dataset={workdir / 'spec.json'}",
        f"site={SITE}",
        "recompress=zstd:5",
        "campaign=scale",
        f"files_per_job={files_per_job}",
    ]
    snakefile = REPO / "Snakefile"
    result: dict = {"files": n, "files_per_job": files_per_job}
    cold = measured(snakemake(snakefile, workdir, config, "-n"), REPO)
    warm = measured(snakemake(snakefile, workdir, config, "-n"), REPO)
    result["jobs"] = jobs_in(warm["output"])
    batches = batches_of(workdir, "scale")
    if analyse_jobs(warm["output"]) != len(batches):  # one job per batch of the index, at every N
        raise RuntimeError(
            f"the dry run of {n} files counts {analyse_jobs(warm['output'])} analyse jobs, the index "
            f"{len(batches)} batches"
        )
    result["batches"] = len(batches)
    result["dry_run_cold"] = {k: v for k, v in cold.items() if k != "output"}
    result["dry_run"] = {k: v for k, v in warm.items() if k != "output"}
    batch = batches[0]
    job = snakemake(
        snakefile,
        workdir,
        config,
        "-n",
        "--mode",
        "remote",
        "--target-jobs",
        f"analyse:batch={batch}",
        "--allowed-rules",
        "analyse",
        "--force",
    )
    result["job"] = best_of(3, lambda: measured(job, REPO))
    result["library_call"] = best_of(3, lambda: library_call(job, REPO, workdir / "call"))
    if before is not None:
        env = dict(os.environ, PYTHONPATH=str(before / "workflows"))
        old = [f"dataset={workdir / 'spec.json'}", f"site={SITE}", "recompress=zstd:5", "campaign=before"]
        result["job_before"] = best_of(
            3,
            lambda: measured(
                snakemake(
                    before / "Snakefile",
                    workdir,
                    old,
                    "-n",
                    "--mode",
                    "remote",
                    "--target-jobs",
                    "analyse:name=ttbar__nominal__00000",
                    "--allowed-rules",
                    "analyse",
                    "--force",
                ),
                before,
                env,
            ),
        )
        if n <= before_dry_max:
            dry = measured(snakemake(before / "Snakefile", workdir, old, "-n"), before, env)
            result["dry_run_before"] = {k: v for k, v in dry.items() if k != "output"}
            result["jobs_before"] = jobs_in(dry["output"])
    return result


def products(n: int, workdir: Path) -> dict:
    """The report of a campaign of N files — the root merge (here of one result holding every record), the products
    and the plots, drawn by one process as on a worker — (synthetic records, the default analysis's output of one
    filled histogram and the event count): seconds and RSS."""
    sys.path.insert(0, str(REPO / "workflows"))
    from hepvine.examples import agc
    from hepvine.jobs import merge
    from hepvine.model import records

    workdir.mkdir(parents=True, exist_ok=True)
    h = agc.new_histogram()
    h.fill(region="4j1b", process="ttbar", variation="nominal", observable=[100.0], weight=[1.0])
    output = {
        "4j1b_ttbar_nominal": h[{"region": "4j1b", "process": "ttbar", "variation": "nominal"}],
        "events_ttbar_nominal": agc.events_histogram(100_000 * n),
    }
    recs, expected = [], []
    for i in range(n):
        fid, batch = f"ttbar/nominal/{i}", f"ttbar/nominal/xcache-{i % 8}/{i // 4000:03d}/{(i // 4) % 1000:03d}"
        route = {
            "url": f"root://xcache-{i % 8}//store/f{i}.root",
            "cache": f"xcache-{i % 8}",
            "cache_rack": "r1",
            "home_cache": f"xcache-{i % 8}",
            "rack": "r1",
            "worker_rack": "r1",
            "failover": [],
            "bytes": 10**9,
            "start": i * 0.01,
            "end": i * 0.01 + 2,
        }
        recs.append(
            records.FileRecord(
                fid=fid,
                path=f"root://o//store/f{i}.root",
                process="ttbar",
                variation="nominal",
                batch=batch,
                events=100_000,
                bytes_read=10**9,
                read_from=route["url"],
                host="w",
                start=i * 0.01,
                end=i * 0.01 + 2,
                wall_seconds=2,
                cpu_seconds=2,
                fetch=route,
                cache=route["cache"],
                rack="r1",
                worker_rack="r1",
                analysis_worker_rack="r1",
            ).to_dict()
        )
        expected.append([fid, recs[-1]["path"], batch])
    merge.write(workdir / "results.pkl", {"records": recs, "output": output, "events": {"ttbar__nominal": 100_000 * n}})
    (workdir / "expected.json").write_text(json.dumps({"files": expected}))
    del recs, expected
    report = measured(
        [
            sys.executable,
            "-m",
            "hepvine.products.report",
            "--results",
            str(workdir / "results.pkl"),
            "--expected",
            str(workdir / "expected.json"),
            "--analysis",
            "hepvine.examples.agc:TtbarProcessor",
            "--output",
            str(workdir / "output.coffea"),
            "--histograms",
            str(workdir / "h.root"),
            "--report",
            str(workdir / "report.json"),
            "--summary",
            str(workdir / "summary.html"),
            "--failures",
            str(workdir / "failures.tsv"),
            "--plots",
            str(workdir / "plots"),
            "--plot-histograms",
        ],
        REPO,
    )
    return {
        "files": n,
        "report": {k: v for k, v in report.items() if k != "output"},
        "report_json_mb": round((workdir / "report.json").stat().st_size / 1e6, 1),
    }


MAIN_WITH_CPU = """import atexit, resource, sys, snakemake.cli
def report():
    u = resource.getrusage(resource.RUSAGE_SELF)
    print(f"MAIN_CPU_S {u.ru_utime + u.ru_stime:.3f}", file=sys.stderr)
atexit.register(report)
snakemake.cli.main(sys.argv[1:])
"""


def interrupt(proc: subprocess.Popen, timeout_s: float) -> float | None:
    """Ctrl-C for PROC, as a user would: the seconds it took to end, or None if it had not ended TIMEOUT_S seconds
    later and was killed."""
    start = time.perf_counter()
    proc.send_signal(signal.SIGINT)
    try:
        proc.wait(timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        return None
    return round(time.perf_counter() - start, 1)


def first_dispatch(n: int, workdir: Path, files_per_job: int) -> dict:
    """Seconds from start to the first job submitted to TaskVine (no workers, so nothing runs), and RSS then."""
    import psutil

    config = [
        f"dataset={workdir / 'spec.json'}",
        f"site={SITE}",
        "recompress=zstd:5",
        "campaign=scale",
        f"files_per_job={files_per_job}",
    ]
    cmd = snakemake(
        REPO / "Snakefile",
        workdir,
        config,
        "--executor",
        "taskvine",
        "--taskvine-workers",
        "none",
        "--jobs",
        "100",
        "--scheduler",
        "greedy",
    )
    cmd.remove("--quiet")
    cmd.remove("rules")
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    seconds = rss = None
    try:
        for line in proc.stdout:
            if line.startswith("rule analyse:"):  # printed as the job is handed to the executor
                seconds = time.perf_counter() - start
                rss = psutil.Process(proc.pid).memory_info().rss / 2**20
                break
    finally:
        interrupt(proc, 120)
    return {"files": n, "seconds": round(seconds, 2) if seconds else None, "rss_mb": round(rss, 1) if rss else None}


def linked_spec(n: int, workdir: Path) -> Path:
    """A spec of N local files, links to 8 generated ones of 2,000 events (so only the per-job costs scale)."""
    sys.path.insert(0, str(REPO / "workflows"))
    from hepvine.devtools import generate

    data = workdir / "data"
    base = [data / f"base{i}.root" for i in range(8)]
    for i, path in enumerate(base):
        if not path.exists():
            generate.write_file(path, "ttbar", 2000, index=i, seed=8)
    (data / "links").mkdir(parents=True, exist_ok=True)
    for i in range(n):  # a run of more files than the last one needs more links
        link = data / "links" / f"f{i:06d}.root"
        if not link.is_symlink():
            os.symlink(base[i % len(base)], link)
    files = [{"path": str(data / "links" / f"f{i:06d}.root"), "nevts": 2000} for i in range(n)]
    path = workdir / f"run-spec-{n}.json"
    path.write_text(json.dumps({"ttbar": {"xsec": 1.0, "nominal": {"nevts_total": 2000 * n, "files": files}}}))
    return path


def local_workers(n: int = 2) -> list[str]:
    """Executor options: N local 1-core TaskVine workers (0: none, so nothing runs)."""
    workers = (
        [
            "--taskvine-workers",
            "local",
            "--taskvine-min-workers",
            str(n),
            "--taskvine-max-workers",
            str(n),
            "--taskvine-worker-cores",
            "1",
        ]
        if n
        else ["--taskvine-workers", "none"]
    )
    return ["--executor", "taskvine", *workers, "--scheduler", "greedy"]


def steady(n: int, workdir: Path, variant: str, window_s: float, settle_s: float, library: bool) -> dict:
    """The main process's own CPU per job while a campaign of N files runs (local 1-core TaskVine workers), in two
    phases after the first job is handed to TaskVine: ``fill`` (the first SETTLE_S seconds, when Snakemake hands
    over what it can: with --jobs unlimited, every ready job) and ``steady`` (the next WINDOW_S seconds); then the
    run is interrupted (Ctrl-C). Each phase: the main process's CPU seconds (not the workers'), the jobs handed over
    and the jobs finished. VARIANT is FILES_PER_JOB:SCHEDULER_SUBSAMPLE[:JOBS[:MAX_JOBS_PER_TIMESPAN[:WORKERS]]]
    (JOBS default 50, the rate Snakemake's default 100/1s, WORKERS 2). With WORKERS 0 no job runs: the steady
    phase then measures what the main process spends per second on the jobs it holds, whatever finishes. Each phase
    splits the main process's CPU between its main thread (Snakemake's scheduler: hand-over, and the post-processing
    of each finished job) and its other threads (the status checks, whose cost grows with the jobs held)."""
    import threading

    import psutil

    fields = variant.split(":")
    files_per_job, subsample, jobs_option, rate, workers = fields + ["50", "100/1s", "2"][len(fields) - 2 :]
    spec_path = linked_spec(n, workdir)
    campaign = f"steady-{n}-{variant.replace(':', '-').replace('/', '-')}"
    shutil.rmtree(workdir / "results" / campaign, ignore_errors=True)
    shutil.rmtree(workdir / ".snakemake" / "locks", ignore_errors=True)  # of a run an earlier bench had to kill
    cmd = [
        sys.executable,
        "-m",
        "snakemake",
        "--snakefile",
        str(REPO / "Snakefile"),
        "--directory",
        str(workdir),
        *local_workers(int(workers)),
        "--jobs",
        jobs_option,
        "--scheduler-subsample",
        subsample,
        "--max-jobs-per-timespan",
        rate,
        *(["--taskvine-library"] if library else []),
        "--config",
        f"dataset={spec_path}",
        f"campaign={campaign}",
        f"files_per_job={files_per_job}",
    ]
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    main = psutil.Process(proc.pid)
    counts = {"handed": 0, "finished": 0}
    first = threading.Event()
    tail: list[str] = []

    def read():
        for line in proc.stdout:
            tail[:] = (tail + [line])[-40:]
            if line.startswith("rule "):  # a job's info, printed as it is handed to the executor
                counts["handed"] += 1
                first.set()
            elif line.lstrip().startswith("Finished jobid:"):
                counts["finished"] += 1
        first.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()

    def manager_cpu() -> float:
        """CPU seconds of the plugin's TaskVine manager, a process spawned by the main one."""
        spawned = [p for p in main.children() if "spawn_main" in " ".join(p.cmdline())]
        return sum(sum(p.cpu_times()[:2]) for p in spawned)

    def scheduler_cpu() -> float:
        """CPU seconds of the main process's main thread: Snakemake's scheduler, which hands jobs over and
        post-processes the finished ones (the status checks run in a thread of their own)."""
        return sum(t.user_time + t.system_time for t in main.threads() if t.id == main.pid)

    def sample() -> tuple[float, float, float, float, dict]:
        return time.perf_counter(), sum(main.cpu_times()[:2]), scheduler_cpu(), manager_cpu(), dict(counts)

    phases, stopped = {}, None
    try:
        first.wait()
        if proc.poll() is not None:
            raise RuntimeError(f"{' '.join(cmd)} ended before its first job:\n{''.join(tail)}")
        marks = [sample()]
        for seconds in (settle_s, window_s):
            time.sleep(seconds)
            marks.append(sample())
        for name, (t0, c0, s0, m0, n0), (t1, c1, s1, m1, n1) in zip(("fill", "steady"), marks, marks[1:]):
            handed, done = n1["handed"] - n0["handed"], n1["finished"] - n0["finished"]
            phases[name] = {
                "seconds": round(t1 - t0, 1),
                "main_cpu_s": round(c1 - c0, 2),
                "scheduler_thread_cpu_s": round(s1 - s0, 2),
                "other_threads_cpu_s": round((c1 - c0) - (s1 - s0), 2),
                "manager_cpu_s": round(m1 - m0, 2),
                "handed": handed,
                "finished": done,
                "jobs_per_s": round(done / (t1 - t0), 2),
                "main_cpu_ms_per_finished_job": round(1000 * (c1 - c0) / max(done, 1), 1),
                "scheduler_ms_per_finished_job": round(1000 * (s1 - s0) / max(done, 1), 1),
                "main_cpu_ms_per_handed_job": round(1000 * (c1 - c0) / max(handed, 1), 1),
            }
    finally:
        stopped = interrupt(proc, 300)
    return {
        "files": n,
        "variant": variant,
        "library": library,
        "to_first_dispatch_s": round(marks[0][0] - start, 1),
        **phases,
        "ctrl_c_s": stopped,
        "handed_at_ctrl_c": counts["handed"],
        "finished_at_ctrl_c": counts["finished"],
    }


def end_to_end(n: int, workdir: Path, before: Path | None, files_per_job: int) -> dict:
    """A real campaign of N files on 2 local 1-core TaskVine workers, now (with the profiles' scheduling settings:
    every ready job handed over at once) and before (--jobs 50, as the profiles had then)."""
    spec_path = linked_spec(n, workdir)
    out = {"files": n}
    now = ["--jobs", "unlimited", "--max-jobs-per-timespan", "1000/1s", "--scheduler-subsample", "1000"]
    variants = [("now", REPO, now, [f"files_per_job={files_per_job}"], None)]
    if before is not None:
        old_env = dict(os.environ, PYTHONPATH=str(before / "workflows"))
        variants.append(("before", before, ["--jobs", "50"], [], old_env))
    for name, tree, scheduling, extra, env in variants:
        campaign = f"run-{name}"
        shutil.rmtree(workdir / "results" / campaign, ignore_errors=True)
        cmd = [
            sys.executable,
            "-c",
            MAIN_WITH_CPU,
            "--snakefile",
            str(tree / "Snakefile"),
            "--directory",
            str(workdir),
            *local_workers(),
            *scheduling,
            "--config",
            f"dataset={spec_path}",
            f"campaign={campaign}",
            *extra,
        ]
        result = measured(cmd, tree, env)
        main_cpu = float(re.search(r"MAIN_CPU_S ([0-9.]+)", result["output"]).group(1))
        jobs = len(re.findall(r"^\s*jobid: \d+", result["output"], re.M))  # each job's info, printed as it starts
        report = json.loads((workdir / "results" / campaign / "report.json").read_text())
        assert report["complete"] and report["files"]["ok"] == n, report["files"]
        out[name] = {
            "wall_s": result["wall_s"],
            "jobs": jobs,
            "jobs_per_s": round(jobs / result["wall_s"], 2),
            "events_per_s_per_core": round(report["events"] / result["wall_s"] / 2, 1),
            "main_cpu_s": main_cpu,
            "main_cpu_ms_per_job": round(1000 * main_cpu / max(jobs, 1), 1),
        }
    if "before" in out:
        out["speedup"] = round(out["before"]["wall_s"] / out["now"]["wall_s"], 2)
    return out


def plot(results: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (t, m) = plt.subplots(1, 2, figsize=(11, 4.2))
    ns = [r["files"] for r in results]
    for key, label in (
        ("dry_run", "dry run (main process)"),
        ("job", "one job's start"),
        ("job_before", "one job's start, before"),
    ):
        points = [(r["files"], r[key]) for r in results if key in r]
        if points:
            t.plot([p[0] for p in points], [p[1]["wall_s"] for p in points], "o-", label=label)
            m.plot([p[0] for p in points], [p[1]["rss_mb"] for p in points], "o-", label=label)
    for ax, label in ((t, "wall [s]"), (m, "peak RSS [MB]")):
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("files in the campaign")
        ax.set_ylabel(label)
        ax.legend(fontsize="small")
    fig.suptitle(f"hepvine at scale ({ns[-1]:,} files max)", fontsize="medium")
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--files", default="1000,10000,50000,219000", help="comma-separated N")
    parser.add_argument("--files-per-job", type=int, default=4)
    parser.add_argument(
        "--before", help="git revision of the workflow to compare with (checked out under results/bench/scale/before)"
    )
    parser.add_argument("--before-dry-max", type=int, default=10000, help="largest N for the old dry run")
    parser.add_argument("--dispatch", action="store_true", help="also measure the time to the first dispatch")
    parser.add_argument("--run", type=int, default=0, help="also run a campaign of this many files end to end")
    parser.add_argument(
        "--steady",
        type=int,
        default=0,
        help="also measure the main process's CPU per job while a "
        "campaign of this many files runs (a window of --window s, then Ctrl-C)",
    )
    parser.add_argument(
        "--steady-variants",
        default="8:1000,8:1000:unlimited:1000/1s",
        help="comma-separated "
        "FILES_PER_JOB:SCHEDULER_SUBSAMPLE[:JOBS[:MAX_JOBS_PER_TIMESPAN[:WORKERS]]] for "
        "--steady, run one after another",
    )
    parser.add_argument("--window", type=float, default=240, help="seconds of --steady's steady phase")
    parser.add_argument(
        "--settle", type=float, default=120, help="seconds of --steady's fill phase, from the first job handed over"
    )
    parser.add_argument("--library", action="store_true", help="--steady's jobs as TaskVine library calls")
    parser.add_argument("--products", type=int, default=0, help="also time the report (and its plots) at N files")
    parser.add_argument("--output", type=Path, default=OUT / "scale.json")
    args = parser.parse_args(argv)
    before = None
    if args.before:
        before = OUT / "scale" / "before"
        if not before.exists():
            before.parent.mkdir(parents=True, exist_ok=True)
            archive = subprocess.run(
                ["git", "-C", str(REPO), "archive", args.before], capture_output=True, check=True
            ).stdout
            subprocess.run(["tar", "-x", "-C", str(before.parent), "--one-top-level=before"], input=archive, check=True)
    results, dispatch, runs = [], [], None
    for n in (int(x) for x in args.files.split(",") if x):
        result = run(n, OUT / "scale" / f"n{n}", before, args.before_dry_max, args.files_per_job)
        print(json.dumps(result), flush=True)
        results.append(result)
        if args.dispatch:
            dispatch.append(first_dispatch(n, OUT / "scale" / f"n{n}", args.files_per_job))
            print(json.dumps(dispatch[-1]), flush=True)
    if args.run:
        runs = end_to_end(args.run, OUT / "scale" / "run", before, args.files_per_job)
        print(json.dumps(runs), flush=True)
    steadies = []
    for variant in filter(None, args.steady_variants.split(",") if args.steady else []):
        steadies.append(steady(args.steady, OUT / "scale" / "steady", variant, args.window, args.settle, args.library))
        print(json.dumps(steadies[-1]), flush=True)
    made = products(args.products, OUT / "scale" / "products") if args.products else None
    if made:
        print(json.dumps(made), flush=True)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(
        json.dumps(
            {
                "command": " ".join(sys.argv),
                "results": results,
                "first_dispatch": dispatch,
                "end_to_end": runs,
                "steady": steadies,
                "products": made,
            },
            indent=2,
        )
        + "\n"
    )
    if results:
        plot(results, args.output.with_suffix(".png"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
