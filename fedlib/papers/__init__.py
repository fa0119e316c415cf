"""Per-paper study definitions: which runs a paper notebook needs and how to read them.

Each module turns ``params/<paper>/experiments.yaml`` plus a profile into experiment
configs, and turns finished runs into the paper's tables. Notebooks stay thin: they
call these functions, plot and write the report.
"""

from fedlib.validation import ConfigError


def check_seeds(seeds) -> list[int]:
    """A notebook's ``seeds`` parameter: a non-empty list of non-negative integers."""
    if (not isinstance(seeds, list) or not seeds
            or not all(isinstance(x, int) and not isinstance(x, bool) and x >= 0 for x in seeds)):
        raise ConfigError("seeds", seeds, "a non-empty list of non-negative integers")
    return list(seeds)


def check_rounds(rounds) -> int:
    """A notebook's ``rounds`` parameter: a positive integer."""
    if isinstance(rounds, bool) or not isinstance(rounds, int) or rounds < 1:
        raise ConfigError("rounds", rounds, "a positive integer")
    return rounds
