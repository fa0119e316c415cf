"""Per-paper study definitions: which runs a paper notebook needs and how to read them.

Each module turns ``params/<paper>/experiments.yaml`` plus a profile into experiment
configs, and turns finished runs into the paper's tables. Notebooks stay thin: they
call these functions, plot and write the report.
"""
