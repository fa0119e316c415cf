"""The studies: one module per paper (fedmps, gfpl, protonorm, mpfedcl, fedic), the leakage study (privacy), the
cross-paper benchmark.

Each draws its tables and figures from runs read through :mod:`fedlib.results`, on the study base
(:mod:`fedlib.study`: ``Plan``, the schema, the notebooks' set-up); :mod:`fedlib.papers.catalog` lists them.
Every study also runs headless::

    python -m fedlib.papers.<study> [--profile P] [--methods M ...] [--seeds S ...] [--rounds N] [--workers W]
"""
