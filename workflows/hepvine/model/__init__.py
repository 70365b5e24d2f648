"""The data model: what a campaign is made of, as plain data — crash-safe writes (``atomic``), the per-file record
(``records``), time and disk limits from file sizes (``limits``), the eras of the AGC selection (``eras``), coffea
filesets (``fileset``) and datasets of either shape (``dataset``). May use only the standard library, PyYAML and
jsonschema: the Snakefile imports this layer while it parses, in the main process and on every job."""
