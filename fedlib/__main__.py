"""Command line: ``python -m fedlib run params/<file>.yaml [key=value ...]``, ``python -m fedlib reproduce``,
``python -m fedlib archive``."""

from __future__ import annotations

import logging
import sys
from pathlib import Path

from fedlib import backends


def parser():
    """The command line's parser: ``run``, ``reproduce``, ``partition``, ``archive`` (``report`` and ``evidence``
    are listed; their own parsers read their options)."""
    from fedlib.device import device_arg
    from fedlib.validation import Parser

    parser = Parser(prog="python -m fedlib", description="Prototype-based FL reproduction suite")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=Parser)
    run = sub.add_parser("run", help="run an experiment config (every seed), print a summary")
    run.add_argument("config", help="YAML file, e.g. params/fedproto_fmnist.yaml")
    run.add_argument("overrides", nargs="*", help="key=value, e.g. train.rounds=5 algorithm.lam=0.5 seeds=[1,2]")
    run.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    rep = sub.add_parser("reproduce", help="run every paper notebook headless under a profile and write REPORT.md "
                                           "(the main job)")
    rep.add_argument("--profile", default="quick", help="smoke, quick (default) or paper; see params/profiles.yaml")
    rep.add_argument("--only", action="append", metavar="NAME",
                     help="run only notebook NAME (e.g. fedmps); repeat for several")
    rep.add_argument("--notebooks", default=None, help="folder of notebooks (default notebooks/)")
    rep.add_argument("--root", default=None,
                     help="where figures/, results/executed/ and REPORT.md go (default the checkout)")
    rep.add_argument("--log-output", action="store_true", help="stream the notebooks' cell output too")
    rep.add_argument("--no-progress", action="store_true", help="hide papermill's progress bar")
    rep.add_argument("--device", default=None, type=device_arg,
                     help="auto, cpu or cuda for every run of every notebook (default: the notebooks' own, auto)")
    backends.add_options(rep)  # written to the environment, which the notebooks' kernels inherit
    part = sub.add_parser("partition", help="draw a config's partition heatmap and print its counts")
    part.add_argument("config")
    part.add_argument("overrides", nargs="*")
    part.add_argument("--out", default=None, help="PNG path (default figures/partition_<name>.png)")
    arc = sub.add_parser("archive", help="keep the records of the paper-profile runs the report quotes in archive/ "
                                          "(committed, so a fresh clone renders the same report)")
    arc.add_argument("--check", action="store_true", help="verify the archive and count the finished runs of the "
                                                          "results folder, copy nothing")
    arc.add_argument("--root", default=None, help="archive folder (default archive/ in the checkout)")
    arc.add_argument("--replace", action="store_true", help="replace entries already archived (default: keep them)")
    arc.add_argument("--index", action="store_true", help="write archive/INDEX.json for the entries there that pass "
                                                          "their checks (what --check compares with), copy nothing")
    sub.add_parser("report", help="render REPORT.md from the run archive alone (no training); --check compares",
                   add_help=False)
    sub.add_parser("evidence", help="what would decide each open claim and its CPU cost; --run --budget 3h runs the "
                                    "cheapest decisive extensions", add_help=False)
    return parser


def main(argv: list[str] | None = None) -> int:
    if argv is None:
        argv = sys.argv[1:]
    if argv and argv[0] in ("report", "evidence"):   # their own parsers (python -m fedlib report --help)
        logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
        from fedlib import render

        return (render.main if argv[0] == "report" else render.evidence_main)(argv[1:])
    cli = parser()
    args, extra = cli.parse_known_args(argv)
    if args.command in ("run", "partition"):   # key=value after a flag (run CFG --no-progress train.rounds=5)
        args.overrides += [a for a in extra if not a.startswith("-")]
        extra = [a for a in extra if a.startswith("-")]
    if extra:
        cli.error(f"unrecognized arguments: {' '.join(extra)}")
    from fedlib.logs import BarSafeHandler

    logging.basicConfig(level=logging.WARNING, handlers=[BarSafeHandler()])

    from fedlib.interrupts import stop_on_signals

    stop_on_signals()  # SIGINT and SIGTERM: the work in progress stops, finished work stays
    if args.command == "reproduce":  # the notebooks' kernels do the work: this process needs no torch
        return reproduce_command(args)
    if args.command == "archive":
        from fedlib.archive_cli import main as archive_main

        return archive_main((["--check"] if args.check else []) + (["--root", args.root] if args.root else [])
                            + (["--replace"] if args.replace else []) + (["--index"] if args.index else []))
    return run_command(args)


def reproduce_command(args) -> int:
    """``python -m fedlib reproduce``: the notebooks headless, then REPORT.md rendered from the archive (a profile
    other than smoke, written into the checkout)."""
    from fedlib.report import CHECKOUT
    from fedlib.reproduce import reproduce
    from fedlib.validation import ConfigError, os_error

    try:
        backends.apply(args)
        code = reproduce(args.profile, notebooks=args.notebooks or CHECKOUT / "notebooks",
                         root=args.root or CHECKOUT, only=args.only, progress=not args.no_progress,
                         log_output=args.log_output, device=args.device)
        if args.profile != "smoke" and (args.root is None or Path(args.root).resolve() == CHECKOUT.resolve()):
            from fedlib.render import main as render_main   # REPORT.md: the render of the run archive

            code = max(code, render_main([]))
        return code
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"error: {os_error(exc)}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("interrupted; finished experiments are cached, run the same command to go on", file=sys.stderr)
        return 130


def run_command(args) -> int:
    """``python -m fedlib run`` (every seed of a config, then its summary) and ``python -m fedlib partition``."""
    from fedlib.config import load_config
    from fedlib.data.sources import DatasetUnavailable
    from fedlib.runner import format_summary, run_experiment
    from fedlib.validation import ConfigError, os_error

    try:
        cfg = load_config(args.config, args.overrides)
        if args.command == "run":
            summaries = run_experiment(cfg, progress=not args.no_progress)
            print(format_summary(cfg, summaries))
        else:
            draw_partition(cfg, args.out)
    except (ConfigError, DatasetUnavailable) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:   # a full disk, a folder made unwritable while the run went on
        print(f"error: {os_error(exc)}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("interrupted; finished rounds are checkpointed, run the same command to resume", file=sys.stderr)
        return 130
    return 0


def draw_partition(cfg: dict, out: str | None) -> None:
    """``python -m fedlib partition``: the partition's heatmap into ``out`` and its counts per client."""
    from fedlib.plots import partition_heatmap
    from fedlib.runner import build

    path = partition_output(out, cfg["name"])   # checked before any data is loaded
    data, _, _ = build(cfg, cfg["seeds"][0])
    path.parent.mkdir(parents=True, exist_ok=True)
    partition_heatmap(data.partition, title=cfg["name"]).figure.savefig(path, dpi=120, bbox_inches="tight")
    counts = data.partition.counts
    print(f"{cfg['name']}: {data.num_clients} clients, {int(counts.sum())} train samples, "
          f"hash {data.partition.hash}; heatmap -> {path}")
    for cid, row in enumerate(counts):
        print(f"  client {cid:3d}: " + " ".join(f"{c}:{n}" for c, n in enumerate(row) if n))


def partition_output(out: str | None, name: str):
    """Where ``partition`` writes its heatmap, checked before any data is loaded: ``--out``, else
    ``figures/partition_<name>.png`` with ``name`` a file name (:func:`fedlib.validation.check_file_name`: a
    ``name`` such as ``x/../../escape`` would write outside ``figures/``); a format matplotlib writes, and a folder
    that can be written."""
    from pathlib import Path

    from fedlib.validation import ConfigError, check_file_name, check_writable

    if out is None:
        try:
            check_file_name("name", name)
        except ConfigError as exc:
            raise ConfigError("name", name, exc.allowed, message=f"{exc} (it names figures/partition_<name>.png; "
                              "give the figure's path with --out)") from None
        path = Path("figures") / f"partition_{name}.png"
    else:
        path = Path(out)
        if any(ord(ch) < 32 for ch in out):
            raise ConfigError("--out", out, "a file path without control characters")
    if path.is_dir():
        raise ConfigError("--out", str(path), "a file path (this is a folder)")
    from matplotlib.backend_bases import FigureCanvasBase

    formats = FigureCanvasBase.get_supported_filetypes()
    if path.suffix.lstrip(".").lower() not in formats:
        raise ConfigError("--out", str(path), "a file name ending in ." + ", .".join(sorted(formats)))
    check_writable(path.parent, "--out" if out is not None else "figures")
    return path


if __name__ == "__main__":
    sys.exit(main())
