"""foreshock."""

import os

# Polars' allocator (jemalloc) gives freed pages back to the kernel soon after they are freed
# (Polars' own setting: dirty_decay_ms:500,muzzy_decay_ms:1000), and an ingest frees and makes
# again a batch's frames every second or so: the kernel then zeroes every page again (25-28 %
# of an ingest's CPU on the simulator's 1,024-GPU landing).  Keeping freed pages for 30 s halves
# that (1.05-1.11x less CPU) for about 150 MB more peak RSS (docs/scale.md, ingest, seventh
# pass).  Polars appends this variable to its own setting as it loads (the later value wins),
# so it is set here, before any module imports Polars.  A value the user exported wins; Polars'
# own setting, which a parent process that imported Polars passes on, does not.
JEMALLOC_CONF = "dirty_decay_ms:30000,muzzy_decay_ms:30000"
_POLARS_OWN = (
    "dirty_decay_ms:500,muzzy_decay_ms:1000",
    "dirty_decay_ms:500,muzzy_decay_ms:1000,thp:always,metadata_thp:always",
)
if os.environ.get("_RJEM_MALLOC_CONF") in (None, *_POLARS_OWN):
    os.environ["_RJEM_MALLOC_CONF"] = JEMALLOC_CONF
