"""The campaign's products: output.coffea and histograms.root (``output``), provenance, the caches' counters
(``cachestats``), the retries across runs (``retries``), the outcome in a few lines for the run's end
(``summary``), report.json and its pages (``report``) and the plots (``plots``). Uses the layers below."""
