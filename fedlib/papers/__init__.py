"""Per-paper study definitions: which runs a paper notebook needs and how to read them.

Each module ``fedlib/papers/<paper>.py`` defines a :class:`Plan` subclass that turns
``params/<paper>/experiments.yaml`` (read from the checkout, whatever the working
directory) plus a profile into experiment configs, and functions that turn finished runs
into the paper's tables. Notebooks stay thin: they call these functions, plot and write
the report. Every study also runs headless with one command shape::

    python -m fedlib.papers.<paper> [--profile P] [--methods M ...] [--seeds S ...] [--rounds N] [--workers W]
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
from pathlib import Path
from typing import ClassVar

import yaml

from fedlib.validation import POSITIVE_INT, SEED, ConfigError, Options, Parser, arg_type, check_value, device_arg

PARAMS_ROOT = Path(__file__).resolve().parents[2] / "params"


def check_seeds(seeds, field: str = "seeds") -> list[int]:
    """A notebook's ``seeds`` parameter: a non-empty list of integers in [0, 2**32 - 1]."""
    from fedlib.config import check_seeds as check

    return check(seeds, field)


def check_rounds(rounds, field: str = "rounds") -> int:
    """A notebook's ``rounds`` parameter: a positive integer."""
    return check_value(field, rounds, POSITIVE_INT)


def check_plan_settings(settings, where: str) -> None:
    """A profile's settings in ``experiments.yaml``: its seeds, and every round count (a key naming
    rounds, or the values of a mapping under one) a positive integer; ``where`` names the profile."""
    if "seeds" in settings:
        check_seeds(settings["seeds"], f"{where}.seeds")
    for key, value in settings.items():
        name = f"{where}.{key}"
        if isinstance(value, dict) and "rounds" in str(key):
            for sub, rounds in value.items():
                check_rounds(rounds, f"{name}.{sub}")
        elif isinstance(value, dict):
            check_plan_settings(value, name)
        elif "rounds" in str(key):
            check_rounds(value, name)


def check_methods(methods, known: list[str], required: tuple[str, ...] = (), why: str = "") -> list[str]:
    """A notebook's ``methods`` parameter: a non-empty list of known methods including ``required``."""
    if (not isinstance(methods, list) or not methods or any(m not in known for m in methods)
            or not set(required) <= set(methods)):
        need = f" including {', '.join(required)}{why}" if required else ""
        raise ConfigError("methods", methods, "a non-empty list of " + ", ".join(known) + need)
    return list(methods)


@dataclasses.dataclass
class Plan:
    """One paper's experiments under one profile: the whole ``experiments.yaml`` (``spec``),
    the profile's settings and where runs are cached."""

    paper: ClassVar[str] = ""

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

    @property
    def methods(self) -> list[str]:
        """The methods of ``experiments.yaml`` (its ``methods`` block), in file order."""
        return list(self.spec["methods"])

    def metric(self, method: str) -> str:
        """The paper's scoring rule for ``method``: ``acc_proto`` (nearest prototype) for the methods listed
        under ``prototype_methods`` in ``experiments.yaml``, ``acc_head`` for the others."""
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

    @classmethod
    def load(cls, profile: str = "quick", results_dir: str | Path | None = None, data_root: str | None = None,
             seeds: list[int] | None = None, path: str | Path | None = None, device: str | None = None,
             executor: str | None = None, **overrides) -> Plan:
        """The plan of ``profile``. ``results_dir`` defaults to the output root's ``results/``
        (:func:`fedlib.report.results_dir`), so notebooks, nbval and headless runs share one
        cache; ``seeds`` and the study's own ``overrides`` (e.g. ``methods``, ``rounds``)
        replace the profile's settings."""
        from fedlib import report

        from fedlib.config import EXECUTOR_CHOICES
        from fedlib.device import resolve
        from fedlib.reproduce import PROFILES

        source = Path(path or cls.params_file())
        spec = yaml.safe_load(source.read_text())
        listed = yaml.safe_load(PROFILES.read_text()) or {}
        allowed = [p for p in spec["profiles"] if p in listed]
        if profile not in allowed:
            raise ConfigError("profile", profile, "one of " + ", ".join(allowed) + " (see params/profiles.yaml)")
        check_plan_settings(spec["profiles"][profile], f"{source.parent.name}/{source.name}: profiles.{profile}")
        if device is not None:
            resolve(device)
        if executor is not None:
            check_value("executor", executor, Options(EXECUTOR_CHOICES))
        plan = cls(profile, spec, copy.deepcopy(spec["profiles"][profile]),
                   str(results_dir or report.results_dir()), data_root, device, executor)
        if seeds is not None:
            plan.settings["seeds"] = check_seeds(seeds)
        plan.override(**{k: v for k, v in overrides.items() if v is not None})
        return plan

    def override(self, **overrides) -> None:
        """Apply the study's own parameters (``methods``, ``rounds``, ...); none by default."""
        if overrides:
            raise ConfigError("study parameter", ", ".join(overrides), "none for this study")


@dataclasses.dataclass
class TablePlan(Plan):
    """A plan whose profile gives every run one round count (``rounds``) and lists the main table's rows
    (``table1_methods``: ``all`` or method names); the notebook's ``methods`` and ``rounds`` override them."""

    @property
    def rounds(self) -> int:
        return self.settings["rounds"]

    def table1_methods(self) -> list[str]:
        value = self.settings["table1_methods"]
        return self.methods if value == "all" else list(value)

    def override(self, methods: list[str] | None = None, rounds: int | None = None) -> None:
        """``methods`` (the main table's rows) and ``rounds`` (every run)."""
        if methods is not None:
            self.settings["table1_methods"] = check_methods(methods, self.methods)
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


def find(cfg: dict, seed: int, archive_root=None, archived: bool = True) -> tuple[dict | None, dict | None]:
    """``(config, summary)`` of the finished run ``(cfg, seed)``, training nothing: on ``cfg``'s own
    device and executor if it has finished there, else on the first other placement (:func:`placements`)
    that has it, e.g. paper-profile runs made on a GPU (``cuda``, ``batched``) and copied into the
    results folder of a CPU machine; ``(None, None)`` where none has. For each placement the results
    folder wins over the run archive (not looked at with ``archived=False``). The summary's ``machine``
    and ``executor`` say where it ran."""
    from fedlib import archive
    from fedlib.runner import cached_summary

    for c in placements(cfg):
        summary = cached_summary(c, seed) or (archive.summary(c, seed, archive_root) if archived else None)
        if summary is not None:
            return c, summary
    return None, None


def run_or_read(configs: dict, seeds: list[int] | None = None, workers: int | None = None, desc: str = "runs",
                progress: bool = True, archive_root=None, retrain_archived: bool = False) -> dict:
    """:func:`fedlib.runner.run_configs` for the headless study commands, except that a run already
    finished is read, not trained again: on another device or executor (:func:`find`), or in the run
    archive (:mod:`fedlib.archive`; so a paper-profile job goes on from where the committed archive ends, on
    a fresh clone too). ``retrain_archived=True`` trains the archive's runs again (to check them: a run
    made again on the same machine equals its record). A line says how many runs were read and from
    where. ``{key: [summary per seed]}`` in the order of ``configs``."""
    from fedlib.runner import cached_summary, run_many

    elsewhere, from_archive, todo = {}, {}, []
    for key, cfg in configs.items():
        for s in seeds or cfg["seeds"]:
            c, summary = (None, None) if cached_summary(cfg, s) else find(cfg, s, archive_root, not retrain_archived)
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
    done = {**elsewhere, **from_archive, **dict(zip(todo, made, strict=True))}
    return {key: [done[(key, s)] for s in seeds or cfg["seeds"]] for key, cfg in configs.items()}


def cached(configs: dict, seeds: list[int], archive_root=None) -> tuple[dict, int]:
    """What the cache already holds, training nothing: ``{key: [summary per seed]}`` for the
    configs whose every seed has finished, and how many of the ``len(configs) x len(seeds)``
    runs have. A short profile's report shows a longer profile's table this way once its runs
    were made (headless, or on another machine into the same results folder). A run the results
    folder lacks is read from the run archive (:mod:`fedlib.archive`), so that a fresh clone
    renders the committed report; a run missing on the plan's own device and executor is read
    from another placement (:func:`find`), and :func:`made_by` then names both machines."""
    found, complete = 0, {}
    for key, cfg in configs.items():
        runs = [find(cfg, s, archive_root)[1] for s in seeds]
        found += sum(r is not None for r in runs)
        if all(r is not None for r in runs):
            complete[key] = runs
    return complete, found


def rounds(cfg: dict, seed: int, archive_root=None) -> list[dict]:
    """The per-round records of a finished run, from the results folder or else the run archive, on
    ``cfg``'s placement or else another (:func:`find`); ``[]`` where it has not finished."""
    from fedlib import archive
    from fedlib.runner import load_rounds

    c, summary = find(cfg, seed, archive_root)
    if summary is None:
        return []
    return archive.rounds(c, seed, archive_root) if summary.get("archived") else load_rounds(c, seed)


def not_run_text(what: str, found: int, total: int, command: str) -> str:
    """What a short profile's report says of a paper-protocol table none of whose parts has finished: how many
    of its runs have, and the command that makes them."""
    return (f"**{what} under the paper protocol: not run here** ({found} of {total} runs finished in this results "
            f"folder). `{command}` makes them; this cell then shows them without training.")


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


def archived_tables() -> list[tuple[str, dict, list[int]]]:
    """The paper-profile tables a short profile's report quotes, as ``(name, configs, seeds)``:
    what ``python -m fedlib archive`` keeps in the repository."""
    from fedlib.papers import fedmps, gfpl

    fp, gp = fedmps.load_plan("paper"), gfpl.load_plan("paper")
    return [("FedMPS Table III (paper profile)", fedmps.table3_configs(fp), fp.seeds),
            ("FedMPS Table VI (paper profile)", fedmps.ways_configs(fp), fp.seeds[:1]),
            ("FedMPS Table VII (paper profile)", fedmps.ablation_configs(fp), fp.seeds[:1]),
            ("GFPL Table 1 (paper profile)", gfpl.table1_configs(gp), gp.seeds),
            ("GFPL Table 2 (paper profile)", gfpl.ablation_configs(gp), gp.seeds),
            ("GFPL Figs. 3b and 6 (paper profile)", {**{("n", n): c for n, c in gfpl.n_configs(gp).items()},
                                                      **{("sc", t): c for t, c in gfpl.threshold_configs(gp).items()}},
             gp.seeds[:1])]


def cli(prog: str, description: str) -> argparse.ArgumentParser:
    """The argument parser every study's headless command starts from: each value is checked as it is
    parsed (type and range; ``--device cuda`` needs a CUDA device), a bad one ends the command with one
    line and exit status 2 before anything is loaded."""
    from fedlib.config import EXECUTOR_CHOICES

    ap = Parser(prog=prog, description=description)
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
    return ap


INTERRUPTED = ("interrupted: queued runs cancelled; finished runs are cached and started runs resume from their "
               "last checkpoint: run the same command to go on")


def command(main):
    """Decorator of a study's ``main(argv)``: a bad value anywhere (options, the study's
    ``experiments.yaml``, the configs it makes) or a missing dataset ends it with one line and exit
    status 2; SIGINT or SIGTERM stop it within seconds (queued runs cancelled, :mod:`fedlib.interrupts`)
    with one line on how to go on and exit status 130."""
    import functools

    @functools.wraps(main)
    def run(argv: list[str] | None = None) -> int:
        import signal
        import sys
        import threading

        from fedlib.data.sources import DatasetUnavailable
        from fedlib.interrupts import STOP, stop_on_signals

        main_thread = threading.current_thread() is threading.main_thread()
        before = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
        if main_thread:
            stop_on_signals()
        try:
            return main(argv)
        except (ConfigError, DatasetUnavailable) as exc:
            print(f"error: {exc}")
            return 2
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
