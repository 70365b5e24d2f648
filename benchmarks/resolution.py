"""``make bench`` (Rucio part): what resolving a DID costs the main process, against the sandbox's real Rucio server
(sandbox/catalogue.py: gunicorn, SQLite, on loopback). For each N, a container of N files (one dataset of N files,
each with a replica at both storage elements and its events; catalogue entries only, no bytes: resolution reads the
catalogue, not the files) is registered (in bulk calls), then resolved as a
campaign's first run does (``hepvine.routing.replicas.files_of``: Rucio's list_files and list_replicas) and turned
into the spec's file entries. Writes results/bench/resolution.json: per N the seconds to resolve, per file, and this
process's CPU per file (the client and hepvine; the rest is the server's).

The server here is one gunicorn worker over SQLite on the 2-core VM: a production Rucio (PostgreSQL/Oracle, many
workers) answers faster per file; what this shows is that hepvine's own part stays linear and small.
"""

from __future__ import annotations

import argparse
import json
import time
import uuid
from pathlib import Path

from rucio.client import Client

import hepvine.devtools.services
from hepvine.devtools import catalogue
from hepvine.routing import replicas


def register(client: Client, services: dict, n: int) -> str:
    """A new container of N catalogue-only files at both storage elements; its DID."""
    tag = f"N{n}-{uuid.uuid4().hex[:8]}"
    container = f"/HepvineBench/{tag}/NANOAODSIM"
    files = [
        {"name": f"/store/bench/{tag}/file_{i:06d}.root", "bytes": 3_000_000, "adler32": "0badc0de", "events": 10_000}
        for i in range(n)
    ]
    both = tuple(catalogue.storage(services))
    return catalogue.register_files(client, services, container, {f"{container}/block-1": files}, lambda _: both)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--files", default="100,1000,10000", help="comma-separated N")
    parser.add_argument("--out", default="results/bench/resolution.json")
    args = parser.parse_args(argv)
    services = hepvine.devtools.services.load()
    client = Client()
    rows = []
    for n in (int(x) for x in args.files.split(",")):
        began = time.perf_counter()
        did = register(client, services, n)
        registered_s = time.perf_counter() - began
        began, cpu = time.perf_counter(), time.process_time()
        spec = replicas.resolve({"bench": {"rucio": did}}, lambda d: replicas.files_of(client, d, {}))
        resolve_s, cpu_s = time.perf_counter() - began, time.process_time() - cpu
        assert len(spec["bench"]["files"]) == n
        rows.append(
            {
                "files": n,
                "resolve_s": round(resolve_s, 3),
                "per_file_ms": round(resolve_s / n * 1e3, 3),
                "hepvine_cpu_per_file_ms": round(cpu_s / n * 1e3, 3),
                "registered_s": round(registered_s, 1),
            }
        )
        print(
            f"N={n:>7,}: resolved in {resolve_s:.2f} s ({resolve_s / n * 1e3:.2f} ms a file, of which this process's "
            f"CPU {cpu_s / n * 1e3:.3f} ms: the rest is the server's)",
            flush=True,
        )
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps({"server": services["rucio"]["url"], "rows": rows}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
