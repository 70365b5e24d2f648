"""The ``hepvine`` command line (``cli``) and its product subcommands: ``plan`` (with the rates ``make bench``
measured, ``rates``), ``compare``, ``pack-env`` (``packenv``). Uses any layer below."""
