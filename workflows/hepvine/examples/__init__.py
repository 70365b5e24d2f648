"""Analyses that ship with hepvine, each a coffea processor named by the config key ``analysis`` as
``hepvine.examples.<module>:<Name>``: ``agc`` (the Analysis Grand Challenge CMS ttbar selection, the demo's) and
``dimuon`` (a dimuon mass spectrum). A physicist's own analysis is written the same way, in a file of theirs
(``analysis=my_analysis.py:MyProcessor``); README "Run your own processor"."""
