"""The ``hepvine`` command: ``hepvine generate`` (a NanoAOD-like sample dataset), ``hepvine demo`` (the smoke
campaign on the sandbox), ``hepvine plan`` (a campaign's data rate on a site, per placement policy), ``hepvine
compare`` (are two campaigns' histograms byte-identical), ``hepvine pack-env`` (this environment packed into one
file for workers that have nothing installed), ``hepvine recompress`` (one file, faithfully, to another
codec), ``hepvine submit`` (a campaign as an HTCondor job that outlives the session), ``hepvine status`` (where a
campaign stands), ``hepvine datasets`` (what Rucio lists for a name, and a fileset of it). Each subcommand's own
``--help`` tells its options."""

from __future__ import annotations

import sys
from typing import Callable

COMMANDS = ("generate", "demo", "plan", "compare", "pack-env", "recompress", "submit", "status", "datasets")


def command_main(name: str) -> Callable[[list[str]], int]:
    """The ``main`` of subcommand NAME (one of COMMANDS). Imported only when that subcommand runs: each brings its own
    libraries (uproot, matplotlib, ...), which ``hepvine --help`` and the other subcommands need not load."""
    if name == "generate":
        from hepvine.devtools.generate import main
    elif name == "demo":
        from hepvine.devtools.demo import main
    elif name == "plan":
        from hepvine.commands.plan import main
    elif name == "compare":
        from hepvine.commands.compare import main
    elif name == "pack-env":
        from hepvine.commands.packenv import main
    elif name == "recompress":
        from hepvine.work.recompress import main
    elif name == "submit":
        from hepvine.commands.submit import main
    elif name == "status":
        from hepvine.commands.status import main
    elif name == "datasets":
        from hepvine.commands.datasets import main
    else:
        raise ValueError(f"unknown command {name!r}: choose one of {', '.join(COMMANDS)}")
    return main


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] not in COMMANDS:
        said = f"unknown command {argv[0]!r}; " if argv and argv[0] not in ("-h", "--help") else ""
        print(f"usage: hepvine {{{','.join(COMMANDS)}}} [options]\n{said}{__doc__.splitlines()[0]}", file=sys.stderr)
        return 0 if argv[:1] in (["-h"], ["--help"]) else 2
    return command_main(argv[0])(argv[1:])


if __name__ == "__main__":
    sys.exit(main())
