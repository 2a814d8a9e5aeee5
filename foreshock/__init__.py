"""foreshock."""

import os

# Polars' allocator (jemalloc) gives freed pages back to the kernel soon after they are freed
# (Polars' own setting: dirty_decay_ms:500,muzzy_decay_ms:1000), and an ingest frees and makes
# again a batch's frames every second or so: the kernel then zeroes every page again (25-28 %
# of an ingest's CPU on the simulator's 1,024-GPU landing).  Keeping freed pages for 5 s takes
# most of that away: at 1,024 GPUs as much as 30 s does (about 1.1x less CPU, +0.1 GB peak),
# at 4,096 GPUs x 4 days 1.15x less CPU for +0.3 GB peak (30 s: 1.29x for +0.9 GB; docs/scale.md,
# ingest, seventh pass).  Polars appends this variable to its own setting as it loads (the
# later value wins), so it is set here, before any module imports Polars.  A value the user
# exported wins; Polars' own setting, which a parent process that imported Polars passes on,
# does not.
JEMALLOC_CONF = "dirty_decay_ms:5000,muzzy_decay_ms:5000"
_POLARS_OWN = (
    "dirty_decay_ms:500,muzzy_decay_ms:1000",
    "dirty_decay_ms:500,muzzy_decay_ms:1000,thp:always,metadata_thp:always",
)
if os.environ.get("_RJEM_MALLOC_CONF") in (None, *_POLARS_OWN):
    os.environ["_RJEM_MALLOC_CONF"] = JEMALLOC_CONF
