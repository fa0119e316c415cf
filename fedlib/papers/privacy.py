"""The privacy study: what each method's upload leaks, under attacks that try hard, and a defence's price.

``load_plan(profile)`` reads ``params/privacy/experiments.yaml``. Every registered method trains a short
federated run through the engine (:func:`table_configs`); the attacks of :mod:`fedlib.privacy.rounds` then take,
from the finished run, the (broadcast, upload) pair of the target client's next round and apply every attack that
:func:`fedlib.privacy.holds.what_server_holds` lists for the method from its declared messages, so a method
added to ``experiments.yaml`` enters the table with no new code. The outputs:

- :func:`leakage`: the leakage table (PSNR, SSIM, held-out label accuracy) with the three references, ranked over the
  realistic attacks with the batch-1 upper bound in its own column (:func:`table`, :func:`headline`);
- :func:`pictures`: the attacked client's reconstructions of each attack beside its images, kept with the scores
  (:func:`picture_rows`, :func:`picture_figures`; the paper notebooks' attack figures: :func:`paper_pictures`);
- :func:`curve`: the samples-per-prototype curves (mean / k-means centroid / mixture component);
- :func:`utility`: accuracy against the best attack's SSIM at each noise level of the two defences (clip + noise
  on every upload; sample-level DP-SGD in local training where the model is the upload), with the
  (epsilon, delta) of Opacus's RDP accountant;
- :func:`ledger`: the three papers' privacy claims (``params/privacy/claims.yaml``), judged by the claims
  engine on :func:`tables`.

Threat models per attack: docs/privacy.md. Attack results are values derived from the attacked run's trained model
(:func:`fedlib.results.derived`), named by the attack settings: kept in the run's folder, archived with the run (its
per-seed scores, so the tables and the ledger recompute from the repository), and read from the archive on a fresh
clone.
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import json
import math
import time

import numpy as np
import pandas as pd
import torch

from fedlib import claims, report, results, study
from fedlib.claims import Cells
from fedlib.privacy.attack import attacker_aux
from fedlib.privacy.dpsgd import DP_SGD_METHODS
from fedlib.privacy.rounds import PICTURES, attack_round, finite_scores, held_out_classifier
from fedlib.study import check_methods
from fedlib.study.notebook import Shown
from fedlib.validation import ConfigError

TITLE = "What the uploads leak: one leakage study across the suite"
IMAGE_ATTACKS = ("gradient_inversion", "feature_inversion", "decoder", "imprint")
CURVE_KINDS = ("mean", "kmeans", "gmm")


@dataclasses.dataclass
class Plan(study.TablePlan):
    """The privacy study under one profile; the leakage table's rows are the profile's ``methods``."""

    paper = "privacy"
    sections = {"defense": None, "dp_sgd": None}   # its own sections of experiments.yaml
    rows_key = "methods"
    table_methods = study.TablePlan.table1_methods

    @classmethod
    def complete(cls, spec: dict) -> None:
        """An entry for every registered method (:data:`fedlib.algorithms.ALGORITHMS`) the file has none for: its
        defaults and the label the benchmark prints (``params/benchmark/experiments.yaml``), after the file's own
        entries, in name order. So a method added to fedlib is a row of the leakage table (a profile's ``methods:
        all``) with no line here; a line here is for one that needs other settings (a model, hyperparameters)."""
        from fedlib.algorithms import ALGORITHMS
        from fedlib.config import read_yaml

        named = {e.get("algorithm", {}).get("name", m) for m, e in spec["methods"].items()}
        new = [m for m in sorted(ALGORITHMS) if m not in named and m not in spec["methods"]
               and not m.startswith("user:")]   # a method file's, registered only for a call (loader.registered)
        if new:
            labels = read_yaml(study.PARAMS_ROOT / "benchmark" / "experiments.yaml",
                               "benchmark/experiments.yaml")["methods"]
            for m in new:
                spec["methods"][m] = {"label": labels.get(m, {}).get("label", m), "algorithm": {"name": m}}

    def attacks(self) -> list[str]:
        return list(self.settings["attacks"])


def check_spec(plan: Plan) -> None:
    """The study's own fields: every listed method and utility method in ``methods``, known attacks and curve
    kinds, noise levels >= 0; a one-line :class:`ConfigError` naming the field otherwise."""
    s, where = plan.settings, f"privacy/experiments.yaml: profiles.{plan.profile}"
    if s["methods"] != "all":
        check_methods(s["methods"], plan.methods)
    for key, allowed in (("attacks", IMAGE_ATTACKS), ("curve_kinds", CURVE_KINDS),
                         ("utility_methods", tuple(plan.methods))):
        if not isinstance(s.get(key), list) or not s[key] or any(a not in allowed for a in s[key]):
            raise ConfigError(f"{where}.{key}", s.get(key), "a non-empty list of " + ", ".join(allowed))
    dp = s.get("dp_sgd_methods", [])
    if not isinstance(dp, list) or any(m not in DP_SGD_METHODS or m not in plan.methods for m in dp):
        raise ConfigError(f"{where}.dp_sgd_methods", dp, "a list of methods of this file that DP-SGD applies to: "
                          + ", ".join(DP_SGD_METHODS))
    if not isinstance(s.get("noise"), list) or not s["noise"] or any(
            isinstance(v, bool) or not isinstance(v, (int, float)) or v < 0 for v in s["noise"]):
        raise ConfigError(f"{where}.noise", s.get("noise"), "a non-empty list of noise multipliers >= 0")
    for key in ("attack_steps", "restarts", "batch1_images", "decoder_steps", "aux_images", "curve_groups"):
        study.check_value(f"{where}.{key}", s.get(key), study.POSITIVE_INT)
    sizes = s.get("curve_sizes")
    if not isinstance(sizes, list) or not sizes or any(not study.POSITIVE_INT.ok(n) for n in sizes):
        raise ConfigError(f"{where}.curve_sizes", sizes, "a non-empty list of positive integers")


def load_plan(profile: str = "quick", results_dir: str | None = None, data_root: str | None = None,
              methods: list[str] | None = None, seeds: list[int] | None = None, rounds: int | None = None,
              device: str | None = None, executor: str | None = None) -> Plan:
    """The plan of ``profile``; ``methods``, ``seeds`` and ``rounds`` override it (e.g. from the notebook)."""
    plan = Plan.load(profile, results_dir, data_root, seeds, device=device, executor=executor, methods=methods,
                     rounds=rounds)
    check_spec(plan)
    return plan


def config(plan: Plan, method: str, noise: float | None = None, dp_sgd: bool = False, **changes) -> dict:
    """The validated run config of ``method``; ``noise``: the defence's noise multiplier (clips from
    ``experiments.yaml``; None: no defence), on every upload or, with ``dp_sgd``, on each sample's gradient in
    local training; ``changes`` are dotted overrides applied last."""
    entry = plan.method_entry(method)
    base, name = copy.deepcopy(plan.spec["base"]), f"privacy-study/{method}"
    if noise is not None and dp_sgd:
        base["defense"] = {"mechanism": "dp_sgd", **plan.spec["dp_sgd"], "noise_multiplier": float(noise)}
        name += f"/dpsgd{noise:g}"
    elif noise is not None:
        base["defense"] = {**plan.spec["defense"], "noise_multiplier": float(noise)}
        name += f"/noise{noise:g}"
    return plan.config(entry, name, method=method, base=base, rounds=plan.rounds, changes=changes)


def table_configs(plan: Plan) -> dict[str, dict]:
    """The leakage table's runs: one per method of the profile, no defence."""
    return {m: config(plan, m) for m in plan.table_methods()}


def defense_configs(plan: Plan) -> dict[tuple[str, float], dict]:
    """The privacy-utility curve's runs: each utility method at each noise level; noise 0 is the undefended run
    (the leakage table's), the others clip and noise every upload (:func:`fedlib.privacy.defense.defend_upload`)."""
    return {(m, float(s)): config(plan, m, None if s == 0 else float(s))
            for m in plan.settings["utility_methods"] for s in plan.settings["noise"]}


def dp_sgd_configs(plan: Plan) -> dict[tuple[str, float], dict]:
    """The DP-SGD points of the privacy-utility curve: each ``dp_sgd_methods`` method at each noise level; noise 0
    is the undefended run (as for :func:`defense_configs`), the others train with each sample's gradient clipped to
    ``dp_sgd.clip_sample`` and noised (:mod:`fedlib.privacy.dpsgd`)."""
    return {(m, float(s)): config(plan, m, None if s == 0 else float(s), dp_sgd=True)
            for m in plan.settings.get("dp_sgd_methods", []) for s in plan.settings["noise"]}


def all_jobs(plan: Plan) -> list[tuple[dict, int]]:
    """Every (config, seed) of the study, unique, longest first."""
    jobs = [(c, s) for c in table_configs(plan).values() for s in plan.seeds]
    jobs += [(c, s) for c in defense_configs(plan).values() for s in plan.seeds]
    jobs += [(c, s) for c in dp_sgd_configs(plan).values() for s in plan.seeds]
    return study.unique_jobs(jobs, lambda cfg: cfg["train"]["rounds"] * cfg["partition"]["num_clients"])


def metric(plan: Plan, method: str) -> str:
    """The method's inference rule for accuracy (``acc_proto`` for ``prototype_methods``, else ``acc_head``)."""
    return plan.metric(method)


def accuracy(plan: Plan, method: str, summary: dict) -> float:
    """A run's accuracy (%) under the method's rule, mean over clients, at the last round."""
    return 100.0 * summary["metrics"][metric(plan, method)]["last"]


auxiliary = attacker_aux   # the attacker's same-distribution images that are not the client's


def attack_method(plan: Plan, state, method: str, aux: tuple, classifier, noise: float | None = None,
                  seed: int = 0, pictures: int | None = None):
    """Every image attack of the profile that applies to ``method`` (:func:`what_server_holds`) on the target
    client's next round of the finished run ``state`` (:func:`fedlib.privacy.rounds.attack_round`, with the
    profile's attack settings); with ``noise`` the upload first goes through the defence (:func:`defend_upload`,
    the clips of ``experiments.yaml``)."""
    from fedlib.privacy import what_server_holds

    todo = [a for a in plan.attacks() if a in what_server_holds(method).attacks]
    defence = None if noise is None else {**plan.spec["defense"], "noise_multiplier": float(noise)}
    return attack_round(state, method, todo, plan.spec["attack"], plan.settings, aux, classifier, defence, seed,
                        pictures)



def _settings_key(plan: Plan, extra: str = "") -> str:
    keys = ("attacks", "attack_steps", "restarts", "batch1_images", "decoder_steps", "aux_images")
    body = {k: plan.settings[k] for k in keys} | {"attack": plan.spec["attack"], "defense": plan.spec["defense"],
                                                  "extra": extra, "version": 1}
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()[:10]


class Attacker:
    """The attacker's side of one seed: its auxiliary images and the held-out classifier, from the first run
    of that seed (every run of a seed shares the partition, hence the target client's data). Built from that run's
    trained model on first use, so that reading archived attack results needs no model."""

    def __init__(self, plan: Plan, seed: int):
        self.plan, self.seed = plan, seed
        self._built = None

    def _build(self):
        if self._built is None:
            plan, seed = self.plan, self.seed
            state = results.state(table_configs(plan)[plan.table_methods()[0]], seed)
            atk = plan.spec["attack"]
            aux = auxiliary(state, atk["client"], plan.settings["aux_images"], seed)
            classifier = held_out_classifier(state, *aux, atk["classifier_epochs"], seed)
            private = state.data.train[atk["client"]]
            acc = float((classifier(private.x)[0].argmax(1) == private.y).float().mean())
            self._built = (aux, classifier, (private.x, private.y), acc)
        return self._built

    @property
    def aux(self):
        return self._build()[0]

    @property
    def classifier(self):
        return self._build()[1]

    @property
    def private(self):
        return self._build()[2]

    @property
    def classifier_acc(self) -> float:
        """The held-out classifier's accuracy on the target client's private images (kept with the seed's first
        run, :func:`fedlib.results.derived`)."""
        cfg = table_configs(self.plan)[self.plan.table_methods()[0]]
        return results.derived(cfg, self.seed, f"privacy-classifier-{_settings_key(self.plan)}",
                               lambda _state: self._build()[3])


def attacks_name(plan: Plan, noise: float | None = None) -> str:
    """The derived value (:func:`fedlib.results.derived`) holding a run's attack scores: ``privacy-attacks-<hash>``,
    the hash of the attack settings and the noise (:func:`_settings_key`)."""
    return f"privacy-attacks-{_settings_key(plan, f'noise={noise}')}"


def pictures_name(plan: Plan, noise: float | None = None) -> str:
    """The derived value holding a run's attack pictures (:func:`pictures`): ``privacy-pictures-<hash>``, the hash
    of the attack settings, the noise and the number of images kept (:data:`PICTURES`)."""
    return f"privacy-pictures-{_settings_key(plan, f'noise={noise}; pictures={PICTURES}')}"


def attacks(plan: Plan, cfg: dict, method: str, seed: int, attacker: Attacker, noise: float | None = None
            ) -> list[dict]:
    """:func:`attack_method` on the finished run ``(cfg, seed)``: a value derived from its trained model, read where
    it was computed before or archived (:func:`fedlib.results.derived`). Computed, it is the rows of the same call
    that kept the pictures (:func:`pictures`), which are kept beside it."""
    return results.derived(cfg, seed, attacks_name(plan, noise),
                           lambda _state: pictures(plan, cfg, method, seed, attacker, noise)["rows"])


def pictures(plan: Plan, cfg: dict, method: str, seed: int, attacker: Attacker, noise: float | None = None) -> dict:
    """The attacked client's reconstructions of the finished run ``(cfg, seed)``: ``{"rows": the attack rows of
    :func:`attack_method` (the scores the leakage table reads), "pictures": {attack: picture}}`` (up to
    :data:`PICTURES` images per attack beside the private images they were scored against), a value derived from
    the run's trained model (:func:`fedlib.results.derived`, named :func:`pictures_name`), so that the figures are
    drawn from the run archive without the model."""
    def make(state):
        rows, kept = attack_method(plan, state, method, attacker.aux, attacker.classifier, noise, seed,
                                   pictures=PICTURES)
        return {"rows": rows, "pictures": kept}

    return results.derived(cfg, seed, pictures_name(plan, noise), make)


def reference_rows(plan: Plan, seed: int, attacker: Attacker) -> list[dict]:
    """The three references on the target client's private images: the attacker's class average, the best
    match in its auxiliary data, and the white-box inversion of each private image's own feature (a statistic
    of one sample) through the first table method whose server holds the extractor."""
    from fedlib.data.sources import MNIST_MEAN, MNIST_STD
    from fedlib.privacy import feature_fn, invert_features, references, what_server_holds

    def make(_state):
        x, y = attacker.private
        single = None
        holder = next((m for m in plan.table_methods() if what_server_holds(m).holds_extractor
                       and plan.spec["methods"][m].get("model") is None), None)
        if holder is not None:
            model = results.state(table_configs(plan)[holder], seed).model(plan.spec["attack"]["client"])
            f = feature_fn(model, "high")
            with torch.no_grad():
                z = f(x)
            single = invert_features(f, z, tuple(x.shape[1:]), steps=plan.settings["attack_steps"],
                                     restarts=plan.settings["restarts"], loss="cosine", mean=MNIST_MEAN,
                                     std=MNIST_STD, seed=seed).images
        refs = references(*attacker.aux, x, y, single, attacker.classifier, MNIST_MEAN, MNIST_STD)
        if holder is not None:
            refs.loc[refs.attack == "reference: single-sample inversion", "attack"] = \
                f"reference: single-sample inversion ({plan.label(holder)} extractor)"
        return [finite_scores(r) for r in refs.drop(columns="method").to_dict(orient="records")]

    return results.derived(table_configs(plan)[plan.table_methods()[0]], seed,
                           f"privacy-refs-{_settings_key(plan)}", make)


def leakage(plan: Plan) -> dict:
    """The leakage study over the profile's seeds: ``{"rows": frame (method, attack, seed, psnr, ssim,
    label_acc, images, seconds), "refs": frame (attack, seed, ...), "classifier_acc": {seed: accuracy on the
    private images}, "holds": {method: ServerView}}``. The runs must have finished (:func:`all_jobs`)."""
    from fedlib.privacy import what_server_holds

    rows, refs, acc = [], [], {}
    for seed in plan.seeds:
        attacker = Attacker(plan, seed)
        acc[seed] = attacker.classifier_acc
        for m, cfg in table_configs(plan).items():
            rows += [{**r, "seed": seed} for r in attacks(plan, cfg, m, seed, attacker)]
        refs += [{**r, "seed": seed} for r in reference_rows(plan, seed, attacker)]
    return {"rows": pd.DataFrame(rows, columns=["method", "attack", "seed", "psnr", "ssim", "label_acc", "images",
                                                "seconds"]),
            "refs": pd.DataFrame(refs), "classifier_acc": acc,
            "holds": {m: what_server_holds(m) for m in plan.table_methods()}}


def _mean_over_seeds(frame: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    g = frame.groupby(keys, sort=False)
    out = g[["psnr", "ssim", "label_acc"]].mean()
    out["n"] = g.size()
    out["ssim_std"] = g["ssim"].std(ddof=1).where(out["n"] > 1)   # one seed: no spread
    return out.reset_index()


STEPS_ATTACK = r"^gradient_inversion \(B (\d+), (\d+) steps\)$"


def merge_step_counts(frame: pd.DataFrame) -> pd.DataFrame:
    """``frame`` with each method's "gradient_inversion (B b, k steps)" rows named alike across seeds: the local
    step count k follows the client's partition, which differs per seed, so one method's rows would split into
    one-seed rows; they become "gradient_inversion (B b, lo-hi local steps)" (the range over the seeds)."""
    found = frame["attack"].str.extract(STEPS_ATTACK) if len(frame) else None
    if found is None or found[0].isna().all():
        return frame
    out, has = frame.copy(), found[0].notna()
    for method in out.loc[has, "method"].unique():
        for batch in found.loc[has & (out.method == method), 0].unique():
            sel = has & (out.method == method) & (found[0] == batch)
            steps = found.loc[sel, 1].astype(int)
            span = f"{steps.min()}" if steps.min() == steps.max() else f"{steps.min()}-{steps.max()}"
            out.loc[sel, "attack"] = f"gradient_inversion (B {batch}, {span} local steps)"
    return out


REALISTIC, UPPER_BOUND, REFERENCE = "realistic", "upper bound", "reference"
#: the leakage table's column with each method's batch-1 gradient inversion (iDLG), beside its realistic attacks
BOUND_COLUMN = "upper bound ssim"


def attack_kind(attack: str) -> str:
    """``"upper bound"`` for the gradient inversion of a one-image update (iDLG, "gradient_inversion (batch 1, ..."),
    which no real round offers; ``"reference"`` for the three references; ``"realistic"`` for every other attack: the
    gradient inversion of the client's real batch and local steps, the imprint, the white-box feature inversion and
    the decoder on the uploaded statistics."""
    if attack.startswith("reference:"):
        return REFERENCE
    return UPPER_BOUND if attack.startswith(UPPER_BOUND_ATTACKS) else REALISTIC


def table(plan: Plan, res: dict) -> pd.DataFrame:
    """The ranked leakage table, means over seeds, every method of the profile. The rank is over the realistic
    attacks and the references (:func:`attack_kind`), by SSIM (:func:`fedlib.privacy.leakage_table`'s order); the
    batch-1 upper bound is not ranked: its rows follow, and each method's rows carry it in their own column
    (:data:`BOUND_COLUMN`). A method no image attack applies to gets one row saying what its server holds. A
    method's B-sized gradient inversions are one row over its seeds (:func:`merge_step_counts`)."""
    from fedlib.privacy import leakage_table

    res = {**res, "rows": merge_step_counts(res["rows"])}
    rows = _mean_over_seeds(res["rows"], ["method", "attack"]) if len(res["rows"]) else pd.DataFrame(
        columns=["method", "attack", "psnr", "ssim", "label_acc", "ssim_std", "n"])
    refs = _mean_over_seeds(res["refs"], ["attack"]).assign(method="—")
    ranked = leakage_table(rows[["method", "attack", "psnr", "ssim", "label_acc"]],
                           refs[["attack", "psnr", "ssim", "label_acc", "method"]])
    extra = rows.set_index(["method", "attack"])
    ranked["ssim std"] = [extra["ssim_std"].get((m, a), math.nan) if m != "—" else
                          refs.set_index("attack")["ssim_std"].get(a, math.nan)
                          for m, a in zip(ranked.method, ranked.attack, strict=True)]
    ranked.insert(3, "kind", [attack_kind(a) if m != "—" else REFERENCE
                              for m, a in zip(ranked.method, ranked.attack, strict=True)])
    bound = ranked[ranked.kind == UPPER_BOUND].groupby("method")["ssim"].max()
    ranked[BOUND_COLUMN] = [bound.get(m, math.nan) if k == REALISTIC else math.nan
                            for m, k in zip(ranked.method, ranked.kind, strict=True)]
    head, tail = ranked[ranked.kind != UPPER_BOUND], ranked[ranked.kind == UPPER_BOUND]
    ranked = pd.concat([head.assign(rank=range(1, len(head) + 1)), tail.assign(rank="—")], ignore_index=True)
    ranked["method"] = [plan.label(m) if m != "—" else m for m in ranked.method]
    missing = [m for m in plan.table_methods() if m not in set(res["rows"].method)]
    if missing:
        tail = pd.DataFrame([{"rank": "—", "method": plan.label(m), "holds": res["holds"][m].summary(), "kind": "—",
                              "attack": "no image attack applies (" + (", ".join(res["holds"][m].attacks)
                                                                        or "nothing is uploaded") + ")",
                              "psnr": math.nan, "ssim": math.nan, "label_acc": math.nan, "ssim std": math.nan,
                              BOUND_COLUMN: math.nan}
                             for m in missing])
        ranked = pd.concat([ranked, tail], ignore_index=True)
    return ranked


def headline(plan: Plan, res: dict, leak: pd.DataFrame | None = None) -> pd.DataFrame:
    """The leakage table's headline: one row per method, ranked by its best realistic attack's SSIM (seed means),
    with the references ranked among them and the batch-1 upper bound in its own column (:data:`BOUND_COLUMN`);
    methods with no realistic image attack follow, unranked. ``leak``: :func:`table`'s result where at hand."""
    leak = table(plan, res) if leak is None else leak
    ranked = leak[leak["rank"] != "—"]
    best = ranked[(ranked.kind == REFERENCE) | ~ranked.method.duplicated()]   # the table is sorted: first is best
    rest = leak[(leak["rank"] == "—") & ~leak.method.isin(set(best.method))].drop_duplicates("method")
    if len(rest):
        bound = leak[leak.kind == UPPER_BOUND].set_index("method")["ssim"]
        rest = rest.assign(**{BOUND_COLUMN: [bound.get(m, math.nan) for m in rest.method],
                              "psnr": math.nan, "ssim": math.nan, "label_acc": math.nan, "ssim std": math.nan,
                              "attack": [a if k == "—" else "no realistic attack reconstructed an image"
                                         for a, k in zip(rest.attack, rest.kind, strict=True)]})
    out = pd.concat([best.assign(rank=range(1, len(best) + 1)), rest.assign(rank="—")], ignore_index=True)
    out = out.rename(columns={"attack": "best realistic attack"})
    return out[["rank", "method", "holds", "best realistic attack", "psnr", "ssim", "label_acc", "ssim std",
                BOUND_COLUMN]]


def holdings(plan: Plan) -> pd.DataFrame:
    """What the server holds of each method of the profile, from its declared messages, and which attacks
    apply (:func:`fedlib.privacy.holdings_table`), with the printed names."""
    from fedlib.privacy import holdings_table

    frame = holdings_table(plan.table_methods())
    frame.index = [plan.label(m) for m in frame.index]
    return frame


# -- samples per prototype ------------------------------------------------------------------------------------
def curve(plan: Plan, seed: int, attacker: Attacker | None = None) -> pd.DataFrame:
    """The samples-per-prototype curves: statistics averaged over n = ``curve_sizes`` images of one class, per
    kind of ``curve_kinds`` (:func:`fedlib.privacy.samples_per_prototype`), attacked two ways through the target
    client's model at the end of the run of the first table method whose server holds the extractor: white-box
    feature inversion (cosine, the profile's attack settings) and the decoder (trained on the attacker's
    auxiliary images with query access, the profile's decoder steps). The images are the training images of the
    whole federation (a class must hold max(n) of them). Column ``attack`` names the attack."""
    from fedlib.data.sources import MNIST_MEAN, MNIST_STD
    from fedlib.privacy import feature_fn, invert_features, model_query, reconstruct, train_inversion, what_server_holds

    holder = next((m for m in plan.table_methods() if what_server_holds(m).holds_extractor
                   and plan.spec["methods"][m].get("model") is None), None)
    if holder is None:
        raise ConfigError("methods", plan.table_methods(), "a method whose server holds the extractor (e.g. fedavg)")
    cfg = table_configs(plan)[holder]

    def make(state):
        model = state.model(plan.spec["attack"]["client"])
        f = feature_fn(model, "high")
        x, y = state.data.dataset.x_train, state.data.dataset.y_train
        shape = tuple(x.shape[1:])
        aux_x = (attacker.aux if attacker is not None else
                 auxiliary(state, plan.spec["attack"]["client"], plan.settings["aux_images"], seed))[0]
        atk = plan.spec["attack"]
        decoder = train_inversion(model_query(model), aux_x, levels=("high",), steps=plan.settings["decoder_steps"],
                                  batch_size=atk["decoder_batch"], lr=atk["decoder_lr"], seed=seed, progress=False)

        def white_box(stats):
            return invert_features(f, stats, shape, steps=plan.settings["attack_steps"],
                                   restarts=plan.settings["restarts"], loss="cosine", mean=MNIST_MEAN,
                                   std=MNIST_STD, seed=seed).images

        def decode(stats):
            with torch.no_grad():
                return reconstruct(decoder, {"high": stats})

        frames = [curve_frame(attack, f, x, y, plan.settings["curve_sizes"], plan.settings["curve_groups"], kind,
                              MNIST_MEAN, MNIST_STD, seed).assign(attack=name)
                  for name, attack in (("feature inversion", white_box), ("decoder", decode))
                  for kind in plan.settings["curve_kinds"]]
        return pd.concat(frames, ignore_index=True).assign(extractor=plan.label(holder)).to_dict(orient="records")

    shape = json.dumps([plan.settings[k] for k in ("curve_sizes", "curve_groups", "curve_kinds")] + ["decoder"])
    return pd.DataFrame(results.derived(cfg, seed, f"privacy-curve-{_settings_key(plan, shape)}", make))


def curve_frame(attack, f, x, y, sizes, groups, kind, mean=0.0, std=1.0, seed=0) -> pd.DataFrame:
    """One kind's curve (:func:`fedlib.privacy.samples_per_prototype`) with PSNR capped at 100 dB."""
    from fedlib.privacy import samples_per_prototype

    frame = samples_per_prototype(attack, f, x, y, sizes=sizes, groups=groups, kind=kind, mean=mean, std=std,
                                  seed=seed)
    for col in ("psnr", "psnr_best"):
        frame[col] = frame[col].clip(upper=100.0)
    return frame


def curve_figure(frame: pd.DataFrame, ax=None):
    """SSIM of the reconstruction against the images averaged, over n: one colour per kind, one line style per
    attack (column ``attack``, when present), on the whole SSIM range [0, 1]."""
    import matplotlib.pyplot as plt

    if ax is None:
        _, ax = plt.subplots(figsize=(6.5, 4.5))
    names = {"mean": "mean (prototype)", "kmeans": "k-means centroid (K = 2)", "gmm": "mixture component (2)"}
    colours = {k: f"C{i}" for i, k in enumerate(dict.fromkeys(frame.kind))}
    frame = frame if "attack" in frame else frame.assign(attack="")
    for (attack, kind), part in frame.groupby(["attack", "kind"], sort=False):
        style = ["-", "--", ":"][list(dict.fromkeys(frame.attack)).index(attack) % 3]
        ax.plot(part.n, part.ssim, style, marker="o", color=colours[kind],
                label=f"{names.get(kind, kind)}" + (f", {attack}" if attack else ""))
    ax.set_xscale("log", base=2)
    ax.set_ylim(0, 1)
    ax.set(xlabel="images behind the statistic (n)", ylabel="SSIM to the images averaged",
           title=f"Samples per prototype ({frame.extractor.iloc[0]} client model)")
    ax.legend(fontsize=7)
    return ax


# -- the defence's price ---------------------------------------------------------------------------------------
UPLOAD_DEFENCE, DP_SGD = "clip + noise on uploads", "DP-SGD (per sample)"


def dp_sgd_epsilon(plan: Plan, cfg: dict, seed: int, noise: float) -> float:
    """Sample-level epsilon of a DP-SGD run (:func:`fedlib.privacy.defense.sample_level_epsilon`): the largest over
    its clients (each client's rate is batch / its samples, its steps those of its local epochs), so every
    client's data has at least this guarantee."""
    from fedlib.algorithms.loops import steps
    from fedlib.privacy.defense import sample_level_epsilon

    partition = results.split(cfg, seed)[1]
    t = results.context(cfg, seed).train
    sizes = {len(ix) for ix in partition.train}
    return max(sample_level_epsilon(noise, n, t.batch_size, steps(n, t) * t.local_epochs, plan.rounds,
                                    plan.spec["attack"]["delta"]) for n in sizes)


def utility(plan: Plan, summaries: dict, attacker_by_seed: dict | None = None,
            dp_summaries: dict | None = None) -> pd.DataFrame:
    """The privacy-utility curve: for each defence, utility method and noise level, the accuracy (%) of the run
    trained under the defence, the best attack's SSIM on its upload, which attack that was, and the
    (epsilon, delta) of the noise by Opacus's RDP accountant. The upload defence (``summaries``:
    :func:`defense_configs` -> summaries per seed) releases once per round with every client in every round
    (sample rate 1, ``rounds`` steps; the unit is a client's whole data for the update, one sample's feature for
    the statistics); DP-SGD (``dp_summaries``: :func:`dp_sgd_configs`) is accounted per sample
    (:func:`dp_sgd_epsilon`). Means over seeds."""
    from fedlib.privacy import epsilon

    delta = plan.spec["attack"]["delta"]
    attackers = attacker_by_seed or {s: Attacker(plan, s) for s in plan.seeds}
    rows = []
    curves = [(UPLOAD_DEFENCE, defense_configs(plan), summaries)]
    if dp_summaries:
        curves.append((DP_SGD, dp_sgd_configs(plan), dp_summaries))
    for defence, configs, runs in curves:
        for (m, sigma), cfg in configs.items():
            for i, seed in enumerate(plan.seeds):
                if sigma == 0:
                    eps = math.inf
                elif defence == DP_SGD:
                    eps = dp_sgd_epsilon(plan, cfg, seed, sigma)
                else:
                    eps = epsilon(sigma, plan.rounds, 1.0, delta)
                row = {"defence": defence, "method": m, "noise": sigma, "seed": seed, "epsilon": eps}
                summary = runs[(m, sigma)][i]
                if summary.get("diverged_at"):  # the engine stops a run whose loss is not finite: no model to score
                    rows.append({**row, "accuracy": math.nan, "ssim": math.nan,
                                 "best attack": f"run diverged in round {summary['diverged_at']}"})
                    continue
                upload_noise = sigma if sigma and defence == UPLOAD_DEFENCE else None  # DP-SGD acts in training
                found = attacks(plan, cfg, m, seed, attackers[seed], upload_noise)
                best = max(found, key=lambda r: r["ssim"]) if found else None
                rows.append({**row, "accuracy": accuracy(plan, m, summary), "ssim": best["ssim"] if best else math.nan,
                             "best attack": best["attack"] if best else "no attack reconstructed an image"})
    frame = pd.DataFrame(rows)
    g = frame.groupby(["defence", "method", "noise"], sort=False)
    out = g[["epsilon", "accuracy", "ssim"]].mean()
    out["n"] = g.size()
    out["accuracy std"] = g["accuracy"].std(ddof=1).where(out["n"] > 1)
    out["best attack"] = g["best attack"].agg(lambda s: s.mode().iloc[0])
    return out.reset_index()


def utility_figure(plan: Plan, frame: pd.DataFrame, ax=None):
    """Accuracy against the best attack's SSIM, one line per method, points labelled with sigma and epsilon."""
    import matplotlib.pyplot as plt

    if ax is None:
        _, ax = plt.subplots(figsize=(6.5, 4.5))
    for (defence, m), part in frame.groupby(["defence", "method"], sort=False):
        dp = defence == DP_SGD
        ax.plot(part.ssim, part.accuracy, marker="s" if dp else "o", linestyle="--" if dp else "-",
                label=plan.label(m) + (" + DP-SGD" if dp else ""))
        for _, r in part.iterrows():
            eps = epsilon_text(r.epsilon)
            ax.annotate(f"σ={r.noise:g}, ε={eps}", (r.ssim, r.accuracy), fontsize=6, xytext=(3, 3),
                        textcoords="offset points")
    ax.set(xlabel="SSIM of the best attack on the upload (lower: more private)", ylabel="accuracy (%)",
           title=f"Privacy-utility: clip + Gaussian noise (δ = {plan.spec['attack']['delta']:g})")
    ax.legend(fontsize=8)
    return ax


# -- pictures ---------------------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Family:
    """One attack family of the pictures: the attacks whose name starts with ``prefix``, realistic or the upper
    bound (:func:`attack_kind`), a title and the figure's file name (``slug``)."""

    prefix: str
    kind: str
    title: str
    slug: str

    @property
    def heading(self) -> str:
        return f"{'Realistic' if self.kind == REALISTIC else 'Upper bound'}: {self.title}"


FAMILIES = (
    Family("gradient_inversion (B ", REALISTIC, "gradient inversion of the client's real round (its batch and local "
           "steps, labels given)", "gradient_inversion"),
    Family("imprint", REALISTIC, "the imprint server (a crafted broadcast, an active server)", "imprint"),
    Family("feature_inversion", REALISTIC, "white-box feature inversion of the uploaded statistics",
           "feature_inversion"),
    Family("decoder", REALISTIC, "the decoder on the uploaded statistics (query access, auxiliary images)", "decoder"),
    Family("gradient_inversion (batch 1", UPPER_BOUND, "gradient inversion of a one-image update (iDLG), which no "
           "real round offers", "batch1_bound"),
)
#: the privacy-utility pictures: the largest noise whose accuracy stays within this many points of the undefended run
DEFENCE_TOLERANCE = 3.0


def family(attack: str) -> Family | None:
    """The :data:`FAMILIES` entry of an attack row's name (None for a reference)."""
    return next((f for f in FAMILIES if attack.startswith(f.prefix)), None)


def attack_detail(attack: str) -> str:
    """What a row adds to its family's heading: the statistic (``protos``, ``means``, ``low``, ...) of a feature
    inversion or decoder, the batch and steps of a gradient inversion, ``crafted broadcast`` for the imprint."""
    if ":" in attack:
        return "statistic " + attack.split(":", 1)[1]
    return attack[attack.index("(") + 1:attack.rindex(")")] if "(" in attack else attack


def picture_rows(plan: Plan, seed: int, runs, attacker: Attacker | None = None) -> pd.DataFrame:
    """The attacked client's reconstructions on ``seed`` for ``runs`` (``[(method, noise)]``; noise None or 0: the
    leakage table's run, else the upload defence's run at that noise, :func:`defense_configs`), one row per image
    attack: ``method, noise, holds, attack, family`` (:data:`FAMILIES` slug), ``kind``, the scores the leakage table
    reads (``ssim, psnr, label_acc, images``: :func:`attacks`), and the pictures kept with them (:func:`pictures`):
    ``real`` and ``recon`` ((n, H, W, C) in [0, 1]), ``ssim_each`` and ``pictures_ssim`` (the row's SSIM in the
    pictures' own record: the same number where one call made both). The runs must have finished."""
    from fedlib.privacy import what_server_holds
    from fedlib.privacy.pictures import decode

    attacker = attacker or Attacker(plan, seed)
    out = []
    for method, noise in runs:
        noise = float(noise) if noise else None
        cfg = config(plan, method, noise)
        scored = attacks(plan, cfg, method, seed, attacker, noise)
        kept = pictures(plan, cfg, method, seed, attacker, noise)
        own = {r["attack"]: r for r in kept["rows"]}
        for r in scored:
            fam, pic = family(r["attack"]), kept["pictures"].get(r["attack"])
            if fam is None:
                continue
            out.append({"method": method, "noise": noise or 0.0, "holds": what_server_holds(method).summary(),
                        "attack": r["attack"], "family": fam.slug, "kind": fam.kind, "ssim": r["ssim"],
                        "psnr": r["psnr"], "label_acc": r["label_acc"], "images": r["images"],
                        "real": decode(pic["real"], pic["n"]) if pic else None,
                        "recon": decode(pic["recon"], pic["n"]) if pic else None,
                        "ssim_each": list(pic["ssim"]) if pic else [],
                        "pictures_ssim": own.get(r["attack"], {}).get("ssim", math.nan)})
    return pd.DataFrame(out, columns=["method", "noise", "holds", "attack", "family", "kind", "ssim", "psnr",
                                      "label_acc", "images", "real", "recon", "ssim_each", "pictures_ssim"])


def _grid_row(plan: Plan, r, label: str | None = None, note: str = "") -> dict:
    """One row of :func:`fedlib.privacy.pictures.reconstruction_grid` from a :func:`picture_rows` row."""
    if not math.isnan(r.pictures_ssim) and not math.isclose(r.pictures_ssim, r.ssim, rel_tol=0, abs_tol=1e-9):
        # the pictures were made again, apart from the scores (a scores record older than its pictures)
        note = "\n".join(x for x in (note, f"pictures' own run: SSIM {r.pictures_ssim:.3f}") if x)
    shown = 0 if r.recon is None else len(r.recon)
    if shown < r.images:
        note = "\n".join(x for x in (note, f"{shown} of {r.images} images") if x)
    return {"label": f"{label or plan.label(r.method)}\n{attack_detail(r.attack)}", "ssim": r.ssim, "real": r.real,
            "recon": r.recon, "ssim_each": r.ssim_each, "note": note}


def picture_figures(plan: Plan, frame: pd.DataFrame, seed: int) -> list[tuple[Family, object, pd.DataFrame]]:
    """One grid per attack family present in ``frame`` (:func:`picture_rows`), realistic families first and the
    batch-1 upper bound last: rows are the methods, grouped by what the server holds (in the plan's order), each
    real image beside its reconstruction with the reconstruction's SSIM under it and the row's SSIM (the leakage
    table's) in its label. ``[(family, figure, layout)]`` (:func:`fedlib.privacy.pictures.reconstruction_grid`)."""
    from fedlib.privacy.pictures import reconstruction_grid

    out = []
    order = {m: i for i, m in enumerate(plan.methods)}
    for fam in FAMILIES:
        part = frame[frame.family == fam.slug]
        if not len(part):
            continue
        part = part.assign(_order=[order.get(m, len(order)) for m in part.method]).sort_values("_order", kind="stable")
        holds = list(dict.fromkeys(part.holds))
        groups = [(f"server holds: {h}", [_grid_row(plan, r) for r in part[part.holds == h].itertuples()])
                  for h in holds]
        title = (f"{fam.heading}\nclient {plan.spec['attack']['client']}'s training images (top, grey) above the "
                 f"reconstructions (red), SSIM under each\n{plan.profile} profile, seed {seed}")
        fig, layout = reconstruction_grid(groups, title)
        out.append((fam, fig, layout))
    return out


def family_figure(plan: Plan, frame: pd.DataFrame, seed: int, title: str, labels: dict | None = None,
                  notes: dict | None = None):
    """One grid of ``frame``'s rows (:func:`picture_rows`) grouped by attack family (realistic first, the batch-1
    upper bound last), rows in ``frame``'s order within a family; ``labels`` / ``notes``: ``{(method, noise): text}``
    for the row labels (default the method's name) and a line under them. ``(figure, layout)``."""
    from fedlib.privacy.pictures import reconstruction_grid

    labels, notes, groups = labels or {}, notes or {}, []
    for fam in FAMILIES:
        part = frame[frame.family == fam.slug]
        if len(part):
            groups.append((fam.heading, [_grid_row(plan, r, labels.get((r.method, r.noise)),
                                                   notes.get((r.method, r.noise), "")) for r in part.itertuples()]))
    if not groups:
        groups = [("no image attack applies to these uploads", [])]
    return reconstruction_grid(groups, title)


def strongest_defence(plan: Plan, summaries: dict, tolerance: float = DEFENCE_TOLERANCE) -> dict[str, dict]:
    """For each utility method, the largest noise multiplier of the upload defence (:func:`defense_configs`; its
    ``summaries``: ``{(method, noise): [summary per seed]}``) whose run keeps the accuracy (mean over seeds, last
    round, the method's rule) within ``tolerance`` points of the undefended run, a diverged run never:
    ``{method: {"noise", "accuracy", "undefended"}}``; noise 0 (and its accuracy) where no noise level does."""
    def acc(m: str, sigma: float) -> float:
        runs = summaries[(m, float(sigma))]
        if any(r.get("diverged_at") for r in runs):
            return math.nan
        return float(np.mean([accuracy(plan, m, r) for r in runs]))

    out = {}
    for m in plan.settings["utility_methods"]:
        base = acc(m, 0.0)
        ok = [float(s) for s in plan.settings["noise"] if s > 0 and acc(m, s) >= base - tolerance]
        best = max(ok, default=0.0)
        out[m] = {"noise": best, "accuracy": acc(m, best), "undefended": base}
    return out


def strongest_baseline(plan: Plan, paper_table: dict, method: str) -> str:
    """A paper's strongest baseline that the leakage study can attack: of the rows of its main table
    (``paper_table``: a table of ``params/<paper>/paper.yaml``, the paper's reported accuracies) other than
    ``method``, those this study lists (its ``methods``) and an image attack applies to (:func:`what_server_holds`),
    the one with the highest mean of the paper's numbers over the table's columns."""
    from fedlib.privacy import what_server_holds

    def mean(row: dict) -> float:
        vals = [v[0] if isinstance(v, list | tuple) else v for v in row.values()]
        vals = [float(v) for v in vals if isinstance(v, int | float) and not isinstance(v, bool)]
        return float(np.mean(vals)) if vals else -math.inf

    rows = {m: mean(r) for m, r in paper_table["rows"].items() if m != method and m in plan.methods
            and set(what_server_holds(m).attacks) & set(IMAGE_ATTACKS)}
    if not rows:
        raise ConfigError("paper table", sorted(paper_table["rows"]), "a baseline the privacy study can attack")
    return max(rows, key=lambda m: (rows[m], -list(plan.methods).index(m)))


def study_profile(profile: str) -> str:
    """The leakage study's profile a paper notebook's profile reads: the same where the study has it (smoke, quick,
    paper), the paper profile for the long ones (converged, extended)."""
    from fedlib.config import read_yaml

    return profile if profile in read_yaml(Plan.params_file())["profiles"] else "paper"


def paper_pictures(nb, method: str, paper_table: dict):
    """A paper notebook's attack figure: ``method``'s upload and its strongest baseline's (:func:`strongest_baseline`
    of the paper's ``paper_table``) under the leakage study's attacks, from the study's own runs and derived values
    (:func:`load_plan` of the notebook's profile, :func:`study_profile`; its first seed; the runs trained where
    missing, as the study trains them): one grid, attack families as groups, the two methods as rows. Into the
    notebook's report section; returns the figure and its scores (the leakage table's numbers for that seed)."""
    profile = study_profile(nb.profile)
    probe = load_plan(profile, results_dir=nb.plan.results_dir, data_root=nb.plan.data_root)
    baseline = strongest_baseline(probe, paper_table, method)
    plan = load_plan(profile, results_dir=nb.plan.results_dir, data_root=nb.plan.data_root,
                     methods=[method, baseline])
    seed = plan.seeds[0]
    results.run_or_read(table_configs(plan), seeds=[seed], workers=nb.workers, desc="privacy-study runs",
                        progress=False)
    frame = picture_rows(plan, seed, [(method, None), (baseline, None)])
    label = f"{plan.label(method)} and its strongest baseline {plan.label(baseline)}"
    fig, layout = family_figure(plan, frame, seed, f"{label} under the leakage study's attacks\nclient "
                                f"{plan.spec['attack']['client']}'s training images (top, grey) above the "
                                f"reconstructions (red), SSIM under each\nprivacy study, {profile} profile, "
                                f"{plan.rounds} rounds, seed {seed}")
    nb.figure(fig, f"{label} under the leakage study's attacks (notebooks/privacy.ipynb, {profile} profile, seed "
              f"{seed}): the attacked client's images beside the reconstructions", "privacy_attack_pictures")
    scores = frame.assign(method=[plan.label(m) for m in frame.method], kind=frame.kind)[
        ["method", "kind", "attack", "psnr", "ssim", "label_acc", "images"]].round({"psnr": 2, "ssim": 3,
                                                                                   "label_acc": 3})
    nb.table(f"**{label} under the leakage study's attacks** (privacy study, {profile} profile, {plan.rounds} rounds, "
             f"seed {seed}, client {plan.spec['attack']['client']}; the strongest baseline is the paper's best-scoring "
             "baseline an image attack applies to): PSNR (dB), SSIM and label accuracy, the leakage table's numbers.",
             scores.set_index(["method", "kind", "attack"]))
    nb.results["privacy_pictures"] = {"baseline": baseline, "layout": layout, "frame": frame}
    return Shown((fig, scores))


# -- the ledger ------------------------------------------------------------------------------------------------
#: the attacks on a model upload at the client's real batch size and local steps (what a server meets), and the
#: batch-1 gradient inversion (iDLG), an upper bound no real round offers: named apart, and the claims rest on the
#: realistic ones
REALISTIC_MODEL_ATTACKS = ("gradient_inversion (B ", "imprint")
UPPER_BOUND_ATTACKS = ("gradient_inversion (batch 1",)


def _best_attack(res: dict, method: str, kinds: tuple[str, ...] | None = None) -> tuple[list[float], str]:
    """The best SSIM over a method's attacks (those whose name starts with one of ``kinds``), per seed, and the
    attack that gave it (the most frequent over the seeds; ``""`` where none ran)."""
    rows = res["rows"]
    part = rows[rows.method == method]
    if kinds is not None:
        part = part[[a.startswith(kinds) for a in part.attack]]
    if not len(part):
        return [], ""
    best = part.loc[part.groupby("seed")["ssim"].idxmax()].sort_values("seed")
    return best["ssim"].tolist(), str(best["attack"].mode().iloc[0])


def ledger(plan: Plan, res: dict) -> list:
    """The three papers' privacy claims (``params/privacy/claims.yaml``) with our evidence and a verdict each, judged
    by the claims engine (:func:`fedlib.claims.evaluate`, every verdict by :func:`fedlib.claims.verdict`) on
    :func:`tables`. ``res``: :func:`leakage`'s result (``missing``: why the attack scores are absent, where they are).
    Rules: "cannot be inverted" holds where the best attack's SSIM is within 0.02 of the attacker's class average;
    "compact statistics are safer than models" holds where the best attack on the statistics has a lower SSIM than
    the best realistic attack on a model upload (the method's own model where it sends one, else FedAvg's). Short
    profiles and one seed give inconclusive."""
    return claims.ledger("privacy", tables(plan, res))


def tables(plan: Plan, res: dict) -> dict:
    """The tables the privacy claims (``params/privacy/claims.yaml``) read, by name (:class:`fedlib.claims.Cells`):
    ``upload`` (FedMPS's declared messages; None where FedMPS is not in the profile), ``fedmps_inverted`` and
    ``safer_<method>`` (per-seed best attacks; without cells, and the reason as ``why``, where the rows lack them)."""
    prof, n = plan.profile, len(plan.seeds)
    caveat = f"{prof} profile: {plan.rounds} rounds, seeds {plan.seeds}" if prof != "paper" else ""
    refs, methods = res["refs"], set(res["rows"].method)
    avg = refs[refs.attack == "reference: class average"].sort_values("seed")["ssim"].tolist()

    def table(cells: dict | None = None, why: str = "", **text) -> Cells:
        return Cells(cells or {}, prof, caveat, n, text={"why": res.get("missing") or why, **text})

    def cell(label: str, values: list, others: list, **extra) -> dict:
        """Per-seed values compared only where both sides hold every seed of the profile."""
        per_seed = list(values) if n > 1 and len(values) == len(others) == n else None
        return {"label": label, "value": np.mean(values), "per_seed": per_seed, "n": n, **extra}

    out = {"upload": None}
    if "fedmps" in plan.table_methods():
        v = res["holds"]["fedmps"]
        leaks = int(v.holds_extractor) + int("gradient_inversion" in v.attacks)
        out["upload"] = table({"fedmps": {"label": "FedMPS", "value": leaks, "per_seed": None, "n": n}},
                              upload=", ".join(v.upload), summary=v.summary(), attacks=", ".join(v.attacks))
    out["fedmps_inverted"] = table(why="FedMPS not in this profile")
    if "fedmps" in methods:
        best, _ = _best_attack(res, "fedmps")
        bar = [a + 0.02 for a in avg]
        out["fedmps_inverted"] = table({
            "fedmps": cell("FedMPS best", best, bar),
            "average": {**cell("class average + 0.02", bar, best), "value": np.mean(avg) + 0.02,
                        "average": np.mean(avg)}})
    # the models' side under the realistic attacks (the client's real batch, the imprint); the batch-1 upper bound
    # is named beside it, not judged on
    model_best, model_attack = (_best_attack(res, "fedavg", REALISTIC_MODEL_ATTACKS) if "fedavg" in methods
                                else ([], ""))
    for m in ("mpfedcl", "gfpl"):
        label = plan.label(m)
        out[f"safer_{m}"] = table(why=f"{label} or FedAvg not in this profile")
        if m not in methods or not model_best:
            continue
        stats, stats_attack = _best_attack(res, m, ("feature_inversion", "decoder"))
        own, own_attack = _best_attack(res, m, REALISTIC_MODEL_ATTACKS)
        ref, ref_attack = (own, own_attack) if own else (model_best, model_attack)
        bound = _best_attack(res, m if own else "fedavg", UPPER_BOUND_ATTACKS)[0]
        whose = f"{label}'s own model upload" if own else "FedAvg's model upload"
        out[f"safer_{m}"] = table(
            {"statistics": cell(f"{label} statistics ({stats_attack})", stats, ref, attack=stats_attack),
             "model": cell(f"{whose} ({ref_attack})", ref, stats, attack=ref_attack, whose=whose)},
            fedavg=f" (FedAvg's {np.mean(model_best):.3f})" if own else "",
            bound=(f"the batch-1 gradient inversion (iDLG), an upper bound no real round offers, reaches "
                   f"{np.mean(bound):.3f} on the model upload and is not judged on") if bound else "",
            own="MP-FedCL uploads its model too, so its upload as a whole leaks what the model leaks" if own else "")
    return out


def archived_tables() -> list[tuple[str, dict, list[int]]]:
    """The paper-profile runs the report reads (:mod:`fedlib.papers.catalog`): the leakage table's and the
    privacy-utility curve's. The archive keeps their records and, beside each, the values derived from its trained
    model (attack scores per seed, pictures, references, the samples-per-prototype curve), so the section renders
    from the archive alone."""
    pp = load_plan("paper")
    return [("Privacy leakage table (paper profile)", table_configs(pp), pp.seeds),
            ("Privacy-utility curve (paper profile)", {f"{m}/noise{s:g}": c for (m, s), c in
                                                       defense_configs(pp).items() if s > 0}
             | {f"{m}/dpsgd{s:g}": c for (m, s), c in dp_sgd_configs(pp).items() if s > 0}, pp.seeds)]


@study.command
def main(argv: list[str] | None = None) -> int:
    """``python -m fedlib.papers.privacy [--profile P] [--methods M ...] [--seeds S ...] [--rounds N]``: train the
    runs, attack every method's upload and print the ranked leakage table, the privacy-utility curve and the
    ledger."""
    from fedlib import claims, report, results

    parser = study.add_retrain_archived(study.cli("python -m fedlib.papers.privacy", main.__doc__))
    args, plan = study.plan_from_cli(parser, load_plan, argv)
    if plan is None:
        return 2
    torch.set_num_threads(1)
    t0 = time.perf_counter()
    summaries = results.run_or_read(table_configs(plan), workers=args.workers, desc="leakage runs",
                                    retrain_archived=args.retrain_archived)
    dsum = results.run_or_read(defense_configs(plan), workers=args.workers, desc="defence runs",
                               retrain_archived=args.retrain_archived)
    dpsum = results.run_or_read(dp_sgd_configs(plan), workers=args.workers, desc="DP-SGD runs",
                                retrain_archived=args.retrain_archived)
    res = leakage(plan)
    print(f"Leakage table, profile {plan.profile}: seeds {plan.seeds}, {plan.rounds} rounds, client "
          f"{plan.spec['attack']['client']} attacked (SSIM mean over seeds); the headline: each method's best "
          "realistic attack, the batch-1 upper bound in its own column")
    leak = table(plan, res)
    print(report.to_markdown(headline(plan, res, leak).round(3)))
    print("\nEvery attack (ranked over the realistic attacks and the references; the batch-1 upper bound unranked)")
    print(report.to_markdown(leak.round(3)))
    print(f"runs: {study.made_by(s for runs in summaries.values() for s in runs)}")
    print("\nSamples per prototype (SSIM; first seed)")
    print(report.to_markdown(curve(plan, plan.seeds[0]).pivot_table(index="n", columns=["attack", "kind"],
                                                                    values="ssim").round(3)))
    print("\nPrivacy-utility curve")
    print(report.to_markdown(utility(plan, dsum, dp_summaries=dpsum).round(3)))
    led = ledger(plan, res)
    print(f"\nLedger ({claims.summary_line(led)})")
    print(report.to_markdown(claims.table(led)))
    print(f"\nwall time {time.perf_counter() - t0:.0f} s")
    return 0



# The notebook (notebooks/privacy.py): one function per cell, each adding its table or figure to the report section
# and returning it; ``nb`` is the notebook's state (:class:`fedlib.study.notebook.Notebook`).

def notebook(profile: str, methods=None, seeds=None, rounds=None, workers=None, device=None, backend=None):
    """The set-up cell (:func:`fedlib.study.notebook.open_notebook`): returns the notebook state the other cells
    take (its clock starts here, for the closing note)."""
    from fedlib.study.notebook import open_notebook

    t_start = time.perf_counter()
    return open_notebook("privacy", load_plan, profile, lambda plan: (
        str(plan.rounds), config(plan, plan.table_methods()[0])["device"],
        f"profile {profile!r}: {len(plan.table_methods())} methods, seeds {plan.seeds}, {plan.rounds} rounds"),
        backend=backend, workers=workers, title=TITLE, results={"t_start": t_start}, methods=methods, seeds=seeds,
        rounds=rounds, device=device)


def show_setting(nb):
    """The study's setting: data, model, training, the attacked client, the attacker's data, attacks, defence."""
    plan = nb.plan
    cfg0, atk, s = config(plan, plan.table_methods()[0]), plan.spec["attack"], plan.settings
    defense, part = plan.spec["defense"], cfg0["partition"]
    setting = pd.Series({
        "data": f"{cfg0['dataset']['name']}, {part['train_size']} training images, "
                f"{part['num_clients']} clients, Dir({part['alpha']:g}) (FedPCL's construction)",
        "model": f"{cfg0['model']['name']} for every method (FedMPS: cnn_fmnist, it needs two feature levels)",
        "training": f"{plan.rounds} rounds, SGD lr {cfg0['train']['lr']:g}, momentum {cfg0['train']['momentum']:g}, "
                    f"batch {cfg0['train']['batch_size']}, {cfg0['train']['local_epochs']} local epoch",
        "attacked client": f"client {atk['client']}: its next round after the run, (broadcast, upload) as the server "
                           "holds them",
        "attacker's data": f"{s['aux_images']} test images outside the client's test block (same distribution)",
        "held-out classifier": f"mlp_mnist trained {atk['classifier_epochs']} epochs on the attacker's images only",
        "attacks": f"{', '.join(plan.attacks())}; {s['attack_steps']} optimisation steps x {s['restarts']} start(s), "
                   f"decoder {s['decoder_steps']} steps, batch-1 upper bound on {s['batch1_images']} image(s)",
        "defence": f"clip the update to {defense['clip_update']:g} and every statistic row to "
                   f"{defense['clip_features']:g}, Gaussian noise sigma x clip; noise multipliers "
                   f"{s['noise']}; epsilon by Opacus's RDP accountant, delta {atk['delta']:g}",
        "DP-SGD": (f"{', '.join(plan.label(m) for m in s['dp_sgd_methods'])}: each sample's gradient clipped to "
                   f"{plan.spec['dp_sgd']['clip_sample']:g}, Gaussian noise sigma x clip on the batch sum (Opacus), "
                   "same noise multipliers") if s.get("dp_sgd_methods") else "not in this profile",
        "seeds": ", ".join(map(str, plan.seeds)),
    }, name="this study").to_frame()
    nb.section.text("**Setting.**\n\n" + report.to_markdown(setting))
    return setting


def run_all(nb) -> None:
    """Every run of the study, then the leakage and defence runs read back (the cells below use them)."""
    nb.run_all(all_jobs(nb.plan), desc="privacy runs")
    nb.results["summaries"] = results.run_or_read(table_configs(nb.plan), workers=nb.workers, desc="leakage runs",
                                                  progress=False)
    nb.results["defense"] = results.run_or_read(defense_configs(nb.plan), workers=nb.workers, desc="defence runs",
                                                progress=False)
    nb.results["dp_sgd"] = results.run_or_read(dp_sgd_configs(nb.plan), workers=nb.workers, desc="DP-SGD runs",
                                               progress=False)


def show_holdings(nb):
    """What the server holds of each method, from its declared messages."""
    return nb.table("**What the server holds, from the declared messages.**", holdings(nb.plan))


def check_holdings(nb) -> None:
    """Print the check that what the server holds is each method's declared upload."""
    from fedlib.algorithms import ALGORITHMS
    from fedlib.privacy import what_server_holds

    print("what the server holds = each method's declared upload:",
          all(what_server_holds(m).upload == ALGORITHMS[m].UPLOAD for m in nb.plan.table_methods()))


def _leakage(nb) -> tuple[dict, pd.DataFrame]:
    """The attacks' results (:func:`leakage`) and the leakage table (:func:`table`)."""
    def make():
        res = leakage(nb.plan)
        return res, table(nb.plan, res)
    return nb.once("leakage", make)


def show_leakage(nb):
    """The leakage table: PSNR, SSIM and the held-out classifier's label accuracy of every method's and attack's
    reconstructions, ranked, with the runs that made them."""

    plan, (res, leak) = nb.plan, _leakage(nb)
    shown = leak.round({"psnr": 2, "ssim": 3, "label_acc": 3, "ssim std": 3, BOUND_COLUMN: 3}).set_index("rank")
    acc = ", ".join(f"seed {k}: {100 * v:.1f}%" for k, v in res["classifier_acc"].items())
    made_by = study.made_by(s for runs in nb.results["summaries"].values() for s in runs)
    nb.table(f"**The leakage table ({nb.profile} profile, {plan.rounds} rounds, seeds {plan.seeds}; client "
             f"{plan.spec['attack']['client']}'s next round).** PSNR (dB, capped at 100), SSIM and the held-out "
             f"classifier's label accuracy on the reconstructions (that classifier's accuracy on the client's real "
             f"images: {acc}). Ranked by SSIM over the realistic attacks and the references; the batch-1 upper bound "
             f"(iDLG) follows unranked, and each method's rows carry it in `{BOUND_COLUMN}`.", shown,
             f"_Runs: {made_by}._")
    nb.section.record(leakage=leak.to_dict(orient="records"), classifier_acc=res["classifier_acc"])
    return shown


def check_leakage(nb) -> None:
    """Print the leakage table's checks: every method of the profile in it, three references per seed."""
    res, leak = _leakage(nb)
    print("every method of the profile is in the table:", {nb.label(m) for m in nb.plan.table_methods()}
          <= set(leak.method))
    print("three references per seed:", len(res["refs"]) == 3 * len(nb.plan.seeds))


def show_headline(nb):
    """The leakage table's headline: each method's best realistic attack, ranked, the references among them and the
    batch-1 upper bound in its own column (:func:`headline`)."""
    plan, (res, leak) = nb.plan, _leakage(nb)
    head = headline(plan, res, leak)
    shown = head.round({"psnr": 2, "ssim": 3, "label_acc": 3, "ssim std": 3, BOUND_COLUMN: 3}).set_index("rank")
    nb.table(f"**The headline ({nb.profile} profile, {plan.rounds} rounds, seeds {plan.seeds}): each method's best "
             "realistic attack** (the gradient inversion of the client's real round, the imprint, the white-box "
             "feature inversion, the decoder), ranked by SSIM with the three references; `upper bound ssim`: the "
             "gradient inversion of a one-image update (iDLG), an upper bound no real round offers, not ranked.", shown)
    nb.section.record(headline=head.to_dict(orient="records"))
    return shown


def _pictures(nb) -> pd.DataFrame:
    """The leakage table's runs' pictures on the first seed (:func:`picture_rows`)."""
    return nb.once("pictures", lambda: picture_rows(nb.plan, nb.seed0, [(m, None) for m in nb.plan.table_methods()]))


def fig_reconstructions(nb):
    """What the leakage table's attacks reconstruct: one grid per attack family (realistic ones, then the batch-1
    upper bound), rows the methods grouped by what the server holds, the attacked client's images beside the
    reconstructions with SSIM under each; returns the figures."""
    figs, shown = [], {}
    for fam, fig, layout in picture_figures(nb.plan, _pictures(nb), nb.seed0):
        figs.append(nb.figure(fig, f"{fam.heading}: the attacked client's images beside the reconstructions, SSIM "
                              f"under each ({nb.profile} profile, seed {nb.seed0})", f"reconstructions_{fam.slug}"))
        shown[fam.slug] = layout[["group", "label", "ssim", "images"]].to_dict(orient="records")
    nb.results["pictures_layout"] = shown
    nb.section.record(pictures=shown)
    return Shown(figs)


def _defended_pictures(nb) -> tuple[dict, pd.DataFrame]:
    """The strongest upload defence within :data:`DEFENCE_TOLERANCE` points per utility method
    (:func:`strongest_defence`) and its run's pictures on the first seed."""
    def make():
        chosen = strongest_defence(nb.plan, nb.results["defense"])
        frame = picture_rows(nb.plan, nb.seed0, [(m, c["noise"]) for m, c in chosen.items()])
        return chosen, frame
    return nb.once("defended_pictures", make)


def fig_reconstructions_defended(nb):
    """The same pictures under the strongest upload defence (clip + noise) that keeps each utility method's accuracy
    within :data:`DEFENCE_TOLERANCE` points of its undefended run: one grid, attack families as groups, the utility
    methods as rows; returns the figure and the noise chosen per method."""
    from fedlib.privacy import epsilon

    plan = nb.plan
    chosen, frame = _defended_pictures(nb)
    delta = plan.spec["attack"]["delta"]
    labels, notes = {}, {}
    for m, c in chosen.items():
        if c["noise"]:
            eps = epsilon_text(epsilon(c["noise"], plan.rounds, 1.0, delta))
            labels[(m, c["noise"])] = f"{plan.label(m)}, σ = {c['noise']:g}, ε = {eps}"
            notes[(m, c["noise"])] = f"accuracy {c['accuracy']:.1f}% (undefended {c['undefended']:.1f}%)"
        else:
            labels[(m, c["noise"])] = f"{plan.label(m)}, no defence"
            notes[(m, c["noise"])] = f"no σ > 0 within {DEFENCE_TOLERANCE:g} points"
    fig, layout = family_figure(plan, frame, nb.seed0, f"Under the strongest upload defence within "
                                f"{DEFENCE_TOLERANCE:g} accuracy points (clip + noise, δ = {delta:g})\nclient "
                                f"{plan.spec['attack']['client']}'s training images (top, grey) above the "
                                f"reconstructions (red), SSIM under each\n{nb.profile} profile, seed {nb.seed0}",
                                labels, notes)
    nb.figure(fig, f"The reconstructions under the strongest upload defence that keeps accuracy within "
              f"{DEFENCE_TOLERANCE:g} points ({nb.profile} profile, seed {nb.seed0})", "reconstructions_defended")
    df = pd.DataFrame([{"method": plan.label(m), "noise": c["noise"], "accuracy": c["accuracy"],
                        "undefended accuracy": c["undefended"]} for m, c in chosen.items()]).set_index("method")
    nb.table(f"**The defence the pictures above use: the largest noise multiplier whose accuracy stays within "
             f"{DEFENCE_TOLERANCE:g} points of the undefended run** (mean over seeds, last round).", df.round(2))
    nb.results["defended_layout"] = layout
    nb.section.record(pictures_defended=layout[["group", "label", "ssim", "images"]].to_dict(orient="records"))
    return Shown((fig, df.round(2)))


def fig_samples_per_prototype(nb):
    """Samples per prototype: SSIM of each attack's reconstruction against the images averaged, over n; returns
    the figure and its numbers."""
    import matplotlib.pyplot as plt

    spp = curve(nb.plan, nb.seed0)
    fig, ax = plt.subplots(figsize=(6, 4))
    curve_figure(spp, ax)
    nb.figure(fig, f"Samples per prototype: SSIM of each attack's reconstruction against the images averaged "
              f"({nb.profile} profile, seed {nb.seed0})", "samples_per_prototype")
    df = spp.pivot_table(index="n", columns=["attack", "kind"], values="ssim").round(3)
    df.columns = [f"{attack}: {kind}" for attack, kind in df.columns]
    nb.table("**Samples per prototype: SSIM (mean over the images averaged).**", df)
    nb.section.record(samples_per_prototype=spp.to_dict(orient="records"))
    return Shown((fig, df))


def epsilon_text(eps: float) -> str:
    """An epsilon as the table prints it: three significant digits (``1.65e+07``, ``1.76e+03``, ``39.8``), ``inf``
    for no noise."""
    return "inf" if math.isinf(eps) else f"{eps:.3g}"


def fig_utility(nb):
    """Privacy-utility: accuracy against the best attack's SSIM under clip + noise, per noise multiplier; returns
    the figure and its numbers."""
    import matplotlib.pyplot as plt

    dsum, dpsum = nb.results["defense"], nb.results["dp_sgd"]
    util = utility(nb.plan, dsum, dp_summaries=dpsum)
    fig, ax = plt.subplots(figsize=(6.5, 4.5))
    utility_figure(nb.plan, util, ax)
    nb.figure(fig, f"Privacy-utility: accuracy against the best attack's SSIM under clip + noise on the uploads and "
              f"under DP-SGD ({nb.profile} profile)", "privacy_utility")
    shown = util.assign(method=[nb.label(m) for m in util.method],
                        epsilon=[epsilon_text(e) for e in util.epsilon]).round(
        {"accuracy": 2, "accuracy std": 2, "ssim": 3})
    shown = shown.set_index(["defence", "method", "noise"])
    clip = nb.plan.spec["dp_sgd"]["clip_sample"]
    nb.table("**Privacy-utility: accuracy (%) and the best attack's SSIM at each noise multiplier sigma.** "
             f"{UPLOAD_DEFENCE}: epsilon per round's release, every client every round; {DP_SGD}: each sample's "
             f"gradient clipped to {clip:g}, epsilon per sample (the least-protected client's), shuffled batches "
             "accounted as Poisson sampling at rate batch / samples. A run whose loss stopped being finite is not "
             "drawn; its row says so.", shown,
             f"_Runs: {study.made_by(s for d in (dsum, dpsum) for runs in d.values() for s in runs)}._")
    nb.section.record(utility=util.to_dict(orient="records"))
    return Shown((fig, shown))


def show_ledger(nb):
    """The claims ledger of the study's own hypotheses, from the leakage results (where the run archive lacks the
    attack scores, the claims that rest on them are not tested, and say so)."""
    from fedlib.privacy import what_server_holds

    res = nb.part(lambda: _leakage(nb)[0]) or {
        "rows": pd.DataFrame(columns=["method", "attack", "seed", "ssim"]),
        "refs": pd.DataFrame(columns=["attack", "seed", "ssim"]),
        "holds": {m: what_server_holds(m) for m in nb.plan.table_methods()},
        "missing": "the attack scores are not in the run archive (python -m fedlib.papers.privacy --profile "
                   f"{nb.profile} makes them; python -m fedlib archive keeps them)"}
    return nb.ledger(ledger(nb.plan, res), write=False)


def closing_note(nb) -> None:
    """The closing note: the leakage table's top and bottom rows and how long this Run All took (left out where the
    section is rendered from the run archive, whose render must not depend on the clock); writes the report
    section."""
    plan, leak = nb.plan, _leakage(nb)[1]
    ranked = leak[leak["rank"] != "—"]
    attacked = ranked[ranked.method != "—"]
    top, bottom, last = attacked.iloc[0], attacked.iloc[-1], ranked.iloc[-1]
    below = ("" if ranked.index[-1] == attacked.index[-1] else
             f"; below it the {last.attack.removeprefix('reference: ')} reference, SSIM {last.ssim:.3f}")
    took = ("" if results.reading_archive_only() else
            f" This Run All took {(time.perf_counter() - nb.results['t_start']) / 60:.1f} minutes, reading the runs "
            "and attacks that had finished before (from an empty results folder: the first cell's times).")
    closing = (f"**Closing note ({nb.profile} profile, {plan.rounds} rounds, seeds {plan.seeds}).** Top of the leakage "
               f"table (realistic attacks): {top.method}, {top.attack}: SSIM {top.ssim:.3f}, PSNR {top.psnr:.2f} dB, "
               f"label accuracy {top.label_acc:.2f}. Bottom attack row: {bottom.method}, {bottom.attack}: SSIM "
               f"{bottom.ssim:.3f}, PSNR {bottom.psnr:.2f} dB{below}.{took}")
    nb.section.text(closing)
    print(closing)
    print("report section:", nb.section.write())

if __name__ == "__main__":
    raise SystemExit(main())
