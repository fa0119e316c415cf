"""The one place that answers "the run for (config, seed)".

A run is looked for, training nothing, in this order: the results folder on the config's own placement
(device, executor), then the same config on the other placements (:data:`PLACEMENTS`: the other
executor on the same device first, then the other device; the table's "made by" line names the machine),
each placement in the results folder before the run archive (:mod:`fedlib.archive`, committed, so a
fresh clone reads what a long profile made). Only :func:`run_or_read` trains, and only what none of
these holds.

- :func:`find`: one run -> ``(config it was found under, summary)``;
- :func:`cached`: many runs, training nothing -> the configs whose every seed has finished;
- :func:`run_or_read`: many runs, training the missing ones;
- :func:`rounds`: one run's per-round records, from wherever :func:`find` found it;
- :func:`state`: one run's trained state (its checkpoint), training it here where only the archive holds it;
- :func:`derived`: a value computed from one run's trained model, kept beside its record.

The studies (:mod:`fedlib.papers`) reach the runs through this module alone (``tests/core/test_imports.py``), so it
also holds the few doors that go on to the runner without looking elsewhere: :func:`train` and :func:`run_many`
(train on the config's own placement, a finished run there a cache hit), :func:`finished_here` and
:func:`rounds_here` (that placement's results folder only), and :func:`build`, :func:`split`, :func:`context` and
:func:`one_thread` (a run's data, partition, model recipe and thread setting, for a figure; nothing trains).
"""

from __future__ import annotations

import json

from fedlib import archive, runner

NotArchived = archive.NotArchived
archive_only = archive.only
reading_archive_only = archive.reading_only
RunState = runner.RunState      # a run brought back with its trained state (:func:`state`)
RunsFailed = runner.RunsFailed  # some runs of a grid failed (:func:`train`, :func:`run_many`, :func:`run_or_read`)


# Where a run can have been made: (device, executor). The same config on another placement is
# another run (its own run id: float kernels and batching change the last digits), but it
# answers the same question, so the paper-profile readers accept it where their own is missing.
PLACEMENTS = (("cpu", "sequential"), ("cuda", "batched"), ("cuda", "sequential"), ("cpu", "batched"))


def placements(cfg: dict) -> list[dict]:
    """``cfg`` itself, then the same config on every other device / executor of :data:`PLACEMENTS`, those on
    ``cfg``'s own device first (a CPU table reads a CPU run made batched before a GPU's run of the same config)."""
    own = (cfg.get("device", "cpu"), cfg.get("executor", "sequential"))
    others = [(d, e) for d, e in PLACEMENTS if (d, e) != own]
    others.sort(key=lambda de: de[0] != own[0])   # stable: PLACEMENTS' order within each device
    return [cfg] + [{**cfg, "device": d, "executor": e} for d, e in others]


def find(cfg: dict, seed: int, archive_root=None, archived: bool = True,
         longest: bool = True, protocol: bool = False) -> tuple[dict | None, dict | None]:
    """``(config, summary)`` of the finished run ``(cfg, seed)``, training nothing: on ``cfg``'s own
    device and executor if it has finished there, else on the first other placement (:func:`placements`)
    that has it, e.g. paper-profile runs made on a GPU (``cuda``, ``batched``) and copied into the
    results folder of a CPU machine; ``(None, None)`` where none has. One exception to that order: a run
    another placement extended further (``train.extend_to``, :mod:`fedlib.plateau`; a GPU taking a group on
    towards its plateau, :func:`fedlib.evidence.run`) is read instead of a shorter one, so a group's curve is
    its longest record (:func:`longer`); ``longest=False`` (a table at a fixed protocol, whose runs an evidence
    step may have extended elsewhere: FedMPS's Table III runs are the benchmark's ``nway`` runs) keeps that order.
    For each placement the results folder wins over the run archive (not looked at with ``archived=False``). The
    summary's ``machine`` and ``executor`` say where it ran. ``protocol``: a run extended past its config's
    ``train.rounds`` is cut back to them (:func:`cut_back`)."""
    found, best = None, None
    from_archive = archived or archive.reading_only()
    for c in placements(cfg):
        summary = runner.cached_summary(c, seed) or (archive.summary(c, seed, archive_root) if from_archive else None)
        if summary is not None and (best is None or longest and longer(summary, best)):
            found, best = c, summary
    return found, cut_back(found, seed, best, archive_root) if protocol else best


def cut_back(cfg: dict, seed: int, summary: dict | None, archive_root=None) -> dict | None:
    """Finished run ``summary`` of ``(cfg, seed)`` (``cfg`` the placement it was found under) as its config's
    protocol defines it: where the run was extended past ``train.rounds`` (towards its plateau,
    :mod:`fedlib.plateau`), the numbers of its first ``train.rounds`` records (:func:`fedlib.metrics.run_numbers`,
    as its summary had them before), with ``extended_to`` the rounds its record holds. A table at a fixed protocol
    (FedMPS's Table III at the paper's 100 rounds, whose runs are the benchmark's ``nway`` runs) reads this, never
    the longer run's best round."""
    from fedlib.metrics import run_numbers

    if summary is None or not summary.get("extended_from") or summary["rounds"] <= (rounds := cfg["train"]["rounds"]):
        return summary
    return {**summary, **run_numbers(_records(cfg, seed, summary, archive_root)[:rounds]),
            "extended_to": summary["rounds"]}


def _records(cfg: dict, seed: int, summary: dict, archive_root=None) -> list[dict]:
    return archive.rounds(cfg, seed, archive_root) if summary.get("archived") else runner.load_rounds(cfg, seed)


def longer(summary: dict, than: dict) -> bool:
    """Whether finished run ``summary`` holds more rounds than ``than`` because it was extended further (neither
    diverged: a run the engine stopped is never passed over for another placement's)."""
    if summary.get("diverged_at") or than.get("diverged_at") or not summary.get("extended_from"):
        return False
    return int(summary.get("rounds", 0)) > int(than.get("rounds", 0))


def run_or_read(configs: dict, seeds: list[int] | None = None, workers: int | None = None, desc: str = "runs",
                progress: bool = True, archive_root=None, retrain_archived: bool = False, longest: bool = True,
                protocol: bool = False) -> dict:
    """:func:`fedlib.grid.run_configs` for the headless study commands, except that a run already
    finished is read, not trained again: on another device or executor (:func:`find`), or in the run
    archive (:mod:`fedlib.archive`; so a paper-profile job goes on from where the committed archive ends, on
    a fresh clone too). ``retrain_archived=True`` trains the archive's runs again (to check them: a run
    made again on the same machine equals its record). A line says how many runs were read and from
    where. ``longest``, ``protocol``: as :func:`find`. ``{key: [summary per seed]}`` in the order of ``configs``."""
    elsewhere, from_archive, todo = {}, {}, []
    for key, cfg in configs.items():
        for s in seeds or cfg["seeds"]:
            c, summary = find(cfg, s, archive_root, not retrain_archived, longest, protocol)
            if summary is not None and c is cfg and not summary.get("archived"):
                c, summary = None, None   # this placement's own finished run: run_many reads it from the cache
            if summary is not None and summary.get("archived"):
                from_archive[(key, s)] = summary
            elif summary is not None and c is not cfg:
                elsewhere[(key, s)] = summary
            else:
                todo.append((key, s))
    for what, found in (("finished on another placement", elsewhere), ("read from the run archive", from_archive)):
        if found:
            kinds = sorted({f"{s.get('machine', {}).get('device', '?')}/{s.get('executor', '?')}"
                            for s in found.values()})
            how = "read, not retrained" + (" (--retrain-archived trains them again)" if found is from_archive else "")
            print(f"{desc}: {len(found)} runs {what} ({', '.join(kinds)}): {how}")
    made = run_many([(configs[key], s) for key, s in todo], workers=workers, progress=progress, desc=desc)
    if protocol:
        made = [cut_back(configs[key], s, summary) for (key, s), summary in zip(todo, made, strict=True)]
    done = {**elsewhere, **from_archive, **dict(zip(todo, made, strict=True))}
    return {key: [done[(key, s)] for s in seeds or cfg["seeds"]] for key, cfg in configs.items()}


def train(configs: dict, seeds: list[int] | None = None, workers: int | None = None, desc: str = "runs",
          progress: bool = True, backend: str | None = None, protocol: bool = False) -> dict:
    """``{key: [summary per seed]}`` of ``configs`` (each for ``seeds``, default its own) in their order, trained on
    each config's own device and executor (:func:`fedlib.grid.run_configs`: local processes or Ray, one progress
    bar; a run finished there is a cache hit, an interrupted one resumes). Nothing is read from another placement
    or the run archive (:func:`run_or_read` does that): the notebooks' own quick and smoke runs train on the machine
    at hand. Failed runs raise :class:`RunsFailed` after the others have finished (and are kept). While the archive
    alone is read (the report's render) each run is its own placement's record, as training would give it, else
    another placement's (a GPU's stacked seeds beside a CPU's; :func:`find`); none is :class:`NotArchived`.
    ``protocol``: as :func:`find`."""
    from fedlib import grid

    if archive.reading_only():
        got = {(key, s): find(cfg, s, longest=False, protocol=protocol)[1]
               for key, cfg in configs.items() for s in seeds or cfg["seeds"]}
        runner.refuse_to_train([(configs[key], s) for (key, s), summary in got.items() if summary is None])
        return {key: [got[(key, s)] for s in seeds or cfg["seeds"]] for key, cfg in configs.items()}
    made = grid.run_configs(configs, seeds=seeds, workers=workers, desc=desc, progress=progress, backend=backend)
    return {key: [cut_back(configs[key], s["seed"], s) for s in runs] if protocol else runs
            for key, runs in made.items()}


def for_profile(profile: str, configs: dict, seeds: list[int] | None = None, retrain_archived: bool = False,
                **kw) -> dict:
    """The runs of ``configs`` as a study's notebook takes them under ``profile``: :func:`run_or_read` under the
    ``paper`` profile (a run finished on another placement or in the run archive is read, not trained again),
    :func:`train` under the others (the notebook's own short runs, on the machine at hand)."""
    if profile == "paper":
        return run_or_read(configs, seeds=seeds, retrain_archived=retrain_archived, **kw)
    return train(configs, seeds=seeds, **kw)


def run_many(jobs: list[tuple[dict, int]], workers: int | None = None, progress: bool = True, desc: str = "runs",
             backend: str | None = None, stack: bool | None = None) -> list[dict]:
    """The summaries of ``jobs`` (``(config, seed)`` pairs) in their order, as :func:`train` makes them
    (:func:`fedlib.grid.run_many`: finished runs on their own placement are cache hits, the others train ``workers``
    at a time; ``stack``: the seeds of a config in one stacked group, by default on CUDA). Failed runs raise
    :class:`RunsFailed` after the others have finished."""
    from fedlib import grid

    return grid.run_many(jobs, workers=workers, progress=progress, desc=desc, backend=backend, stack=stack)


def cached(configs: dict, seeds: list[int], archive_root=None, protocol: bool = False,
           more: bool = False) -> tuple[dict, int]:
    """What the cache already holds, training nothing: ``{key: [summary per seed]}`` for the
    configs whose every seed has finished, and how many of the ``len(configs) x len(seeds)``
    runs have. A short profile's report shows a longer profile's table this way once its runs
    were made (headless, or on another machine into the same results folder). A run the results
    folder lacks is read from the run archive (:mod:`fedlib.archive`), so that a fresh clone
    renders the committed report; a run missing on the plan's own device and executor is read
    from another placement (:func:`find`), and :func:`made_by` then names both machines. ``protocol``: as
    :func:`find`. ``more``: a config's list goes on with the seeds after ``seeds`` that have finished
    (:func:`more_seeds`: those the evidence planner added where a claim's margin was within the seed spread); each
    summary names its ``seed``."""
    found, complete = 0, {}
    for key, cfg in configs.items():
        runs = [find(cfg, s, archive_root, protocol=protocol)[1] for s in seeds]
        found += sum(r is not None for r in runs)
        if all(r is not None for r in runs):
            extra = more_seeds(cfg, seeds, archive_root, protocol) if more else []
            complete[key] = runs + [find(cfg, s, archive_root, protocol=protocol)[1] for s in extra]
    return complete, found


def with_more_seeds(configs: dict, runs: dict, protocol: bool = False) -> dict:
    """``runs`` (``{key: [summary per seed]}`` of ``configs``, each summary naming its ``seed``) with each config's
    seeds added after them that have finished (:func:`more_seeds`), as :func:`cached` with ``more`` reads them."""
    out = {}
    for key, got in runs.items():
        extra = more_seeds(configs[key], [x["seed"] for x in got], protocol=protocol) if got else []
        out[key] = list(got) + [find(configs[key], s, protocol=protocol)[1] for s in extra]
    return out


def more_seeds(cfg: dict, seeds: list[int], archive_root=None, protocol: bool = False) -> list[int]:
    """The seeds after ``seeds`` whose run of ``cfg`` has finished, in turn from the one after the last of ``seeds``
    and up to the first that has not: the seeds :func:`fedlib.evidence.run` adds to a run group (so a cell that
    reads them and the other side of its comparison hold the same seeds, in the same order, when they hold as
    many)."""
    out, s = [], max(seeds) + 1
    while find(cfg, s, archive_root, protocol=protocol)[1] is not None:
        out.append(s)
        s += 1
    return out


def rounds(cfg: dict, seed: int, archive_root=None, protocol: bool = False) -> list[dict]:
    """The per-round records of a finished run, from the results folder or else the run archive, on
    ``cfg``'s placement or else another (:func:`find`); ``[]`` where it has not finished. ``protocol``: only the
    config's own ``train.rounds`` of a run extended past them."""
    c, summary = find(cfg, seed, archive_root)
    if summary is None:
        return []
    return _records(c, seed, summary, archive_root)[:int(cfg["train"]["rounds"]) if protocol else None]


def finished_here(cfg: dict, seed: int) -> dict | None:
    """The summary of the run ``(cfg, seed)`` where it has finished in the results folder on ``cfg``'s own device and
    executor, after the checks of a cache hit (:func:`fedlib.runner.cached_summary`), else ``None``; no other
    placement and no archive looked at (while :func:`archive_only` is in force, the archive's record of this very
    run). Trains nothing."""
    return runner.cached_summary(cfg, seed)


def rounds_here(cfg: dict, seed: int) -> list[dict]:
    """The per-round records of the run ``(cfg, seed)`` in the results folder on ``cfg``'s own placement
    (:func:`fedlib.runner.load_rounds`): of a finished run after the checks of a cache hit, of a run in progress the
    rounds logged so far; no other placement (while :func:`archive_only` is in force, the archive's records of this
    very run). :func:`rounds` reads wherever the run finished."""
    return runner.load_rounds(cfg, seed)


def state(cfg: dict, seed: int):
    """The trained state of the finished run ``(cfg, seed)`` (:func:`fedlib.runner.load_state`: models and server
    state of its last round). The run archive keeps no checkpoint, so where the results folder has no finished run
    (a fresh clone reading a long profile from the archive) the run is trained here first, with a line saying so,
    or resumed from its checkpoint where an earlier attempt stopped: a half-trained model is never served."""
    if archive.reading_only():
        raise NotArchived(f"{cfg['name']} seed {seed}: a trained model, which the run archive does not keep")
    if runner.cached_summary(cfg, seed) is None:
        print(f"{cfg['name']} seed {seed}: the run archive keeps no model, so this figure trains the run here "
              f"({cfg['train']['rounds']} rounds; an interrupted attempt resumes)", flush=True)
        runner.run_one(cfg, seed, progress=False)
    return runner.load_state(cfg, seed)


def derived(cfg: dict, seed: int, name: str, compute):
    """A value (plain JSON) derived from the trained model of the run ``(cfg, seed)`` by ``compute(state)``: an
    attack's per-seed scores, the smallest angle between global prototypes, anything a trained model gives and its
    records do not. ``name`` names the analysis and its settings (a settings hash in it where they vary).

    It is read from the run's folder (``results/<run id>/derived/<name>.json``), else from the run archive (the
    same path under ``archive/``; :func:`fedlib.archive.add` copies it with the run), else computed from
    :func:`state` (training the run where needed) and written in the run's folder. A record is served only for the
    run and log it was made from (its ``run_id`` and the SHA-256 of the run's log): a run extended or made again
    gets its value computed again. While :func:`archive_only` is in force only the archive is read, and a missing
    value raises :class:`NotArchived`."""
    from fedlib import store
    from fedlib.config import run_dir

    def load(folder):
        path = folder / archive.DERIVED / f"{name}.json"
        try:
            record = json.loads(path.read_text())
        except (OSError, ValueError):
            return None
        return record if _derived_ok(record, cfg, seed, name, folder) else None

    own = run_dir(cfg, seed)
    if not archive.reading_only():
        record = load(own)
        if record is not None:
            return record["value"]
    # the archive's value only beside a sound record of this run (its index covers the derived files too)
    record = load(archive.entry(cfg, seed)) if archive.summary(cfg, seed) is not None else None
    if record is not None:
        return record["value"]
    if archive.reading_only():
        raise NotArchived(f"{cfg['name']} seed {seed}: {name}, derived from a trained model, is not in the run archive")
    value = json.loads(json.dumps(compute(state(cfg, seed))))
    log = (own / store.LOG).read_bytes()
    record = {"run_id": own.name, "seed": seed, "name": name, "log_sha256": store.sha256(log), "value": value}
    (own / archive.DERIVED).mkdir(parents=True, exist_ok=True)
    store.atomic_write(own / archive.DERIVED / f"{name}.json", json.dumps(record, indent=1, sort_keys=True) + "\n")
    return value


def _derived_ok(record: dict, cfg: dict, seed: int, name: str, folder) -> bool:
    """Whether a derived record belongs to this run as it stands: its run id, seed, name and the log it came from
    (the results folder's log, or the archived summary's record of it)."""
    import json as _json

    from fedlib import store
    from fedlib.config import run_id

    if record.get("run_id") != run_id(cfg, seed) or record.get("seed") != seed or record.get("name") != name:
        return False
    log = folder / store.LOG
    if log.is_file():
        return store.sha256(log.read_bytes()) == record.get("log_sha256")
    try:
        return _json.loads((folder / store.SUMMARY).read_text())["integrity"]["log_sha256"] == record.get("log_sha256")
    except (OSError, ValueError, KeyError):
        return False


def build(cfg: dict, seed: int):
    """``(data, context, algorithm)`` of the run ``(cfg, seed)``, nothing trained or read (:func:`fedlib.runner.build`):
    its :class:`~fedlib.data.FederatedData` (``data.partition``: the clients' split) on the run's device, its
    :class:`~fedlib.algorithms.base.Context` (``ctx.new_model(cid)``) and its algorithm, checked as a run is before
    it trains (every client holds data; one sample goes through every model)."""
    return runner.build(cfg, seed)


def split(cfg: dict, seed: int):
    """``(dataset, partition)`` of the run ``(cfg, seed)`` (:func:`fedlib.runner.split`): the data (its ``fraction``
    where set) and the clients' split, checked; kept for the next calls of this process with the same data."""
    return runner.split(cfg, seed)


def context(cfg: dict, seed: int):
    """The :class:`~fedlib.algorithms.base.Context` of the run ``(cfg, seed)``: shapes, model recipe, training
    settings (``.train``), seed and device (:func:`fedlib.runner.make_context` on :func:`split`)."""
    ds, partition = split(cfg, seed)
    return runner.make_context(cfg, ds, partition, seed)


def one_thread():
    """A context manager within which torch uses one thread, as every run trains (:func:`fedlib.runner.one_thread`),
    so that a study's own small simulation gives the same numbers on any machine; the setting is restored after."""
    return runner.one_thread()
