"""The studies' plans: one module per study, beside its ``params/<study>/experiments.yaml``.

A plan module holds what decides which runs a study makes: its :class:`fedlib.study.Plan` subclass (the profile's
settings and overrides), the config of each method on each of its settings, its grids, every ``(config, seed)`` of a
profile (``all_jobs``) and the tables the run archive keeps (``archived_tables``). The study module
``fedlib.papers.<study>`` draws the tables and figures from those runs; the plans know nothing of drawing.
"""
