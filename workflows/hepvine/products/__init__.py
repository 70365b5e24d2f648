"""The campaign's products: output.coffea and histograms.root (``output``), provenance, the caches' counters
(``cachestats``), the retries across runs (``retries``), report.json and its pages (``report``) and the plots
(``plots``). Uses the layers below."""
