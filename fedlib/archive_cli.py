"""``python -m fedlib archive``: keep (or check, or index) in the run archive (:mod:`fedlib.archive`) the records of the
long-profile runs the report reads, the tables every study declares (:func:`fedlib.papers.catalog.archived_tables`).
It sits outside :mod:`fedlib.papers`, which reaches the runs only through :mod:`fedlib.results`."""

from __future__ import annotations

import sys
from pathlib import Path

from fedlib.papers import catalog


def main(argv: list[str] | None = None) -> int:
    """``python -m fedlib archive [--check] [--index] [--replace] [--root DIR]``: archive (or check, or index) the
    long-profile runs the report reads."""
    import warnings

    from fedlib import archive, results, store
    from fedlib.runner import cached_summary
    from fedlib.validation import ConfigError, Parser, check_writable

    parser = Parser(prog="python -m fedlib archive", description=main.__doc__)
    parser.add_argument("--check", action="store_true", help="verify the archive, copy nothing")
    parser.add_argument("--index", action="store_true", help="write the archive's INDEX.json for the entries that "
                        "pass their checks, copy nothing")
    parser.add_argument("--root", default=None, help="archive folder (default archive/ in the checkout)")
    parser.add_argument("--replace", action="store_true", help="replace entries already archived with the results "
                        "folder's run (default: keep them)")
    args = parser.parse_args(argv)
    root = Path(args.root) if args.root else None
    where = root or archive.ARCHIVE
    try:
        if args.check or args.index:   # reads an archive: it must be there
            if not where.is_dir():
                raise ConfigError("--root", str(where), "an archive folder" + (" (this is a file)" if where.exists()
                                                                               else " (there is none)"))
            if args.index:
                check_writable(where, "--root")
        else:
            check_writable(where, "--root")
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.index:
        indexed, refused = archive.build_index(where)
        for line in refused:
            print(line)
        print(f"archive index: {indexed} entr{'y' if indexed == 1 else 'ies'} recorded in {where / archive.INDEX}"
              + (f"; {len(refused)} left out (above)" if refused else ""))
        return 1 if refused else 0
    failed = 0
    for name, configs, seeds in catalog.archived_tables():
        jobs = [(cfg, s) for cfg in configs.values() for s in seeds]
        if args.check:   # how far each table has come; what is wrong is named entry by entry below
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", store.DamagedRunWarning)
                ok = sum(any(archive.summary(c, s, root) is not None for c in results.placements(cfg)
                             if archive.entry(c, s, root).exists()) for cfg, s in jobs)
            done = sum(any(cached_summary(c, s) is not None for c in results.placements(cfg)) for cfg, s in jobs)
            print(f"{name}: {ok} of {len(jobs)} runs in the archive pass their checks; {done} finished in the "
                  "results folder")
        else:  # the run on the table's own placement, else the first other one that finished (results.find)
            def count(fn, jobs=jobs):  # the jobs for which fn holds on some placement
                return sum(any(fn(c, s) for c in results.placements(cfg)) for cfg, s in jobs)

            before = count(lambda c, s: archive.entry(c, s, root).exists())
            count(lambda c, s: archive.add(c, s, root, args.replace))
            after = count(lambda c, s: archive.entry(c, s, root).exists())
            print(f"{name}: {after} of {len(jobs)} runs in the archive ({after - before} added, {before} already "
                  "there" + (", replaced by the results folder's where it has them)" if args.replace else " and kept)"))
    if args.check:
        problems = archive.check(where)
        for line in problems:
            print(line)
        failed = len(problems)
        entries = sum(not line.startswith(str(where / archive.INDEX)) for line in problems)
        if failed:
            print(f"archive check: {entries} entr{'y' if entries == 1 else 'ies'} failed"
                  + (f", and its {archive.INDEX}" if entries < failed else "") + " (named above)")
    return 1 if failed else 0
