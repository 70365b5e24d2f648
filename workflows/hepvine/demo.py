"""``make demo``: the smoke campaign, end to end on the sandbox's real services, until the campaign workflow lands.

It writes a few small ROOT files to the XRootD origin, provisions TaskVine workers as HTCondor jobs with
``vine_factory``, runs one task per file that reads it with uproot through its rack's XCache, and prints what every
task read, where, and how fast. Nothing is mocked; everything it starts it stops.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import uproot

import hepvine.services
from snakemake_executor_plugin_taskvine import taskvine

# What each task runs on its worker: read one file through a cache, print one JSON line.
READER = """
import json, socket, sys, time, uproot
t0 = time.time()
with uproot.open(sys.argv[1]) as f:
    x = f["Events"]["x"].array(library="np")
    print(json.dumps({"url": sys.argv[1], "events": len(x), "sum": float(x.sum()),
                      "bytes": f.file.source.num_requested_bytes, "host": socket.gethostname(),
                      "seconds": time.time() - t0}))
"""


def write_inputs(origin: str, nfiles: int, events: int, workdir: Path) -> list[str]:
    paths = []
    for i in range(nfiles):
        local = workdir / f"smoke-{i}.root"
        with uproot.recreate(local, compression=uproot.ZSTD(5)) as f:
            f.mktree("Events", {"x": "f8"})
            f["Events"].extend({"x": np.random.default_rng(i).normal(size=events)})
        name = f"/store/demo-smoke/smoke-{i}.root"
        subprocess.run(["xrdcp", "--silent", "--force", str(local), f"{origin}/{name}"], check=True)
        paths.append(name)
    return paths


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--files", type=int, default=8, help="how many input files (default 8)")
    parser.add_argument("--events", type=int, default=100_000, help="events per file (default 100000)")
    parser.add_argument("--workers", type=int, default=2, help="TaskVine workers to run as HTCondor jobs")
    parser.add_argument("--workdir", default="results/smoke", help="local files, logs and TaskVine's run info")
    args = parser.parse_args(argv)

    services = hepvine.services.load()
    caches = services["xrootd"]["caches"]
    racks = sorted(caches)
    start = time.time()
    workdir = Path(args.workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    paths = write_inputs(services["xrootd"]["origin"]["url"], args.files, args.events, workdir)
    password = taskvine.write_password_file(workdir)
    manager = taskvine.Manager(port=0, password_file=password, run_info_dir=workdir / "run-info")
    factory = taskvine.Factory(batch_type="condor", manager_host="127.0.0.1", manager_port=manager.port,
                               scratch_dir=workdir / "factory", password_file=password,
                               min_workers=args.workers, max_workers=args.workers, cores=1, memory_mb=1000,
                               disk_mb=2000, worker_timeout_s=60)
    print(f"demo: {len(paths)} files on the origin; {args.workers} TaskVine workers requested from HTCondor "
          f"(manager on port {manager.port})", file=sys.stderr)
    try:
        for i, path in enumerate(paths):
            url = f"{caches[racks[i % len(racks)]]['url']}/{path}"
            manager.submit(taskvine.TaskSpec(command=f"python3 -c '{READER}' {url}", tag=path, cores=1,
                                             memory_mb=500, disk_mb=100, retries=2))
        records, failed = [], []
        deadline = time.monotonic() + 300
        while len(records) + len(failed) < len(paths) and time.monotonic() < deadline:
            result = manager.wait(2)
            if result is None:
                continue
            if result.successful:
                records.append(json.loads(result.output.strip().splitlines()[-1]))
            else:
                failed.append((result.tag, result.result, result.output[-500:]))
    finally:
        factory.stop()
    wall = time.time() - start
    events = sum(r["events"] for r in records)
    nbytes = sum(r["bytes"] for r in records)
    for r in sorted(records, key=lambda r: r["url"]):
        print(f"  {r['url']}: {r['events']} events, {r['bytes']} bytes in {r['seconds']:.2f} s on {r['host']}")
    for tag, why, out in failed:
        print(f"  FAILED {tag}: {why}\n{out}")
    print(f"demo: {len(records)}/{len(paths)} files ok, {events} events, {nbytes / 1e6:.1f} MB read "
          f"in {wall:.1f} s ({events / wall / 1e3:.1f} kHz)")
    return 0 if len(records) == len(paths) else 1


if __name__ == "__main__":
    sys.exit(main())
