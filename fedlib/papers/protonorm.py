"""The ProtoNorm study (Lee, Shin, Choi, arXiv 2507.04310): configs and analyses.

So far the spiral study of Figs. 1, 2 and 6: FedProto on IID and non-IID (Dir 0.1)
spirals, ProtoNorm with Prototype Alignment, and with Alignment plus Upscaling, all
with a 2-D decision layer so prototypes and features can be drawn.
"""

from __future__ import annotations

import copy
import dataclasses
import math
from pathlib import Path

import numpy as np
import torch
import yaml

from fedlib.experiments import RunState, apply_overrides, validate
from fedlib.validation import ConfigError

PARAMS = Path("params/protonorm/experiments.yaml")


@dataclasses.dataclass
class Plan:
    profile: str
    spec: dict
    settings: dict
    results_dir: str = "results"

    @property
    def seeds(self) -> list[int]:
        return list(self.settings["seeds"])


def load_plan(profile: str = "quick", path: str | Path = PARAMS, results_dir: str = "results") -> Plan:
    spec = yaml.safe_load(Path(path).read_text())
    if profile not in spec["profiles"]:
        raise ConfigError("profile", profile, "one of " + ", ".join(spec["profiles"]))
    return Plan(profile, spec, dict(spec["profiles"][profile]), results_dir)


def spiral_configs(plan: Plan) -> dict[str, dict]:
    """The four spiral runs (Figs. 1-2, 6), validated."""
    sp = plan.spec["spiral"]
    out = {}
    for key, run in sp["runs"].items():
        raw = copy.deepcopy(sp["base"])
        raw["partition"] = dict(sp["partitions"][run["partition"]])
        raw["algorithm"] = dict(run["algorithm"])
        raw["seeds"] = plan.seeds
        raw["results_dir"] = plan.results_dir
        raw["name"] = f"protonorm-study/spiral/{key}"
        raw = apply_overrides(raw, {"train.rounds": plan.settings["spiral_rounds"]})
        out[key] = validate(raw)
    return out


def smallest_angle(protos: np.ndarray) -> float:
    """Smallest angle (degrees) between any two prototypes (the spiral panels' number)."""
    p = np.asarray(protos, dtype=np.float64)
    p = p / np.linalg.norm(p, axis=1, keepdims=True).clip(1e-12)
    cos = np.clip(p @ p.T, -1.0, 1.0)
    np.fill_diagonal(cos, -1.0)
    return math.degrees(math.acos(cos.max()))


def global_prototypes(state: RunState) -> tuple[np.ndarray, np.ndarray]:
    """(classes, prototypes) the server sends, as a client would use them for inference."""
    msg = state.message(0)
    return msg["classes"].numpy(), msg["protos"].numpy()


def local_prototypes(state: RunState) -> list[tuple[int, int, np.ndarray]]:
    """(client, class, prototype) of every client: class means of its training features
    under its final model (eval mode)."""
    out = []
    with torch.no_grad():
        for cid in range(state.data.num_clients):
            train = state.data.train[cid]
            z = state.algorithm.features(state.ctx, state.clients[cid], state.message(cid), train.x)["high"]
            for c in torch.unique(train.y).tolist():
                out.append((cid, c, z[train.y == c].mean(0).numpy()))
    return out


def test_representations(state: RunState, max_points: int = 3000, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """2-D features of every client's test points under its own model, pooled and subsampled."""
    zs, ys = [], []
    with torch.no_grad():
        for cid in range(state.data.num_clients):
            test = state.data.test[cid]
            feats = state.algorithm.features(state.ctx, state.clients[cid], state.message(cid), test.x)
            zs.append(feats["high"].numpy())
            ys.append(test.y.numpy())
    z, y = np.concatenate(zs), np.concatenate(ys)
    if len(y) > max_points:
        keep = np.sort(np.random.default_rng(seed).choice(len(y), max_points, replace=False))
        z, y = z[keep], y[keep]
    return z, y
