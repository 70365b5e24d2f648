"""Development and demonstration tools, not needed to run a campaign: the sandbox's services file (``services``),
NanoAOD-like test data (``generate``, with the real NanoAOD layout it follows, ``nanoschema``), ``make demo``
(``demo``) and the writer of the Snakemake profiles' config.yaml files (``profiles``). Uses any layer."""
