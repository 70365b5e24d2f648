"""``make bench`` (recompression part): how fast ``hepvine.recompress`` copies real CMSSW NanoAOD, step by step.

For every file of ``../shared/nanoaod`` as it is (10–1,000 events: fixed costs dominate), and for a bigger input made
from one of them (``--enlarge N`` copies of ``ttH_M125_2017.root`` merged by ROOT into one LZMA-9 file with ROOT's
own basket sizes: real branch layout and per-event cost; its repeated events compress better than real data, so read
its sizes, not its ratio), times the steps one by one in this process: stage (read the source to local disk), plan
(open it, sort its objects), hadd+rootcp (ROOT writes the copy: CPU of the child processes), verify (uproot reads
source and copy in bulk). Rates are of the input's size per core (each step runs on one core). Writes
results/bench/recompress.json.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import tempfile
import time
from pathlib import Path

import uproot

from hepvine import recompress

OUT = Path("results/bench")
NANOAOD = Path(__file__).resolve().parents[1].parent / "shared" / "nanoaod"


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def measure(source: Path, codec: recompress.Codec, work: Path) -> dict:
    """The steps of one recompression of SOURCE, timed."""
    staged, copy = work / "staged.root", work / "copy.root"
    times = {}
    t0 = time.perf_counter()
    recompress.stage(str(source), staged)
    times["stage"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    with uproot.open(staged) as src:
        what = recompress.plan(src)
        times["plan"] = time.perf_counter() - t0
        t0, c0 = time.perf_counter(), children_cpu()
        recompress.write_copy(staged, copy, what, codec, str(source))
        times["root_copy"], root_cpu = time.perf_counter() - t0, children_cpu() - c0
        t0 = time.perf_counter()
        entries = recompress.verify(str(source), src, copy, what)
        times["verify"] = time.perf_counter() - t0
    size, copy_size = source.stat().st_size, copy.stat().st_size
    total = sum(times.values())
    staged.unlink()
    copy.unlink()
    with uproot.open(source) as f:
        branches = len(f["Events"].branches) if f.classnames(cycle=False).get("Events") == "TTree" else None
    return {"file": source.name, "mb": round(size / 1e6, 3), "copy_mb": round(copy_size / 1e6, 3),
            "events": entries.get("Events"), "events_branches": branches,
            "seconds": {k: round(v, 3) for k, v in times.items()}, "root_cpu_seconds": round(root_cpu, 3),
            "total_seconds": round(total, 3), "mb_per_s": round(size / 1e6 / total, 2),
            "root_copy_mb_per_s": round(size / 1e6 / times["root_copy"], 2),
            "verbatim": what.verbatim_trees}


def enlarged(copies: int, work: Path) -> Path:
    """COPIES of ttH_M125_2017.root as one LZMA-9 file, baskets sized by ROOT (hadd -O)."""
    path = OUT / "inputs" / f"ttH_M125_2017_x{copies}.root"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = work / path.name
        subprocess.run([recompress.root_program("hadd"), "-O", "-f209", str(tmp)]
                       + [str(NANOAOD / "ttH_M125_2017.root")] * copies, check=True, capture_output=True)
        tmp.replace(path)
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--codec", default="zstd:5")
    parser.add_argument("--enlarge", type=int, default=100, help="copies merged into the bigger input (0: none)")
    parser.add_argument("--only", nargs="*", help="file names of ../shared/nanoaod to time (default: all)")
    args = parser.parse_args(argv)
    codec = recompress.parse_codec(args.codec)
    sources = [p for p in sorted(NANOAOD.glob("*.root")) if not args.only or p.name in args.only]
    rows = []
    with tempfile.TemporaryDirectory(dir=OUT if OUT.exists() else None) as tmp:
        work = Path(tmp)
        if args.enlarge:
            sources.append(enlarged(args.enlarge, work))
        for source in sources:
            row = measure(source, codec, work)
            rows.append(row)
            s = row["seconds"]
            print(f"{row['file']:<75} {row['mb']:8.2f} MB {row['events'] or '-':>7} ev: stage {s['stage']:.2f} "
                  f"plan {s['plan']:.2f} root {s['root_copy']:.2f} verify {s['verify']:.2f} s = "
                  f"{row['mb_per_s']:.2f} MB/s ({row['root_copy_mb_per_s']:.2f} MB/s ROOT alone)", flush=True)
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "recompress.json").write_text(json.dumps({"codec": str(codec), "files": rows}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
