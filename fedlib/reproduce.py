"""The main job: run every experiment file in ``params/`` under one profile.

``python -m fedlib reproduce --profile quick`` loads each ``params/*.yaml`` except
``profiles.yaml``, applies the profile's overrides, runs (or fetches from the cache)
every seed and prints its summary. One failing experiment does not stop the others;
the batch ends with what passed and what failed and exits non-zero on any failure.
"""

from __future__ import annotations

import logging
import traceback
from pathlib import Path

import yaml

from fedlib.experiments import format_summary, load_config, run_experiment
from fedlib.validation import ConfigError

log = logging.getLogger(__name__)
PROFILES = Path("params/profiles.yaml")


def load_profile(name: str, path: Path = PROFILES) -> dict:
    """The ``{dotted.key: value}`` overrides of profile ``name``."""
    profiles = yaml.safe_load(Path(path).read_text()) or {}
    if name not in profiles:
        raise ConfigError("profile", name, "one of " + ", ".join(profiles))
    return dict(profiles[name] or {})


def experiment_files(folder: Path = Path("params")) -> list[Path]:
    """Top-level experiment configs (reference data and profiles are not experiments)."""
    return sorted(p for p in Path(folder).glob("*.yaml") if p.name != PROFILES.name)


def reproduce(profile: str = "quick", files: list[Path] | None = None, progress: bool = True,
              extra: dict | None = None) -> int:
    """Run every experiment under ``profile`` (plus ``extra`` overrides); 0 if all succeeded, else 1."""
    overrides = {**load_profile(profile), **(extra or {})}
    files = files or experiment_files()
    results = []
    for path in files:
        try:
            cfg = load_config(path, overrides)
            summaries = run_experiment(cfg, progress=progress)
            print(format_summary(cfg, summaries), flush=True)
            results.append((path, "ok", ""))
        except Exception as exc:  # one failure must not stop the batch
            results.append((path, "FAILED", f"{type(exc).__name__}: {exc}"))
            log.debug("%s", traceback.format_exc())
            print(f"{path}: FAILED: {type(exc).__name__}: {exc}", flush=True)
    failed = [r for r in results if r[1] != "ok"]
    print(f"\nreproduce (profile {profile}): {len(results) - len(failed)} passed, {len(failed)} failed")
    for path, status, why in results:
        print(f"  {status:6} {path}{'  ' + why if why else ''}")
    return 1 if failed else 0
