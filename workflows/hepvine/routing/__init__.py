"""Placement and routing: which cache is each file's home (``placement``), the site config and a file's route
(``site``), and the batches and per-job index the main process writes (``index``). Uses ``hepvine.model`` and the
executor plugin's light ``workergroups`` only: parsed with the workflow, like the model."""
