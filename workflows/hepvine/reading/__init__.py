"""Reading: a file read over its route with rounds and back-off (``fetch``) and the one classification of an
exception as a file's failure (``failures``). Uses the layers below."""
