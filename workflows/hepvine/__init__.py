"""hepvine: HEP analysis campaigns as Snakemake workflows on TaskVine workers provisioned by HTCondor, reading
ROOT files through XRootD and XCache."""

__version__ = "0.1.0"
