"""The studies' claims ledgers: one module per study, beside its ``params/<study>/claims.yaml``.

A ledger module turns what a study's notebook computed (its results ``res``) into the named cells its claims read
(``tables``: :class:`fedlib.claims.Cells`), and judges the claims on them (``ledger``: :func:`fedlib.claims.ledger`).
It imports its study's plan, never the study module: the study ``fedlib.papers.<study>`` draws the tables and
figures and re-exports ``tables`` and ``ledger`` (the study interface, :class:`fedlib.papers.catalog.Study`).
"""
