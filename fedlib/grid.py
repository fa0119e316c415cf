"""Where a grid of runs trains: the local process pool (:func:`fedlib.runner.run_many`, the default) or
Ray (:mod:`fedlib.ray_backend`), chosen by ``backend`` or the options in force (:mod:`fedlib.backends`:
``--backend``, ``$FEDLIB_BACKEND``). Studies and notebooks train grids through here."""

from __future__ import annotations

from fedlib import backends, ray_backend, runner


def run_many(jobs: list[tuple[dict, int]], workers: int | None = None, progress: bool = True, desc: str = "runs",
             backend: str | None = None, stack: bool | None = None, on_done=None) -> list[dict]:
    """The summaries of ``jobs`` (``(config, seed)`` pairs) in their order, training what has not finished:
    locally ``workers`` at a time (the seeds of a config stacked in one process where ``stack``, by default on
    CUDA: :func:`fedlib.runner.stacking`), or on Ray (``workers`` is then Ray's to decide; runs one by one).
    ``on_done(i)``: called as job ``i`` finishes training (:func:`fedlib.runner.run_many`; on Ray, once all have)."""
    if backends.resolve(backend) == "ray":
        got = ray_backend.run_many(jobs, progress=progress, desc=desc)
        for i in (i for i, s in enumerate(got) if not s.get("cache_hit")) if on_done is not None else ():
            on_done(i)
        return got
    return runner.run_many(jobs, workers=workers, progress=progress, desc=desc, stack=stack, on_done=on_done)


def run_configs(configs: dict, seeds: list[int] | None = None, workers: int | None = None, desc: str = "runs",
                progress: bool = True, backend: str | None = None) -> dict:
    """:func:`run_many` over a mapping of configs: every config for ``seeds`` (default: its own ``seeds``);
    returns ``{key: [summary per seed]}`` in the order of ``configs``."""
    jobs = [(cfg, s) for cfg in configs.values() for s in (seeds or cfg["seeds"])]
    summaries = iter(run_many(jobs, workers=workers, progress=progress, desc=desc, backend=backend))
    return {key: [next(summaries) for _ in (seeds or cfg["seeds"])] for key, cfg in configs.items()}
