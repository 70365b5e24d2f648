"""``python -m snakemake_executor_plugin_taskvine stop-kept [WORKDIR]``: stop the workers kept for a working directory
(kept.main)."""

from .kept import main

raise SystemExit(main())
