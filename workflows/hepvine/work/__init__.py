"""The work on one file: the user's analysis run as coffea's Runner runs it (``processor``), and the recompression of
inputs (``transcode``, the basket transcoder and its C++ source; ``recompress``). Uses the layers below."""
