"""The campaign's jobs: one batch of files (``driver``: each file in a process of its own, one record each) and one
node of the merge tree (``merge``). Uses the layers below and the examples only through the config's analysis."""
