"""hepvine: HEP analysis campaigns as Snakemake workflows on TaskVine workers provisioned by HTCondor, reading
ROOT files through XRootD and XCache.

The package is in layers, each a subpackage that uses only those before it (tests/workflow/test_layers.py checks the
imports; docs/architecture.md, "Layers"):

- ``model``: the data model — datasets (coffea filesets, AGC specs), per-file records, limits, crash-safe writes;
- ``routing``: each file's home cache and route, the batches and the per-job index;
- ``reading``: a file read over its route, and the classification of a failure;
- ``work``: the user's analysis run as coffea's Runner runs it, and the recompression;
- ``examples``: the analyses that ship with hepvine (the AGC ttbar selection, a dimuon spectrum);
- ``jobs``: a campaign's batch job and merge step;
- ``products``: output.coffea, histograms.root, report.json, provenance, plots;
- ``devtools``: the sandbox's services file, test data and the demo (not needed to run a campaign);
- ``commands``: the ``hepvine`` command line.
"""

__version__ = "0.1.0"
