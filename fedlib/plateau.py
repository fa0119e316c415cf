"""Runs that go on until their curves plateau: the ``converged`` profile's length rule.

A converged-profile run is first trained for its config's ``train.rounds``. Where the seed-mean accuracy curve of
a run group (one config, its seeds) has not plateaued by :func:`fedlib.claims.plateau`, the group is extended
(``train.extend_to``, :mod:`fedlib.config`) by :data:`STEP` rounds at a time, every seed resumed from its
checkpoint, until the seed-mean curve plateaus or reaches :data:`CAP` rounds; a group stopped by the cap says so
(:attr:`Status.capped`). Extending keeps the run id and the first rounds (the method is told the run's own length,
``Round.total``, not the extension's), and the archive then holds the extended record (:func:`fedlib.archive.add`).

The run archive keeps no checkpoint, so a run only the archive holds is trained again from round 1 on its way to
the extension; :func:`prefix_agrees` then checks that its first rounds equal the archived record's.
"""

from __future__ import annotations

import dataclasses
import itertools
import math

import numpy as np

#: the most rounds a converged-profile run is extended to (4x the profiles' 100): a group still rising there is
#: reported as capped, and the verdict rule projects its gain (fedlib.claims)
CAP = 400
#: rounds added to every seed of a group per extension step
STEP = 50


@dataclasses.dataclass(frozen=True)
class Group:
    """One config's seeds, judged on the seed-mean of ``acc[metric][stat]`` (in %). ``more``: the cells that read
    this group read the seeds after its own that have finished too (:func:`fedlib.results.more_seeds`), so that
    seeds the evidence planner adds (:func:`fill`) count in its comparisons. ``derive``: what those cells read of a
    run beyond its records, made from its trained model (the leakage study's attack scores): ``("module:function",
    *args)``, called as ``function(*args, cfg, seed)`` by :func:`fill` on each seed it added and kept, whose derived
    values (:func:`fedlib.results.derived`) are then archived beside the run (:func:`fedlib.archive.add_derived`)."""

    label: str
    cfg: dict
    seeds: tuple[int, ...]
    metric: str
    stat: str = "weighted"
    more: bool = False
    derive: tuple = ()


@dataclasses.dataclass(frozen=True)
class Status:
    """Where a group stands: ``rounds`` every finished seed holds (the shortest), ``plateaued`` by the seed-mean
    curve, its ``rise`` (:func:`fedlib.claims.plateau`), ``plateau_round`` (from which round on the criterion
    holds, None while rising), ``capped`` (at :data:`CAP` and still rising), ``missing`` seeds (not finished at
    the config's own rounds) and ``diverged`` seeds (left out of the mean)."""

    group: Group
    rounds: int
    plateaued: bool
    rise: float
    plateau_round: int | None
    capped: bool
    missing: tuple[int, ...] = ()
    diverged: tuple[int, ...] = ()

    @property
    def done(self) -> bool:
        """Nothing more to train: plateaued, capped, or every seed diverged."""
        return not self.missing and (self.plateaued or self.capped or self.rounds == 0)


def curve(records: list[dict], metric: str, stat: str = "weighted") -> list[float]:
    """A run's accuracy curve in % (the rounds that were evaluated)."""
    return [100 * r["acc"][metric][stat] for r in records if "acc" in r]


def plateau_round(mean, window: float = 0.2, tol: float = 0.2) -> int | None:
    """:func:`fedlib.claims.plateau_from`: the round from which the seed-mean curve stays plateaued."""
    from fedlib.claims import plateau_from

    return plateau_from(mean, window, tol)


def status(group: Group, cap: int = CAP, archive_root=None) -> Status:
    """:class:`Status` of ``group`` from its finished runs (results folder, other placements, archive)."""
    from fedlib import claims, results

    curves, missing, diverged = [], [], []
    for s in group.seeds:
        recs = results.rounds(group.cfg, s, archive_root)
        if not recs:
            missing.append(s)
        elif any(r.get("diverged") for r in recs):
            diverged.append(s)
        else:
            curves.append(curve(recs, group.metric, group.stat))
    if not curves:
        return Status(group, 0, False, math.nan, None, False, tuple(missing), tuple(diverged))
    n = min(len(c) for c in curves)
    mean = claims.mean_curve([c[:n] for c in curves])
    done, rise = claims.plateau(mean)
    return Status(group, n, done, rise, plateau_round(mean) if done else None, not done and n >= cap,
                  tuple(missing), tuple(diverged))


def extended(cfg: dict, rounds: int) -> dict:
    """``cfg`` asking for ``rounds`` rounds: ``train.extend_to`` past its own ``train.rounds`` (the same run id)."""
    own = cfg["train"]["rounds"]
    return {**cfg, "train": {**cfg["train"], "extend_to": rounds if rounds > own else None}}


def next_jobs(statuses: list[Status], cap: int = CAP, step: int = STEP) -> list[tuple[dict, int]]:
    """The runs of one extension step: every seed of each group not done, :data:`STEP` rounds further (at most
    ``cap``); a group with missing seeds first trains those to the others' length."""
    jobs = []
    for st in statuses:
        if st.done:
            continue
        target = st.rounds if st.missing else min(cap, st.rounds + step)
        target = max(target, st.group.cfg["train"]["rounds"])
        jobs += [(extended(st.group.cfg, target), s) for s in st.group.seeds if s not in st.diverged]
    return jobs


def prefix_agrees(cfg: dict, seed: int, archived: list[dict]) -> bool | None:
    """Whether the results folder's run of ``(cfg, seed)`` starts with the ``archived`` record's rounds (the same
    accuracies under every rule and convention, of every client, and the same training loss, round for round);
    None where there is nothing to compare."""
    from fedlib.runner import load_rounds

    mine = load_rounds(cfg, seed)
    if not archived or len(mine) < len(archived):
        return None
    keys = ("acc", "clients", "train_loss")
    return all(all(a.get(k) == b.get(k) for k in keys) for a, b in zip(archived, mine[:len(archived)], strict=True))


def run(groups: list[Group], cap: int = CAP, step: int = STEP, workers: int | None = None,
        deadline: float | None = None, keep=None, progress: bool = True) -> list[Status]:
    """Extend ``groups`` step by step until each is done (:attr:`Status.done`) or ``deadline`` (``time.time()``)
    passes. A step trains a few groups at a time (as many as ``workers``, each with all its seeds), then calls
    ``keep(cfg, seed)`` for every run of them (the evidence command archives them there), so that what finished is
    kept however long the whole takes. Interrupted, the finished runs are kept and the started ones resume from
    their checkpoints. Returns the groups' final :class:`Status`."""
    import os
    import time

    from fedlib import grid

    per_chunk = max(1, workers or os.cpu_count() or 1)
    statuses = [status(g, cap) for g in groups]
    while True:
        todo = [st for st in statuses if not st.done]
        if not todo or (deadline is not None and time.time() >= deadline):
            return statuses
        for i in range(0, len(todo), per_chunk):
            chunk = todo[i:i + per_chunk]
            jobs = next_jobs(chunk, cap, step)
            if not jobs:
                continue
            grid.run_many(jobs, workers=workers, progress=progress,
                          desc=f"extending {', '.join(st.group.label for st in chunk)} by up to {step} rounds")
            if keep is not None:
                for cfg, s in jobs:
                    keep(cfg, s)
            if deadline is not None and time.time() >= deadline:
                break
        statuses = [status(g, cap) for g in groups]


def fill(groups: list[Group], workers: int | None = None, keep=None, progress: bool = True,
         rounds: list[int | None] | None = None) -> list[Status]:
    """Train the seeds each group lacks (its :attr:`Status.missing`: seeds added to it) to the length its other seeds
    hold (or that group's entry of ``rounds``: a table read at a fixed protocol needs its config's own rounds), and
    only those, with any seed whose record is shorter than that (made by a study that reads the same config at its
    own fixed protocol: extended, the same run id; a finished seed is not trained again, even one only the archive
    holds); then ``keep(cfg, seed)`` each, ``workers`` runs at a time from one queue, the groups in turn (on CUDA a
    group's seeds at once, one stacked group), each run kept as it ends (a session that stops loses no finished run;
    a worker whose run ends takes the next at once, not after the slowest run of a batch). Where the
    group names what its cells derive from a trained model (:attr:`Group.derive`), that is made and archived for
    each kept seed, and for its other seeds, kept first where only the results folder holds them (an interruption
    stopped their values, or another command trained them; values already made are read, not made again).
    Interrupted, the finished runs are kept and the started ones resume from their checkpoints. Returns the groups'
    :class:`Status` after."""
    from fedlib import archive, grid, results

    per_group, before = [], [status(g) for g in groups]   # (config, seed, what its cells derive from its model)
    for st, want in zip(before, rounds or [None] * len(groups), strict=True):
        target = max(want or st.rounds, st.group.cfg["train"]["rounds"])
        short = [s for s in st.group.seeds if s not in st.missing and s not in st.diverged   # made shorter (another
                 and len(results.rounds(st.group.cfg, s)) < target] if target > st.rounds else []   # study's protocol)
        per_group.append([(extended(st.group.cfg, target), s, st.group.derive)
                          for s in st.group.seeds if s in st.missing or s in short])
    # one job of each group in turn: a fill stopped early leaves the sides of a comparison grown alike (seed 6 of
    # both, not seeds 6-11 of one and none of the other)
    jobs = [j for turn in itertools.zip_longest(*per_group) for j in turn if j is not None]

    def kept(batch):   # keep (archive) the run batch[i] as it finishes, and make what its cells derive from it
        def done(i):
            cfg, s, how = batch[i]
            if keep(cfg, s) and how:
                derive_values(how, cfg, s)
        return done if keep is not None else None

    # on CUDA a group's seeds train as one stacked group; on the CPU one queue: a worker whose run ends takes the next
    batches, done = (per_group if any(cfg.get("device") == "cuda" for cfg, _, _ in jobs) else [jobs]), 0
    for batch in (b for b in batches if b):
        done += len(batch)
        grid.run_many([(cfg, s) for cfg, s, _ in batch], workers=workers, progress=progress, on_done=kept(batch),
                      desc=f"adding seeds to {', '.join(g.label for g in groups)} ({done} of {len(jobs)})")
    for st in before if keep is not None else ():   # a seed finished before (an interruption stopped its values,
        for s in (s for s in st.group.seeds if st.group.derive and s not in st.missing):   # or another run made it)
            if keep(st.group.cfg, s) or archive.summary(st.group.cfg, s) is not None:
                derive_values(st.group.derive, st.group.cfg, s)   # values already made are read, not made again
    return [status(g) for g in groups]


def derive_values(how: tuple, cfg: dict, seed: int) -> int:
    """Make what a group's cells read of the kept run ``(cfg, seed)`` beyond its records (:attr:`Group.derive`) and
    archive it beside the run; how many derived values were archived."""
    import importlib

    from fedlib import archive

    module, _, name = how[0].partition(":")
    getattr(importlib.import_module(module), name)(*how[1:], cfg, seed)
    return archive.add_derived(cfg, seed)


def reach_check(curves: dict, cut: int = 25, end: int | None = 100, cap_factor: int = 4,
                cap: int | None = None) -> dict:
    """How well :meth:`fedlib.claims.Trend.reach` bounds what curves really gained: each group's seed curves
    (``{label: [per-seed curve]}``; :func:`fedlib.papers.benchmark.reach_curves` gives the benchmark's,
    :func:`extended_curves` the archive's extended groups) cut at ``cut`` rounds, its reach projected to ``cap``
    rounds (default ``cut * cap_factor``: the 4x horizon from 100 rounds to the 400-round cap), against the gain its
    seed-mean best-so-far curve actually made from round ``cut`` to ``end`` (None: each group's own length, its
    shortest seed's). Groups not longer than the cut are left out. Returns ``{"groups", "rising", "covered",
    "misses": {label: points short}, "plateau_misses": {label: points gained after the cut}}``: of the groups still
    rising at the cut, how many the reach covered; and the groups the plateau criterion called plateaued at the cut
    that still gained 0.2 points or more (docs/runs.md, "Runs to a plateau")."""

    from fedlib.claims import trend

    misses, early, n, rising = {}, {}, 0, 0
    for label, seeds in curves.items():
        stop = min((len(c) for c in seeds), default=0) if end is None else end
        seeds = [c for c in seeds if len(c) >= stop]
        if not seeds or stop <= cut:
            continue
        n += 1
        best = np.maximum.accumulate(np.asarray([c[:stop] for c in seeds], float), axis=1).mean(axis=0)
        t = trend(label, [c[:cut] for c in seeds])
        actual = float(best[stop - 1] - best[cut - 1])
        if t.plateaued:
            if actual >= 0.2:
                early[label] = actual
            continue
        rising += 1
        bound = t.reach(cap=cut * cap_factor if cap is None else cap)
        if actual > bound + 1e-9:
            misses[label] = actual - bound
    return {"groups": n, "rising": rising, "covered": rising - len(misses), "misses": misses, "plateau_misses": early}


#: the accuracy rules the claims ledgers compare (a method's head, or its nearest global prototype)
COMPARED_RULES = ("acc_head", "acc_proto")
#: the rounds at which :func:`extended_check` cuts the extended curves
CHECK_CUTS = (100, 150, 200, 250, 300)


def extended_curves(root=None, rules=COMPARED_RULES) -> dict:
    """``{"<run name> <rule>": [per-seed curve]}`` of every run group the archive holds extended past its config's
    rounds (``extended_from`` in its summary), on each of ``rules`` its runs record (None: every accuracy rule), in %
    (the seeds of one group share their config but for the seed); diverged seeds left out. What the early decision's
    bound is checked on over the horizons it projects (:func:`reach_check` with ``end=None``, ``cap=CAP``;
    docs/runs.md)."""
    import json
    from pathlib import Path

    from fedlib import archive

    groups: dict = {}
    for folder in sorted(p for p in Path(root or archive.ARCHIVE).iterdir() if p.is_dir()):
        try:
            cfg, seed = archive.entry_config(folder)
        except ValueError:
            continue
        summary = archive.summary(cfg, seed, root)
        if not summary or not summary.get("extended_from"):
            continue
        key = json.dumps({k: v for k, v in cfg.items() if k != "seeds"}, sort_keys=True, default=str)
        name = summary.get("name") or cfg.get("name", "?")
        groups.setdefault(key, (name, []))[1].append(archive.rounds(cfg, seed, root))
    out: dict = {}
    for name, runs in groups.values():
        runs = [r for r in runs if r and not any(q.get("diverged") for q in r)]
        have = sorted(set.intersection(*(set(next((q["acc"] for q in r if "acc" in q), {})) for r in runs))
                      ) if runs else []
        for rule in (x for x in have if rules is None or x in rules):
            out[f"{name} {rule}"] = [curve(r, rule) for r in runs]
    return out


def extended_check(root=None, cuts=CHECK_CUTS, rules=COMPARED_RULES) -> dict:
    """The verdict rule's two judgements of a curve checked on the horizons the archive's extended runs reach
    (:func:`extended_curves`): ``{cut: reach_check(...)}``, each group cut at ``cut`` rounds and compared with what it
    gained by its own last round; the early decision's reach projected to :data:`CAP`. docs/runs.md gives the
    numbers and what they mean for the verdicts (:data:`fedlib.claims.PLATEAU_SLACK`)."""
    curves = extended_curves(root, rules)
    return {cut: reach_check(curves, cut=cut, end=None, cap=CAP) for cut in cuts}
