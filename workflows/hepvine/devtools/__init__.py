"""Development and demonstration tools, not needed to run a campaign: the sandbox's services file (``services``),
NanoAOD-like test data (``generate``, with the real NanoAOD layout it follows, ``nanoschema``) and ``make demo``
(``demo``). Uses any layer."""
