"""The study base: what every study shares, below the studies of :mod:`fedlib.papers`.

A study's plan module ``fedlib/plans/<paper>.py`` defines a :class:`Plan` subclass that turns
``params/<paper>/experiments.yaml`` (read from the checkout, whatever the working directory; its schema:
:mod:`fedlib.study.schema`) plus a profile into experiment configs; its ledger module ``fedlib/ledgers/<paper>.py``
turns finished runs into numbers and its study module ``fedlib/papers/<paper>.py`` into the paper's tables and
figures. Notebooks stay thin: each cell is one call of the module's notebook functions, on the
state of :mod:`fedlib.study.notebook`. Every study also runs headless with one command shape (:func:`cli`,
:func:`command`)::

    python -m fedlib.papers.<paper> [--profile P] [--methods M ...] [--seeds S ...] [--rounds N] [--workers W]
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
from pathlib import Path
from typing import ClassVar


from fedlib.device import device_arg
from fedlib.validation import POSITIVE_INT, SEED, ConfigError, Options, Parser, arg_type, check_value
from fedlib.paths import PARAMS as PARAMS_ROOT
from fedlib.study import schema
from fedlib.study.schema import check_plan_settings, check_rounds, check_seeds  # noqa: F401 (the studies' names)


def check_methods(methods, known: list[str], required: tuple[str, ...] = (), why: str = "") -> list[str]:
    """A notebook's ``methods`` parameter: a non-empty list of known methods including ``required``."""
    if (not isinstance(methods, list) or not methods or any(m not in known for m in methods)
            or not set(required) <= set(methods)):
        import difflib

        need = f" including {', '.join(required)}{why}" if required else ""
        near = [f"{m!r} -> {close[0]!r}" for m in (methods if isinstance(methods, list) else [])
                if isinstance(m, str) and m not in known and (close := difflib.get_close_matches(m, known, 1))]
        raise ConfigError("methods", methods, "a non-empty list of " + ", ".join(known) + need
                          + (f" (did you mean {', '.join(near)}?)" if near else ""))
    return list(methods)


@dataclasses.dataclass
class Plan:
    """One paper's experiments under one profile: the whole ``experiments.yaml`` (``spec``),
    the profile's settings and where runs are cached."""

    paper: ClassVar[str] = ""
    #: the study's own top-level sections of experiments.yaml besides the common ones
    #: (:mod:`fedlib.study.schema`), each mapped to its check or None
    sections: ClassVar[dict] = {}

    profile: str
    spec: dict
    settings: dict
    results_dir: str
    data_root: str | None = None
    device: str | None = None     # None: the config default, auto (CUDA when present)
    executor: str | None = None   # None: the config default, auto (batched on CUDA)

    @property
    def seeds(self) -> list[int]:
        return list(self.settings["seeds"])

    def section_seeds(self):
        """The seeds a report section's header names: the profile's (a list), or a study's own wording (a string)
        where they differ by setting."""
        return self.seeds

    @property
    def methods(self) -> list[str]:
        """The methods of ``experiments.yaml`` (its ``methods`` block), in file order."""
        return list(self.spec["methods"])

    def metric(self, method: str) -> str:
        """The paper's scoring rule for ``method``: ``acc_proto`` (nearest prototype) for the methods listed
        under ``prototype_methods`` in ``experiments.yaml`` (or derived there by :meth:`complete`), ``acc_head`` for
        the others."""
        return "acc_proto" if method in self.spec.get("prototype_methods", ()) else "acc_head"

    def label(self, method: str) -> str:
        """The printed name of a method (or of a ``variants`` entry)."""
        entry = self.spec["methods"].get(method) or self.spec.get("variants", {}).get(method, {})
        return entry.get("label", method)

    @classmethod
    def params_file(cls) -> Path:
        return PARAMS_ROOT / cls.paper / "experiments.yaml"

    def placement(self, raw: dict) -> dict:
        """``raw`` with the plan's device and executor (when set)."""
        for key in ("device", "executor"):
            if getattr(self, key) is not None:
                raw[key] = getattr(self, key)
        return raw

    def place(self, raw: dict, overrides: dict) -> dict:
        """A study run's raw config made a run of this plan: its seeds, results and data folders, device and
        executor (:meth:`placement`), then the dotted ``overrides`` (the profile's, then the caller's) applied."""
        from fedlib.config import apply_overrides

        raw["seeds"] = self.seeds
        raw["results_dir"] = self.results_dir
        raw["data_root"] = self.data_root
        return apply_overrides(self.placement(raw), overrides)

    def entry(self, section: str, key: str, field: str) -> dict:
        """``spec[section][key]`` of the params file, or a one-line error naming ``field`` and what is allowed."""
        table = self.spec[section]
        if key not in table:
            raise ConfigError(field, key, "one of " + ", ".join(table))
        return table[key]

    def method_entry(self, method: str, variant: bool = False, table: dict | None = None,
                     field: str | None = None) -> dict:
        """The ``methods`` entry of ``method`` (with ``variant``, its ``variants`` entry; ``table``: another
        method table of the study), a variant's ``of`` merged into it: the method's entry with the variant's
        algorithm changes and label. A name not in the table is a one-line error naming ``field``."""
        section = "variants" if variant else "methods"
        entries = self.spec.get(section, {}) if table is None else table
        if method not in entries:
            raise ConfigError(field or section[:-1], method, "one of " + ", ".join(entries))
        entry = entries[method]
        if "of" not in entry:
            return entry
        merged = copy.deepcopy(self.spec["methods"][entry["of"]])
        merged["algorithm"].update(entry.get("algorithm", {}))
        merged["label"] = entry.get("label", merged.get("label"))
        return merged

    def config(self, entry: dict, name: str, *, method: str | None = None, base: dict | None = None,
               dataset: dict | None = None, partition: dict | None = None, rounds: int | None = None,
               before: dict | None = None, overrides: dict | None = None, changes: dict | None = None) -> dict:
        """The validated run config of one method ``entry`` (:meth:`method_entry`), the one way every study
        makes a run: ``base`` (default the file's) with ``partition``'s fields (its label dropped), the
        entry's algorithm, model and train fields and ``rounds``; references to ``dataset``, the profile and
        the train block resolved (:func:`schema.resolve`); then the dotted ``before`` changes (a setting's
        own), the profile's ``overrides`` (or ``overrides`` given), the profile's ``method_changes`` of
        ``method`` and the caller's ``changes``, in that order (:meth:`place`); named ``name``; passed
        through :meth:`adjust`."""
        from fedlib.config import validate

        raw = copy.deepcopy(self.spec["base"] if base is None else base)
        if partition is not None:
            raw["partition"] = {k: v for k, v in partition.items() if k != "label"}
        raw["algorithm"] = copy.deepcopy(entry["algorithm"])
        if "model" in entry:
            raw["model"] = entry["model"]
        raw["train"] = {**raw.get("train", {}), **entry.get("train", {})}
        if rounds is not None:
            raw["train"]["rounds"] = rounds
        context = {"dataset": dataset or {}, "profile": self.settings, "train": raw["train"]}
        raw = schema.resolve(raw, context, name)
        own = self.settings.get("method_changes", {}).get(method, {})
        profile = self.settings.get("overrides", {}) if overrides is None else overrides
        raw = self.place(raw, {**(before or {}), **profile,
                               **schema.resolve(own, context, f"method_changes.{method}"), **(changes or {})})
        raw["name"] = name
        self.adjust(raw)
        return validate(raw)

    def adjust(self, raw: dict) -> None:
        """A study's last rule on a run config before it is validated (none by default)."""

    @classmethod
    def load(cls, profile: str = "quick", results_dir: str | Path | None = None, data_root: str | None = None,
             seeds: list[int] | None = None, path: str | Path | None = None, device: str | None = None,
             executor: str | None = None, **overrides) -> Plan:
        """The plan of ``profile``. ``results_dir`` defaults to the output root's ``results/``
        (:func:`fedlib.report.results_dir`), so notebooks, nbval and headless runs share one
        cache; ``seeds`` and the study's own ``overrides`` (e.g. ``methods``, ``rounds``)
        replace the profile's settings."""
        from fedlib import report
        from fedlib.config import EXECUTOR_CHOICES, read_yaml
        from fedlib.device import resolve
        from fedlib.reproduce import PROFILES

        source = Path(path or cls.params_file())
        spec = read_yaml(source, f"{source.parent.name}/{source.name}")
        listed = read_yaml(PROFILES) or {}
        allowed = [p for p in spec["profiles"] if p in listed]
        if profile not in allowed:
            raise ConfigError("profile", profile, "one of " + ", ".join(allowed) + " (see params/profiles.yaml)")
        schema.check(spec, f"{source.parent.name}/{source.name}", cls.sections)
        cls.complete(spec)
        if device is not None:
            resolve(device)
        if executor is not None:
            check_value("executor", executor, Options(EXECUTOR_CHOICES))
        plan = cls(profile, spec, copy.deepcopy(spec["profiles"][profile]),
                   str(results_dir or report.results_dir()), data_root, device, executor)
        if seeds is not None:
            plan.settings["seeds"] = check_seeds(seeds)
            for key, value in plan.settings.items():   # a table's own list of seeds (figs_seeds: [0, ...]) too
                if key.endswith("_seeds") and isinstance(value, list):
                    plan.settings[key] = "all"
        plan.override(**{k: v for k, v in overrides.items() if v is not None})
        return plan

    @classmethod
    def complete(cls, spec: dict) -> None:
        """Fill in, on the checked ``experiments.yaml`` (``spec``) before the plan is made, what the study derives from
        the registered methods' declarations rather than lists by hand (nothing by default; the benchmark: the
        methods scored by the prototype rule; the privacy study: a leakage-table entry for every registered
        method)."""

    def override(self, **overrides) -> None:
        """Apply the study's own parameters (``methods``, ``rounds``, ...); none by default."""
        if overrides:
            raise ConfigError("study parameter", ", ".join(overrides), "none for this study")


@dataclasses.dataclass
class TablePlan(Plan):
    """A plan whose profile gives every run one round count (``rounds``) and lists the main table's rows
    (the profile's ``rows_key``, ``table1_methods`` by default: ``all`` or method names); the notebook's
    ``methods`` and ``rounds`` override them."""

    rows_key: ClassVar[str] = "table1_methods"

    @property
    def rounds(self) -> int:
        return self.settings["rounds"]

    def table1_methods(self) -> list[str]:
        value = self.settings[self.rows_key]
        return self.methods if value == "all" else list(value)

    def override(self, methods: list[str] | None = None, rounds: int | None = None) -> None:
        """``methods`` (the main table's rows) and ``rounds`` (every run)."""
        if methods is not None:
            self.settings[self.rows_key] = check_methods(methods, self.methods)
        if rounds is not None:
            self.settings["rounds"] = check_rounds(rounds)


def unique_jobs(jobs: list[tuple[dict, int]], cost) -> list[tuple[dict, int]]:
    """``(config, seed)`` jobs without repeats (one per run id, the first kept), most costly first
    (``cost(config)``), so that a pool of workers ends together."""
    from fedlib.config import run_id

    unique: dict = {}
    for cfg, seed in jobs:
        unique.setdefault(run_id(cfg, seed), (cfg, seed))
    return sorted(unique.values(), key=lambda job: cost(job[0]), reverse=True)


def finished_seeds(configs: dict, seeds: list[int]) -> list[int]:
    """The seeds of ``seeds`` on which every config of ``configs`` has a finished run (the results folder, another
    placement or the run archive: :func:`fedlib.results.find`; trains nothing)."""
    from fedlib import results

    return [s for s in seeds if all(results.find(c, s)[1] is not None for c in configs.values())]


def seeds_at_hand(configs: dict, seeds: list[int]) -> list[int]:
    """The seeds a cell reads: all of ``seeds``, except while the report is rendered from the run archive alone
    (:func:`fedlib.results.archive_only`), where it reads the seeds whose every run is archived (a table or figure
    whose added seeds are still training shows the seeds it has, and says which), or all of them where none is
    complete (the cell is then left out, naming the missing runs)."""
    from fedlib import results

    if not results.reading_archive_only():
        return list(seeds)
    return finished_seeds(configs, seeds) or list(seeds)


def plateau_text(records: list[dict] | list[list[dict]], metric: str, stat: str = "mean") -> str:
    """``""`` where a run's accuracy curve (``acc[metric][stat]`` per evaluated round, in %) has plateaued by
    :func:`fedlib.claims.plateau`, else ``not plateaued (+x.xx in the last 20% of rounds)``. Given every
    seed's records, the seed-mean curve is judged. A run the engine stopped because it diverged (a record with
    ``diverged``) has ended, not stalled: it is left out of the mean, and where every run diverged there is no
    rising curve to report (``""``; the table cell says "diverged")."""
    from fedlib import claims

    runs = records if records and isinstance(records[0], list) else [records]
    runs = [recs for recs in runs if not any(r.get("diverged") for r in recs)]
    if not runs:
        return ""
    curves = [[100 * r["acc"][metric][stat] for r in recs if "acc" in r] for recs in runs]
    n = min(len(c) for c in curves)   # seeds extended further than others (fedlib.plateau): their common rounds
    return claims.plateau_text(claims.mean_curve([c[:n] for c in curves]))


def trend(label: str, cfg: dict, seeds, metric: str, stat: str = "weighted", more: bool = False,
          derive: tuple = ()):
    """The :class:`fedlib.claims.Trend` of the finished runs of ``cfg`` for ``seeds`` (read through
    :mod:`fedlib.results`), judged on ``acc[metric][stat]`` in %; diverged runs are left out; ``None`` where no
    run has finished. It names its runs (a :class:`fedlib.plateau.Group`) for the evidence planner; ``more``: the
    cell reads the seeds added after ``seeds`` too (:func:`fedlib.results.cached`), so the planner may add some;
    ``derive``: what the cell reads of those seeds' trained models, made when the planner adds one
    (:attr:`fedlib.plateau.Group.derive`)."""
    from fedlib import claims, plateau, results

    group = plateau.Group(label, cfg, tuple(seeds), metric, stat, more, tuple(derive))
    runs = [recs for recs in (results.rounds(cfg, s) for s in seeds)
            if recs and not any(r.get("diverged") for r in recs)]
    if not runs:
        return None
    return claims.trend(label, [plateau.curve(recs, metric, stat) for recs in runs], group)


PLATEAU_RULE = ("Plateau: the best-so-far accuracy of the seed-mean curve gains under 0.2 points over the last 20% of "
                "rounds (`fedlib.claims.plateau`); \"no (+x)\" gives the gain of a curve still rising.")


def added_seeds_text(seeds: dict[str, list], profile_seeds, what: str = "the seeds the evidence planner added") -> str:
    """``", and the seeds the evidence planner added: FedMPS 1237-1239; FedProto 1237"`` from ``{label: the seeds a
    cell read}`` (those beyond the profile's ``profile_seeds``; ``what`` names them); ``""`` where no cell read
    any."""
    spans = []
    for label, got in seeds.items():
        x = sorted(set(got) - set(profile_seeds) - {None})
        if x:
            spans.append(f"{label} {x[0]}-{x[-1]}" if len(x) > 1 and x[-1] - x[0] == len(x) - 1
                         else f"{label} {', '.join(map(str, x))}")
    return f", and {what}: {'; '.join(spans)}" if spans else ""


def added_seeds_of(trends: dict, profile_seeds) -> str:
    """:func:`added_seeds_text` from ``{label: Trend}`` of a table's cells: the seeds each read are its trend's run
    group's (``None`` trends, and trends naming no runs, are skipped)."""
    return added_seeds_text({k: t.group.seeds for k, t in trends.items() if t is not None and t.group is not None},
                            profile_seeds)


def with_added(caveat: str, added: str) -> str:
    """``caveat`` followed by an :func:`added_seeds_text` (on its own, without the leading ", and ", where there is
    no caveat)."""
    return caveat + added if caveat else added.removeprefix(", and ")


def plateau_cell(text: str | None, trend=None) -> str:
    """A table cell from :func:`plateau_text`'s result: ``yes`` (``""``), ``no (+0.61)``, or ``—`` (``None``: not
    checked); with the group's :class:`fedlib.claims.Trend`, the round from which it plateaued (``yes, from round
    78``) or the rounds it reached still rising (``no (+0.61 at 200 rounds)``)."""
    if trend is not None:
        return (f"yes, from round {trend.since}" if trend.plateaued and trend.since else "yes" if trend.plateaued
                else f"no (+{trend.rise:.2f} at {trend.rounds} rounds)")
    if text is None:
        return "—"
    return "yes" if not text else "no (" + text.split("(")[1].split(" ")[0] + ")"


def not_run_text(what: str, found: int, total: int, command: str, under: str = "the paper protocol") -> str:
    """What a short profile's report says of a paper-protocol (or other long-profile, ``under``) table none of
    whose parts has finished: how many of its runs have, and the command that makes them."""
    return (f"**{what} under {under}: not run here** ({found} of {total} runs finished in this results "
            f"folder or the run archive). `{command}` makes them; this cell then shows them without training.")


def made_by(summaries) -> str:
    """Which code and machine made a set of runs, from their summaries: commits, device (GPU
    or CPU model with its kernel capability), when the last one finished and how many of them
    were read from the run archive, and their run time: the sum over runs of rounds x median
    seconds a round (a resumed run's time is counted once; runs that shared the machine's cores
    each count their own time)."""
    codes, where, when, archived, unrecorded, n, seconds = set(), set(), [], 0, 0, 0, 0.0
    for s in summaries:
        n += 1
        seconds += s.get("rounds", 0) * s.get("seconds_per_round_median", 0.0)
        archived += bool(s.get("archived"))
        if s.get("code"):
            codes.add(s["code"])
        else:
            unrecorded += 1
        m = s.get("machine", {})
        where.add((m.get("gpu") or f"CPU {m.get('cpu', '?')} ({m.get('cpu_capability', '?')})")
                  + (", batched clients" if s.get("executor") == "batched" else ""))
        if s.get("finished_utc"):
            when.append(s["finished_utc"])
    code = ((f"commit{'s' if len(codes) > 1 else ''} {', '.join(sorted(codes))}" if codes else "")
            + (", " if codes and unrecorded else "")
            + (f"{unrecorded} of {n} runs made before runs recorded their commit" if unrecorded else ""))
    return (f"{code} · {'; '.join(sorted(where))}"
            + (f" · last finished {max(when)} UTC" if when else "")
            + (f" · run time {_duration(seconds)} summed over {n} run{'s' if n != 1 else ''}" if seconds else "")
            + (f" · {archived} of {n} runs read from the run archive (archive/)" if archived else ""))


def _duration(seconds: float) -> str:
    """``42 s``, ``12 min`` or ``3.5 h``."""
    if seconds < 60:
        return f"{seconds:.0f} s"
    return f"{seconds / 60:.0f} min" if seconds < 3600 else f"{seconds / 3600:.1f} h"


class StudyParser(Parser):
    """A study command's parser: one-line errors (:class:`~fedlib.validation.Parser`), and parsing also puts
    the backend options in force (:func:`fedlib.backends.apply`; a bad value, or ``--backend ray`` without
    Ray, ends the command with a one-line error, exit status 2)."""

    def parse_known_args(self, args=None, namespace=None):
        from fedlib import backends

        parsed, rest = super().parse_known_args(args, namespace)
        try:
            backends.apply(parsed)
        except ConfigError as exc:
            self.exit(2, f"error: {exc}\n")
        return parsed, rest


def cli(prog: str, description: str) -> argparse.ArgumentParser:
    """The argument parser every study's headless command starts from: each value is checked as it is
    parsed (type and range; ``--device cuda`` needs a CUDA device), a bad one ends the command with one
    line and exit status 2 before anything is loaded."""
    from fedlib import backends
    from fedlib.config import EXECUTOR_CHOICES

    ap = StudyParser(prog=prog, description=description)
    ap.add_argument("--profile", default="quick", help="smoke, quick (default), paper or a study's own "
                    "(those params/profiles.yaml lists)")
    ap.add_argument("--methods", nargs="+", help="default: the profile's methods")
    ap.add_argument("--seeds", type=arg_type(SEED), nargs="+", help="default: the profile's seeds")
    ap.add_argument("--rounds", type=arg_type(POSITIVE_INT), help="default: the profile's rounds")
    ap.add_argument("--workers", type=arg_type(POSITIVE_INT),
                    help="runs in parallel (default: one per CPU core; 4 on CUDA)")
    ap.add_argument("--device", type=device_arg, help="auto (default: CUDA when present), cpu or cuda")
    ap.add_argument("--executor", choices=EXECUTOR_CHOICES, help="auto (default: batched on CUDA), sequential or "
                    "batched")
    return backends.add_options(ap)


INTERRUPTED = ("interrupted: queued runs cancelled; finished runs are cached and started runs resume from their "
               "last checkpoint: run the same command to go on")


def command(main):
    """Decorator of a study's ``main(argv)``: a bad value anywhere (options, the study's
    ``experiments.yaml``, the configs it makes) or a missing dataset ends it with one line and exit
    status 2; runs that raised end it with exit status 1 after the others finished (each listed); SIGINT
    or SIGTERM stop it within seconds (queued runs cancelled, :mod:`fedlib.interrupts`)
    with one line on how to go on and exit status 130."""
    import functools

    @functools.wraps(main)
    def run(argv: list[str] | None = None) -> int:
        import signal
        import sys
        import threading

        from fedlib.data.sources import DatasetUnavailable
        from fedlib.interrupts import STOP, stop_on_signals
        from fedlib.results import RunsFailed

        main_thread = threading.current_thread() is threading.main_thread()
        before = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
        if main_thread:
            stop_on_signals()
        try:
            return main(argv)
        except (ConfigError, DatasetUnavailable) as exc:
            print(f"error: {exc}")
            return 2
        except RunsFailed as exc:   # every other run finished and is kept
            print(f"error: {exc}", file=sys.stderr)
            return 1
        except KeyboardInterrupt:
            print(INTERRUPTED, file=sys.stderr)
            return 130
        finally:
            if main_thread:
                for sig, handler in before.items():
                    signal.signal(sig, handler)
            STOP.clear()

    return run


def add_retrain_archived(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """The ``--retrain-archived`` option of the commands that read finished runs (:func:`run_or_read`)."""
    parser.add_argument("--retrain-archived", action="store_true",
                        help="train the runs the run archive (archive/) holds again instead of reading them")
    return parser


def plan_from_cli(parser: argparse.ArgumentParser, load_plan, argv: list[str] | None = None):
    """Parse a study's command line (:func:`cli`) and load its plan: ``(args, plan)``, with ``plan`` None
    after printing the one-line error of a bad option value."""
    args = parser.parse_args(argv)
    try:
        plan = load_plan(args.profile, methods=args.methods, seeds=args.seeds, rounds=args.rounds,
                         device=args.device, executor=args.executor)
    except ConfigError as exc:
        print(f"error: {exc}")
        return args, None
    return args, plan
