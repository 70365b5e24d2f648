"""``make bench`` (recompression part): how fast ``hepvine.work.recompress`` copies real CMSSW NanoAOD, step by step,
with each of its two engines side by side in one run: the basket transcoder (``hepvine.work.transcode``) and hadd.

For every file of ``../shared/nanoaod`` as it is (10–1,000 events: fixed costs dominate), for a bigger input made
from one of them (``--enlarge N`` copies of ``ttH_M125_2017.root`` merged by ROOT into one LZMA-9 file with ROOT's
own basket sizes: real branch layout, but its repeated events compress far better than real data, so it costs far
less to decompress than real data of its size would), and for a generated input of real density (``--generated N``
events of ttbar in the real layout, ``hepvine generate --schema nanoaod``, LZMA-9: ~2.9 kB an event, values drawn
from a real file's distributions, the input that says what a production file costs), times the steps one by one in
this process, each engine on its own staged copy:

- hadd: stage (read the source to local disk), plan (uproot opens it, sorts its objects), hadd+rootcp (ROOT writes the
  copy: CPU of the child processes), verify (uproot reads source and copy in bulk);
- transcode: stage, open (uproot reads the keys), transcode (the C++ program; its own split: read, decompress
  -- the floor of any engine that recompresses --, hash, compress, other), verify (the copy's tree records read for
  the compared members, its baskets in bulk from one memory map, decompressed by uproot and hashed).

The transcoder is also timed with each codec of ``--other-codecs`` (the choice a campaign's ``recompress`` setting
makes between copy size and rate). Files the transcoder leaves to hadd say why and have no transcode row. Rates are
of the input's size per core (each step runs on one core): by wall time, and by CPU time (this process's and its
children's: on a machine shared with other work, the CPU time is the closer measure of one free core).

Last, one table of each file's whole recompression with a transcoder program started per file (as before), with the
job's one running program and the check decompressing each basket by a call of its own (as before it batched them),
and as jobs do now, side by side: the fixed cost a file pays, as the intercept over the real files. Writes
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

import numpy as np
import uproot

from hepvine.devtools import generate
from hepvine.work import recompress, transcode

OUT = Path("results/bench")
NANOAOD = Path(__file__).resolve().parents[1].parent / "shared" / "nanoaod"
DENSE = NANOAOD / "ttH_M125_2017.root"  # the file the bigger input is made of: real layout, 100 events


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def cpu() -> float:
    """CPU seconds of this process and its finished children."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime + children_cpu()


class Steps:
    """Wall seconds per step, in order."""

    def __init__(self):
        self.seconds, self.t0 = {}, time.perf_counter()

    def lap(self, name: str) -> None:
        now = time.perf_counter()
        self.seconds[name] = round(now - self.t0, 3)
        self.t0 = now


def measure_hadd(source: Path, codec: recompress.Codec, work: Path) -> tuple[dict, dict]:
    """hadd's steps on SOURCE: (seconds per step, what else is worth reporting)."""
    staged, copy = work / "staged.root", work / "hadd.root"
    steps, cpu0 = Steps(), cpu()
    recompress.stage(str(source), staged)
    steps.lap("stage")
    with recompress.open_local(staged) as src:
        what = recompress.plan(src)
        steps.lap("plan")
        c0 = children_cpu()
        recompress.write_copy(staged, copy, what, codec, str(source))
        steps.lap("root_copy")
        root_cpu = children_cpu() - c0
        entries = recompress.verify(str(source), src, copy, what, codec)
        steps.lap("verify")
    extra = {
        "copy_mb": round(copy.stat().st_size / 1e6, 3),
        "events": entries.get("Events"),
        "cpu_seconds": round(cpu() - cpu0, 3),
        "root_cpu_seconds": round(root_cpu, 3),
        "verbatim": what.verbatim_trees,
    }
    staged.unlink()
    copy.unlink()
    return steps.seconds, extra


def measure_transcode(source: Path, codec: recompress.Codec, work: Path) -> tuple[dict, dict] | str:
    """The transcoder's steps on SOURCE, or why it leaves SOURCE to hadd."""
    staged, copy = work / "staged.root", work / "transcode.root"
    steps, cpu0 = Steps(), cpu()
    recompress.stage(str(source), staged)
    steps.lap("stage")
    try:
        with recompress.open_local(staged) as src:
            src.classnames(cycle=False)
            steps.lap("open")
            try:
                manifest = transcode.run(staged, copy, codec.setting)
            except transcode.Unsupported as e:
                return str(e)
            steps.lap("transcode")
            entries = recompress.verify_transcoded(str(source), src, copy, manifest)
            steps.lap("verify")
        extra = {
            "copy_mb": round(copy.stat().st_size / 1e6, 3),
            "events": entries.get("Events"),
            "cpu_seconds": round(cpu() - cpu0, 3),
            "transcoder_seconds": {k: round(v, 3) for k, v in manifest["seconds"].items()},
        }
    finally:
        staged.unlink(missing_ok=True)
        copy.unlink(missing_ok=True)
    return steps.seconds, extra


def rates(size: int, seconds: dict, cpu_seconds: float, events: int | None) -> dict:
    """Input MB (and events) per second of wall time and of CPU time."""
    total = sum(seconds.values())
    row = {
        "total_seconds": round(total, 3),
        "mb_per_s": round(size / 1e6 / total, 2),
        "mb_per_cpu_s": round(size / 1e6 / cpu_seconds, 2),
    }
    if events:
        row["events_per_s"] = round(events / total)
    return row


def transcoded(source: Path, codec: recompress.Codec, work: Path) -> dict:
    """The transcoder's row for SOURCE at CODEC."""
    measured = measure_transcode(source, codec, work)
    if isinstance(measured, str):
        return {"fallback": measured}
    seconds, extra = measured
    floor = extra["transcoder_seconds"]["inflate"]
    size = source.stat().st_size
    return {
        "seconds": seconds,
        **extra,
        **rates(size, seconds, extra["cpu_seconds"], extra["events"]),
        "decompress_only_mb_per_s": round(size / 1e6 / floor, 2) if floor else None,
    }


def enlarged(copies: int, work: Path) -> Path:
    """COPIES of ttH_M125_2017.root as one LZMA-9 file, baskets sized by ROOT (hadd -O)."""
    path = OUT / "inputs" / f"ttH_M125_2017_x{copies}.root"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = work / path.name
        subprocess.run(
            [recompress.root_program("hadd"), "-O", "-f209", str(tmp)] + [str(DENSE)] * copies,
            check=True,
            capture_output=True,
        )
        tmp.replace(path)
    return path


def generated(events: int) -> Path:
    """EVENTS of ttbar in the real NanoAOD layout, LZMA-9, written by hepvine generate the first time."""
    path = OUT / "inputs" / f"generated_nanoaod_ttbar_{events}.root"
    if not path.exists():
        generate.write_file(path, "ttbar", events, seed=7, compression=uproot.LZMA(9), schema="nanoaod")
    return path


MODES = {
    "program_per_file": "a program per file",
    "per_job_baskets_alone": "a program per job, the check's baskets one zstd call each",
    "program_per_job": "a program per job (now)",
}


def per_file_costs(sources: list[Path], codec: recompress.Codec, work: Path) -> dict:
    """Each file's whole recompression (``recompress.recompress``: stage, transcode or hadd, verify) timed side by
    side three ways: with a transcoder program started for the file (as every file did before programs were kept per
    job); with the job's running one and the check decompressing each basket of the copy by a call of its own (as
    before the check batched them: ``transcode.basket_digests``); and as jobs do now. The fixed cost per file of each
    is the intercept of a straight line through (MB, seconds) of the real files."""
    batched = transcode.basket_digests
    rows, closed = [], True
    for source in sources:
        row = {"file": source.name, "mb": round(source.stat().st_size / 1e6, 3)}
        for mode in MODES:
            if mode == "program_per_file":
                transcode.SHARED.close()
                closed = True
            elif closed:  # the job's program, started again and warmed up on this file, untimed, as a job's would be
                recompress.start()
                recompress.recompress(str(source), work / "copy.root", codec, {})
                (work / "copy.root").unlink()
                closed = False
            transcode.basket_digests = (
                (lambda tables, chunk: [transcode.basket_digest(*t, chunk) for t in tables])
                if mode == "per_job_baskets_alone"
                else batched
            )
            how, started = {}, time.perf_counter()
            recompress.recompress(str(source), work / "copy.root", codec, how)
            row[mode] = round(time.perf_counter() - started, 3)
            row["engine"] = how["engine"]
            (work / "copy.root").unlink()
        transcode.basket_digests = batched
        rows.append(row)
        print(
            f"{row['file']:<42.42} {row['mb']:7.2f} MB  "
            + ", ".join(f"{what} {row[mode]:.3f} s" for mode, what in MODES.items())
            + f" ({row['engine']})",
            flush=True,
        )
    real = [r for r in rows if (NANOAOD / r["file"]).exists() and r["engine"] == "transcode"]
    sizes = [r["mb"] for r in real]
    fixed = {mode: round(float(np.polyfit(sizes, [r[mode] for r in real], 1)[1]), 3) for mode in MODES}
    print(f"fixed cost per file (intercept over {len(real)} real files the transcoder copies): {fixed}", flush=True)
    return {"files": rows, "fixed_seconds_per_file": fixed, "fit_over": len(real)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--codec", default="zstd:5")
    parser.add_argument("--enlarge", type=int, default=100, help="copies merged into the bigger input (0: none)")
    parser.add_argument(
        "--generated",
        type=int,
        default=10_000,
        help="events of the generated real-density input (0: none; written once: ~1 min a 10,000)",
    )
    parser.add_argument(
        "--other-codecs",
        default="zstd:1,lz4:1",
        help="comma-separated codecs the transcoder is also timed with ('' for none)",
    )
    parser.add_argument("--only", nargs="*", help="file names of ../shared/nanoaod to time (default: all)")
    args = parser.parse_args(argv)
    codec = recompress.parse_codec(args.codec)
    others = [recompress.parse_codec(c) for c in args.other_codecs.split(",") if c.strip()]
    sources = [p for p in sorted(NANOAOD.glob("*.root")) if not args.only or p.name in args.only]
    recompress.start()  # the transcoder built (and running) before any timing
    rows = []
    with tempfile.TemporaryDirectory(dir=OUT if OUT.exists() else None) as tmp:
        work = Path(tmp)
        if args.enlarge:
            sources.append(enlarged(args.enlarge, work))
        if args.generated:
            sources.append(generated(args.generated))
        for source in sources:
            size = source.stat().st_size
            row = {"file": source.name, "mb": round(size / 1e6, 3)}
            seconds, extra = measure_hadd(source, codec, work)
            row["hadd"] = {"seconds": seconds, **extra, **rates(size, seconds, extra["cpu_seconds"], extra["events"])}
            row["transcode"] = transcoded(source, codec, work)
            row["transcode_other_codecs"] = {str(other): transcoded(source, other, work) for other in others}
            rows.append(row)
            print(line(row), flush=True)
        fixed = per_file_costs(sources, codec, work)
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "recompress.json").write_text(
        json.dumps(
            {"codec": str(codec), "other_codecs": [str(c) for c in others], "files": rows, "per_file": fixed}, indent=2
        )
        + "\n"
    )
    return 0


def line(row: dict) -> str:
    """ROW in one line: each engine's steps and rate."""
    said = [f"{row['file']:<42.42} {row['mb']:7.2f} MB"]
    engines = [
        ("hadd", row["hadd"]),
        ("transcode", row["transcode"]),
        *((f"transcode {c}", r) for c, r in row["transcode_other_codecs"].items()),
    ]
    for engine, r in engines:
        if "fallback" in r:
            said.append(f"{engine}: not used ({r['fallback']})")
            continue
        steps = " ".join(f"{k} {v:.2f}" for k, v in r["seconds"].items())
        said.append(
            f"{engine}: {steps} = {r['total_seconds']:.2f} s (CPU {r['cpu_seconds']:.2f} s), "
            f"{r['mb_per_s']:.2f} MB/s, copy {r['copy_mb']:.1f} MB"
        )
    return " | ".join(said)


if __name__ == "__main__":
    raise SystemExit(main())
