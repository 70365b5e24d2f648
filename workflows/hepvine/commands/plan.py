"""``hepvine plan``: how fast a campaign can read on a site, and what limits it — for three ways of placing files and
tasks, from the site config's capacities and the per-core rate that ``make bench`` measured (here, in
results/bench/analysis.json, or as shipped in hepvine.commands.rates).

The model is a steady-state flow. Every file's bytes come from one cache; each cache's share of the bytes follows
from the placement (``random``: a random cache per file, so equal shares, and tasks on any core; ``hashing``:
``sha256(name) % N`` as at the 200 Gbps challenge, tasks on any core; ``affinity``: hepvine's rendezvous hashing
with the task in its cache's rack, spilling to other racks only when its rack's cores are full). Tasks not tied to a
rack spread over the racks in proportion to their cores, so bytes cross between racks. A rate R (Gbps) is feasible
when every cache serves at most its capacity, every rack's cores process at most cores x per-core rate, and each
direction between two racks carries at most the interconnect; bisection finds the largest feasible R, and the
constraint that fails just above it is the bottleneck. With ``--cold`` the origin must also send every byte once.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path

from hepvine.commands import rates
from hepvine.model import dataset as hv_dataset
from hepvine.routing import placement
from hepvine.routing import site as hv_site

POLICIES = ("random", "hashing", "affinity")
BENCH = Path("results/bench/analysis.json")
SIZE = re.compile(r"^(\d+):(\d+(?:\.\d+)?)(TB|GB|MB)$")
UNITS = {"TB": 1e12, "GB": 1e9, "MB": 1e6}


class PlanError(ValueError):
    pass


@dataclass(frozen=True)
class Capacities:
    """What a site can do, in Gbps: per cache (name → (rack, Gbps)), per rack's cores, between racks, the origin."""

    caches: dict[str, tuple[str, float]]
    rack_cpu: dict[str, float]
    interconnect: float | None
    origin: float | None


@dataclass(frozen=True)
class Outcome:
    policy: str
    gbps: float
    bottleneck: str
    cross_rack_gbps: float
    cache_shares: dict[str, float]


def capacities(site: hv_site.Site, per_core_gbps: float, cores_scale: float = 1.0) -> Capacities:
    missing = [c["name"] for c in site.caches if "gbps" not in c]
    if missing or not site.caches:
        raise PlanError(
            f"site config {site.path}: the planner needs caches with gbps (missing for: "
            f"{', '.join(missing) or 'no caches listed'})"
        )
    cores = site.rack_cores()
    if not cores:
        raise PlanError(
            f"site config {site.path}: the planner needs worker_groups named after racks, with cores and max_workers"
        )
    origin = sum(o["gbps"] for o in site.origins if "gbps" in o) or None
    return Capacities(
        caches={c["name"]: (c["rack"], float(c["gbps"])) for c in site.caches},
        rack_cpu={r: n * cores_scale * per_core_gbps for r, n in cores.items()},
        interconnect=site.interconnect_gbps,
        origin=origin,
    )


def shares(policy: str, files: list[tuple[str, float]], site: hv_site.Site) -> dict[str, float]:
    """Each cache's fraction of the bytes read, for POLICY, over FILES ((logical name, bytes) pairs)."""
    names = [c["name"] for c in site.caches]
    if policy == "random":
        return {name: 1 / len(names) for name in names}
    weights = [(c["name"], c.get("weight", 1.0)) for c in site.caches]
    total = sum(size for _, size in files)
    out = dict.fromkeys(names, 0.0)
    for lfn, size in files:
        home = placement.modulo_home(lfn, names) if policy == "hashing" else placement.home(lfn, weights)
        out[home] += size / total
    return out


def flows(rate: float, policy: str, share: dict[str, float], cap: Capacities) -> dict[tuple[str, str], float]:
    """Gbps from each cache's rack to each workers' rack at total RATE."""
    racks = sorted(cap.rack_cpu)
    demand = {r: 0.0 for r in racks}
    for cache, fraction in share.items():
        demand[cap.caches[cache][0]] = demand.get(cap.caches[cache][0], 0.0) + fraction * rate
    cpu_total = sum(cap.rack_cpu.values())
    if policy != "affinity":  # tasks land on any core
        return {(src, dst): d * cap.rack_cpu[dst] / cpu_total for src, d in demand.items() for dst in racks}
    out = {}
    local = {r: min(demand.get(r, 0.0), cap.rack_cpu[r]) for r in racks}
    spare = {r: cap.rack_cpu[r] - local[r] for r in racks}
    spare_total = sum(spare.values())
    for src, d in demand.items():
        out[(src, src)] = local.get(src, 0.0)
        excess = d - local.get(src, 0.0)
        for dst in racks:
            if dst != src and excess > 0:
                out[(src, dst)] = excess * (spare[dst] / spare_total if spare_total else 1 / max(len(racks) - 1, 1))
    return out


def violations(rate: float, policy: str, share: dict[str, float], cap: Capacities, cold: bool) -> list[str]:
    """The constraints that RATE breaks."""
    found = [f"cache {name} ({gbps:g} Gbps)" for name, (_, gbps) in cap.caches.items() if share[name] * rate > gbps]
    f = flows(rate, policy, share, cap)
    for rack, cpu in cap.rack_cpu.items():
        if sum(v for (_, dst), v in f.items() if dst == rack) > cpu * (1 + 1e-9):
            found.append(f"cores of {rack} ({cpu:g} Gbps)")
    if cap.interconnect:
        for (src, dst), v in f.items():
            if src != dst and v > cap.interconnect:
                found.append(f"interconnect {src} -> {dst} ({cap.interconnect:g} Gbps)")
    if cold and cap.origin and rate > cap.origin:
        found.append(f"origin ({cap.origin:g} Gbps)")
    return found


def best(policy: str, share: dict[str, float], cap: Capacities, cold: bool) -> Outcome:
    """The highest feasible rate for POLICY (bisection) and what stops it."""
    low, high = 0.0, sum(g for _, g in cap.caches.values()) + sum(cap.rack_cpu.values())
    for _ in range(60):
        mid = (low + high) / 2
        low, high = (low, mid) if violations(mid, policy, share, cap, cold) else (mid, high)
    limit = violations(low * 1.001 + 1e-9, policy, share, cap, cold)
    cross = sum(v for (src, dst), v in flows(low, policy, share, cap).items() if src != dst)
    return Outcome(policy, round(low, 1), "; ".join(limit) or "none", round(cross, 1), share)


def files_of(text: str, bytes_per_event: float | None) -> list[tuple[str, float]]:
    """(logical name, bytes read) per file: from 'COUNT:SIZE' (e.g. 219000:191TB, spread evenly over COUNT synthetic
    names), or from a dataset spec (each file's nevts x the benchmark's bytes read per event)."""
    match = SIZE.match(text)
    if match:
        count, size = int(match.group(1)), float(match.group(2)) * UNITS[match.group(3)]
        return [(f"/store/plan/file_{i:07d}.root", size / count) for i in range(count)]
    if bytes_per_event is None:
        raise PlanError("--dataset SPEC needs the bytes read per event: run `make bench` first")
    out = []
    for task in hv_dataset.tasks(hv_dataset.load(text)):
        if task.nevts is None:
            raise PlanError(
                f"{text}: {task.path} has no event count (a plain coffea fileset); give the preprocessed "
                "fileset (coffea.dataset_tools.preprocess: num_entries) or COUNT:SIZE"
            )
        out.append((hv_site.lfn(task.path), task.nevts * bytes_per_event))
    return out


@dataclass(frozen=True)
class Calibration:
    """The per-core rate the plan uses (Gbps), the bytes read per event, and where they come from."""

    per_core_gbps: float
    bytes_per_event: float
    source: str


def calibration(path: Path | None, codec: str) -> Calibration:
    """The hepvine analysis's per-core rate and bytes read per event on CODEC: from PATH (``make bench``'s results)
    if given; else from ``results/bench/analysis.json`` if it exists; else the figures shipped in
    hepvine.commands.rates."""
    if path is None and not BENCH.is_file():
        shipped = rates.ANALYSIS[codec]
        return Calibration(
            shipped["hz_per_core"] * shipped["bytes_per_event"] * 8 / 1e9,
            shipped["bytes_per_event"],
            f"shipped with hepvine: {rates.provenance()}",
        )
    path = path or BENCH
    try:
        bench = json.loads(path.read_text())
        per_event = bench["bytes"][f"read_per_event_{codec}"]
        hz = bench["rates_hz_per_core"][f"hepvine_{codec}"]
    except OSError as e:
        raise PlanError(f"{path}: {e.strerror}; run `make bench` (it writes it), or give --per-core-gbps") from e
    except (ValueError, KeyError, TypeError) as e:
        raise PlanError(
            f"{path}: not a `make bench` result with the {codec} analysis rate ({e!r}); run "
            "`make bench` again, or give --per-core-gbps"
        ) from e
    return Calibration(hz * per_event * 8 / 1e9, per_event, f"local bench {path}")


def estimated_seconds(
    site: hv_site.Site, files: list[tuple[str, float]], codec: str = "lzma"
) -> tuple[float, str] | None:
    """How long analysing FILES ((logical name, events) pairs) takes on SITE by this model, with the per-core rate
    and bytes read per event on CODEC (``calibration``): the affinity policy's rate where the site config gives its
    caches' capacities, else all its cores at the per-core rate; and how it was estimated. None when the site gives no
    cores, FILES no events, or the calibration cannot be read."""
    events = sum(n for _, n in files)
    cores = sum(site.rack_cores().values())
    if not events or not cores:
        return None
    try:
        calib = calibration(None, codec)
    except PlanError:  # a local bench result that cannot be read: no estimate rather than a failed run
        return None
    read = [(name, n * calib.bytes_per_event) for name, n in files]
    total = events * calib.bytes_per_event
    gbps, how = cores * calib.per_core_gbps, f"{cores} cores at {calib.per_core_gbps:.3f} Gbps"
    if site.caches and all("gbps" in c for c in site.caches):
        outcome = best("affinity", shares("affinity", read, site), capacities(site, calib.per_core_gbps), cold=False)
        if outcome.gbps:
            gbps, how = outcome.gbps, f"{outcome.gbps:g} Gbps with affinity ({outcome.bottleneck})"
    return total * 8 / 1e9 / gbps, (
        f"hepvine plan's model: {len(files):,} files, {events:,.0f} events, {total / 1e9:,.1f} GB read at {how}, "
        f"{codec} inputs, {calib.source}"
    )


def plot(outcomes_by_scale: dict[float, list[Outcome]], cores: int, title: str, path: Path) -> None:
    """The sustained rate of each policy against the number of cores (the site's pools scaled)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    scales = sorted(outcomes_by_scale)
    for i, policy in enumerate(POLICIES):
        ax.plot([s * cores for s in scales], [outcomes_by_scale[s][i].gbps for s in scales], marker="o", label=policy)
    ax.axvline(cores, color="grey", linestyle=":", label="the site's cores")
    ax.set_xscale("log")
    ax.set_ylim(bottom=0)
    ax.set_title(title, fontsize=9)
    ax.set_xlabel("cores (the site's worker pools scaled)")
    ax.set_ylabel("sustained data rate (Gbps)")
    ax.legend()
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="hepvine plan", description=__doc__.split("\n\n")[0])
    parser.add_argument("--site", required=True, help="site config, e.g. site-configs/uchicago-af.yaml")
    parser.add_argument("--dataset", required=True, help="a dataset spec, or COUNT:SIZE such as 219000:191TB")
    parser.add_argument("--codec", default="zstd", choices=("zstd", "lzma"), help="the inputs' compression")
    parser.add_argument(
        "--per-core-gbps",
        type=float,
        help=f"per-core rate (default: the analysis rate on --codec from {BENCH} if it exists, else "
        "the one shipped with hepvine)",
    )
    parser.add_argument("--bench", type=Path, help=f"the analysis benchmark's results (default: {BENCH} if it exists)")
    parser.add_argument("--cold", action="store_true", help="caches start empty: the origin sends every byte once")
    parser.add_argument("--output", type=Path, default=Path("results/plan"), help="directory for the table and plot")
    args = parser.parse_args(argv)
    try:
        site = hv_site.load(args.site)
        calib = calibration(args.bench, args.codec)
        if args.per_core_gbps:
            calib = Calibration(args.per_core_gbps, calib.bytes_per_event, "given (--per-core-gbps)")
        per_core = calib.per_core_gbps
        files = files_of(args.dataset, calib.bytes_per_event)
        cap = capacities(site, per_core)
    except (PlanError, hv_site.SiteError, hv_dataset.DatasetError) as e:
        print(f"hepvine plan: {e}", file=sys.stderr)
        return 2
    share = {policy: shares(policy, files, site) for policy in POLICIES}
    outcomes = [best(policy, share[policy], cap, args.cold) for policy in POLICIES]
    total = sum(size for _, size in files)
    cores = sum(site.rack_cores().values())
    lines = [
        f"hepvine plan: site {site.name}, {len(files):,} files, {total / 1e12:,.2f} TB read, {cores:,} cores at "
        f"{per_core:.3f} Gbps each, caches {'cold' if args.cold else 'warm'}",
        f"per-core rate: {per_core:.3f} Gbps, {calib.source}"
        + ("" if args.per_core_gbps else f" ({args.codec} inputs, {calib.bytes_per_event:g} bytes per event)"),
        f"{'policy':<10} {'Gbps':>8} {'cross-rack Gbps':>16} {'campaign':>10}  bottleneck",
    ]
    for o in outcomes:
        minutes = total * 8 / 1e9 / o.gbps / 60 if o.gbps else float("inf")
        lines.append(f"{o.policy:<10} {o.gbps:>8.1f} {o.cross_rack_gbps:>16.1f} {minutes:>8.1f} m  {o.bottleneck}")
    print("\n".join(lines))
    args.output.mkdir(parents=True, exist_ok=True)
    scales = [1 / 16, 1 / 8, 1 / 4, 1 / 2, 3 / 4, 1.0, 1.5, 2.0, 4.0]
    by_scale = {s: [best(p, share[p], capacities(site, per_core, s), args.cold) for p in POLICIES] for s in scales}
    plot(
        by_scale,
        cores,
        f"{site.name}: {len(files):,} files, {per_core:.3f} Gbps per core, caches {'cold' if args.cold else 'warm'}",
        args.output / f"{site.name}.png",
    )
    (args.output / f"{site.name}.json").write_text(
        json.dumps(
            {
                "site": site.name,
                "files": len(files),
                "bytes": total,
                "cores": cores,
                "per_core_gbps": per_core,
                "per_core_source": calib.source,
                "codec": args.codec,
                "cold": args.cold,
                "policies": [
                    {
                        "policy": o.policy,
                        "gbps": o.gbps,
                        "bottleneck": o.bottleneck,
                        "cross_rack_gbps": o.cross_rack_gbps,
                        "cache_shares": o.cache_shares,
                    }
                    for o in outcomes
                ],
                "cores_sweep": {str(s * cores): {o.policy: o.gbps for o in by_scale[s]} for s in scales},
            },
            indent=2,
        )
        + "\n"
    )
    print(f"table and plot: {args.output}/{site.name}.json, {args.output}/{site.name}.png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
