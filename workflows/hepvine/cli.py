"""The ``hepvine`` command: ``hepvine generate`` (a NanoAOD-like sample dataset), ``hepvine demo`` (the smoke
campaign on the sandbox), ``hepvine plan`` (a campaign's data rate on a site, per placement policy), ``hepvine
compare`` (are two campaigns' histograms byte-identical), ``hepvine pack-env`` (this environment packed into one
file for workers that have nothing installed), ``hepvine recompress`` (one file, faithfully, to another
codec). Each subcommand's own ``--help`` tells its options."""

from __future__ import annotations

import sys

COMMANDS = {
    "generate": "hepvine.generate",
    "demo": "hepvine.demo",
    "plan": "hepvine.plan",
    "compare": "hepvine.compare",
    "pack-env": "hepvine.packenv",
    "recompress": "hepvine.recompress",
}


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] not in COMMANDS:
        said = f"unknown command {argv[0]!r}; " if argv and argv[0] not in ("-h", "--help") else ""
        print(f"usage: hepvine {{{','.join(COMMANDS)}}} [options]\n{said}{__doc__.splitlines()[0]}", file=sys.stderr)
        return 0 if argv[:1] in (["-h"], ["--help"]) else 2
    module = __import__(COMMANDS[argv[0]], fromlist=["main"])
    return module.main(argv[1:])


if __name__ == "__main__":
    sys.exit(main())
