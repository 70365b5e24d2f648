"""``make demo``: the campaign end to end on the sandbox's real services.

The first time, it generates the demo dataset straight into the XRootD origin and keeps it: 24 files of 10,000
events in the layout of a real CMS NanoAOD file (1,590 branches, ~3 kB an event), so that the campaign pays what real
files cost to open and decompress, with the compact schema's physics, which fills the selection densely (``hepvine
generate --schema nanoaod --physics compact --lzma-level 1``). They are LZMA level 1, not CMS's level 9: LZMA
decompresses at the same speed at either level (uproot read a 20,000-event file in 6.0 s at level 1, 6.4 s at level
9), the files are 7% bigger, and level 9 would take ~12 min instead of ~4.5 to write them on 2 cores. The directory
(/store/demo-<schema>-<physics>-<events>-lzma<level>) names what its files are, so that a change of any of these
writes a new dataset rather than mixing with the old one or with what the caches kept of it.

Then it runs the campaign workflow with the sandbox profile — every job a TaskVine task on workers that HTCondor runs
in two racks, each file read with uproot through its home XCache (the sandbox site config) by a worker in that
cache's rack and recompressed to ZSTD, the analysis reading the verified copies — and prints the summary.

``make demo DEMO_SITE=sandbox-gsi`` runs the same campaign (``demo-sandbox-gsi``) over the sandbox's GSI origin and
caches, which admit X.509 proxies of the sandbox's test grid and test VO only: the user's proxy goes with every task
(one is made of the test grid's user certificate first if there is none of the test VO); ``DEMO_SITE=sandbox-token``
over its token origin and caches, with a bearer token of the sandbox's issuer.

``make demo DEMO_RUCIO=1`` names the dataset through the sandbox's Rucio instead of listing its files
(``demo-rucio``): each process's files are registered once as a container ``/HepvineDemo_<process>/Sandbox-v1/
NANOAODSIM`` (``hepvine.devtools.catalogue``), a replica of every file on the origin the caches front and of every
third file on the second site's origin too (of every sixth on that site only), and the spec names the containers.
``DEMO_RUCIO=failover`` (``demo-rucio-failover``): every file on both sites (containers ``.../Sandbox-v1-both/...``),
the second site preferred, and the second site's XRootD server taken down (SIGKILL, by its pidfile) as soon as it
has served its first file: the files not yet read come from their other replica, and the campaign is complete all
the same (the demo's services are stopped after it, and started whole by the next command).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import uproot

import hepvine.devtools.services
from hepvine.devtools import catalogue, generate, proxies, tokens
from hepvine.reading import credentials
from hepvine.routing import site

PROCESSES = {"ttbar": 8, "wjets": 6, "single_top_t_chan": 4, "data": 6}
EVENTS_PER_FILE = 10_000
SCHEMA = "nanoaod"
PHYSICS = "compact"  # the real layout's own physics selects 0.16% of ttbar events: the plots would hold a few events
COMPRESSION_LEVEL = 1  # LZMA
STORE_DIR = f"demo-{SCHEMA}-{PHYSICS}-{EVENTS_PER_FILE}-lzma{COMPRESSION_LEVEL}"
WRITE_S = 22  # seconds to generate one file on one core of this 2-core VM (2026-11-25), for the progress message


def _write(args):
    path, process, index = args
    if not Path(path).exists():
        generate.write_file(
            Path(path),
            process,
            EVENTS_PER_FILE,
            index=index,
            seed=2026,
            compression=uproot.LZMA(COMPRESSION_LEVEL),
            schema=SCHEMA,
            physics=PHYSICS,
        )
    return args


def ensure_dataset(services: dict, workers: int, origin: str | None = None) -> dict:
    """The demo spec, its files at ORIGIN (by default the sandbox's open origin; its GSI origin serves the same data
    directory); files missing from the data directory are generated first (in parallel)."""
    data = Path(services["xrootd"]["origin"]["data_dir"]) / "store" / STORE_DIR
    origin = origin or services["xrootd"]["origin"]["url"]
    jobs = [(str(data / p / f"{p}_{i:04d}.root"), p, i) for p, n in PROCESSES.items() for i in range(n)]
    todo = [j for j in jobs if not Path(j[0]).exists()]
    if todo:
        print(
            f"demo: generating {len(todo)} files of {EVENTS_PER_FILE} events in the {SCHEMA} layout ({PHYSICS} "
            f"physics) into the origin (once, ~{len(todo) * WRITE_S // workers // 60 + 1} min)",
            file=sys.stderr,
        )
        with ProcessPoolExecutor(workers) as pool:
            list(pool.map(_write, todo))
    spec: dict = {}
    for path, process, _index in jobs:
        url = f"{origin}//store/{STORE_DIR}/{process}/{Path(path).name}"
        sample = spec.setdefault(process, {}).setdefault("nominal", {"nevts_total": 0, "files": []})
        sample["files"].append({"path": url, "nevts": EVENTS_PER_FILE, "bytes": os.path.getsize(path)})
        sample["nevts_total"] += EVENTS_PER_FILE
        if generate.PROCESSES[process].xsec_pb is not None:
            spec[process]["xsec"] = generate.PROCESSES[process].xsec_pb
    return spec


def demo_rse(index: int, both: bool = False) -> tuple[str, ...]:
    """Where the demo's file INDEX (of its process) has replicas in the sandbox's Rucio (BOTH: every file on both
    sites)."""
    if both or index % 3 == 2:
        return (catalogue.ORIGIN, catalogue.SITE_B)
    return (catalogue.SITE_B,) if index % 6 == 5 else (catalogue.ORIGIN,)


def named_in_rucio(services: dict, spec: dict, both: bool = False) -> dict:
    """SPEC with each process's files registered in the sandbox's Rucio (once: Rucio keeps them while the services
    run; BOTH: every file on both sites, in containers of their own) and named by their container's DID."""
    from rucio.client import Client

    client = Client()
    scope = services["rucio"]["scope"]
    named = json.loads(json.dumps(spec))
    for process, variations in spec.items():
        container = f"/HepvineDemo_{process}/Sandbox-v1{'-both' if both else ''}/NANOAODSIM"
        files = [(site.ROOT_URL.match(f["path"]).group(2), f["nevts"]) for f in variations["nominal"]["files"]]
        if not list(client.list_dids(scope, {"name": container}, did_type="container")):
            print(f"demo: registering {len(files)} files of {process} in the sandbox's Rucio as {container}")
            rses = {lfn: demo_rse(i, both) for i, (lfn, _) in enumerate(files)}
            catalogue.register(client, services, container, {f"{container}/block-1": files}, rses.__getitem__)
        named[process]["nominal"] = {"rucio": f"{scope}:{container}"}
    return named


def site_b_preferred(site_path: str, out: Path) -> Path:
    """A copy of the site config SITE_PATH, at OUT, that prefers the second site's replicas."""
    text = Path(site_path).read_text()
    preferred = text.replace(
        f"prefer: [{catalogue.ORIGIN}, {catalogue.SITE_B}]", f"prefer: [{catalogue.SITE_B}, {catalogue.ORIGIN}]"
    )
    if preferred == text:
        raise SystemExit(f"demo: {site_path} does not prefer {catalogue.ORIGIN} first: no failover to show on it")
    out.write_text(preferred)
    return out


def take_down_after_first_read(services: dict, campaign: subprocess.Popen) -> str:
    """Once the second site's XRootD server has opened a file of the store (or CAMPAIGN has ended), SIGKILL it, by
    its pidfile (it runs as this user); what was done, in words."""
    log = Path(services["xrootd"]["origin_b"]["log"])
    pid = int((Path(services["state_dir"]) / "xrootd" / "origin-b" / "xrootd.pid").read_text().split()[0])
    seen, opened = log.stat().st_size, re.compile(rb"/store/\S+\.root")
    began = time.monotonic()
    while campaign.poll() is None:
        with open(log, "rb") as f:
            f.seek(seen)
            if opened.search(f.read()):
                os.kill(pid, signal.SIGKILL)
                after = time.monotonic() - began
                return f"{catalogue.SITE_B}'s server (pid {pid}) killed {after:.1f} s in, after its first read"
        time.sleep(0.1)
    return f"the campaign ended before {catalogue.SITE_B}'s server was asked for a file: nothing taken down"


def ensure_credential(services: dict, kind: str) -> None:
    """For a sandbox site that asks for a credential of KIND (x509, token): when the user has none valid for another
    hour where the grid tools look (for a proxy: none of the sandbox's test VO), make one of the sandbox's test grid
    or issuer there, as a user would (``voms-proxy-init -voms <VO>``: voms-proxy-fake in the sandbox; a token as
    ``htgettoken`` fetches one), and say so."""
    gsi = services["xrootd"]["origin_gsi"]["gsi"]
    try:
        found = credentials.find(kind)
        if found.time_left_s() > 3600 and (kind == "token" or found.authority == gsi["vo"]):
            return
    except credentials.CredentialError:
        pass
    if kind == "token":
        path, _ = credentials.token_location({**os.environ, "BEARER_TOKEN": ""}, os.getuid())
        out = path or Path(f"/tmp/bt_u{os.getuid()}")
        tokens.write(out, tokens.mint(services["xrootd"]["origin_token"]["tokens"], 12 * 3600))
        print(f"demo: the site asks for a bearer token; wrote one of the sandbox's issuer to {out}", flush=True)
        return
    out, _ = credentials.proxy_location(dict(os.environ), os.getuid())
    print(
        f"demo: the site asks for an X.509 proxy of VO {gsi['vo']}; making one of the sandbox's test grid in {out} "
        "(voms-proxy-fake, standing for voms-proxy-init)",
        flush=True,
    )
    proxies.make(gsi, Path(out), hours=12)


def positive(text: str) -> int:
    """An argparse type: an integer of at least 1."""
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of at least 1")
    return int(text)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="hepvine demo", description=__doc__.split("\n\n")[0])
    parser.add_argument("--campaign", help="default: demo on the sandbox site, demo-<site name> on another")
    parser.add_argument("--profile", default="profiles/sandbox")
    parser.add_argument("--site", default="site-configs/sandbox.yaml")
    parser.add_argument("--generate-workers", type=positive, default=2, help="processes generating the dataset")
    parser.add_argument("--recompress", default="zstd:5", help="codec for the copies the analysis reads, or off")
    parser.add_argument(
        "--rucio",
        nargs="?",
        const="names",
        choices=("names", "failover"),
        help="name the dataset through the sandbox's Rucio (campaign demo-rucio); failover: every file on both "
        "sites, the second preferred and taken down after its first read (campaign demo-rucio-failover)",
    )
    args = parser.parse_args(argv)
    services, chosen = hepvine.devtools.services.load(), site.load(args.site)
    name = "demo" if chosen.name == "sandbox" else f"demo-{chosen.name}"
    suffix = {None: "", "names": "-rucio", "failover": "-rucio-failover"}[args.rucio]
    args.campaign = args.campaign or f"{name}{suffix}"
    if chosen.credentials != "none":
        ensure_credential(services, chosen.credentials)
    spec = ensure_dataset(services, args.generate_workers, chosen.origins[0]["url"])
    if args.rucio:
        spec = named_in_rucio(services, spec, both=args.rucio == "failover")
    spec_path = Path("results") / f"{args.campaign}-input.json"
    spec_path.parent.mkdir(parents=True, exist_ok=True)
    spec_path.write_text(json.dumps(spec, indent=2) + "\n")
    if args.rucio == "failover":
        args.site = str(site_b_preferred(args.site, Path("results") / f"{args.campaign}-site.yaml"))
    start = time.time()
    done = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "snakemake",
            "--profile",
            args.profile,
            "--config",
            f"dataset={spec_path}",
            f"campaign={args.campaign}",
            f"recompress={args.recompress}",
            f"site={args.site}",
        ]
    )
    try:
        if args.rucio == "failover":
            print(f"demo: {take_down_after_first_read(services, done)}", flush=True)
    finally:  # never leave the campaign running without the demo (its services are stopped after the demo)
        if sys.exc_info()[0] is not None and done.poll() is None:
            done.send_signal(signal.SIGINT)  # Snakemake's clean stop: its workers and their jobs ended
        done.wait()
    report = Path("results") / args.campaign / "report.json"
    if done.returncode == 0 and report.exists():
        r = json.loads(report.read_text())
        # Nothing to run when the campaign is complete and up to date: say so, and that the figures are its last run's.
        ran = (
            f"in {time.time() - start:.0f} s"
            if report.stat().st_mtime >= start
            else f"is up to date, nothing ran (remove results/{args.campaign}/ to run it again); its last run"
        )
        # bytes_read counts what the analysis read (its branches, of the recompressed copies when there are some);
        # the cache section what came through the caches (whole files, read once for the copies).
        fetched = r.get("cache", {}).get("bytes_read_through_caches")
        through = f" ({fetched / 1e6:.0f} MB through the caches)" if fetched else ""
        print(
            f"demo: campaign {args.campaign} {ran}: {r['files']['ok']}/{r['files']['total']}"
            f" files, {r['events']} events, {r['bytes_read'] / 1e6:.0f} MB read by the analysis{through}, "
            f"{r['event_rate_hz']:.0f} Hz, {r['data_rate_gbps']:.3f} Gbps; complete: {r['complete']}. "
            f"Products in results/{args.campaign}/"
        )
        if args.rucio == "failover":
            failed_over = [i for i in r["inputs"] if i["fetch"]["failover"]]
            print(
                f"demo: {len(failed_over)} of {r['files']['total']} files read at their other replica after "
                f"{catalogue.SITE_B} went down (each file's record names the replica that failed: report.json, inputs)"
            )
    return done.returncode


if __name__ == "__main__":
    sys.exit(main())
