"""The privacy study's numbers and claims ledger: the values of its tables' cells, read from its runs through
:mod:`fedlib.results`, the named cells (:class:`fedlib.claims.Cells`) that params/privacy/claims.yaml reads
(``tables``) and the claims judged on them (``ledger``). The tables and figures are drawn by
:mod:`fedlib.papers.privacy`, which re-exports these names (the study interface)."""

from __future__ import annotations

import functools
import hashlib
import json
import math

import numpy as np
import pandas as pd
import torch

from fedlib import claims, study
from fedlib import results
from fedlib.algorithms import loops
from fedlib.claims import Cells
from fedlib.data.sources import MNIST_MEAN, MNIST_STD
from fedlib.plans.privacy import Plan, config
from fedlib.plans.privacy import defense_configs, dp_sgd_configs, table_configs
from fedlib.privacy import (
    epsilon, feature_fn, holdings_table, invert_features, model_query, reconstruct, references,
    samples_per_prototype, train_inversion, what_server_holds)
from fedlib.privacy import leakage_table
from fedlib.privacy.attack import attacker_aux
from fedlib.privacy.defense import sample_level_epsilon
from fedlib.privacy.rounds import PICTURES, attack_round, finite_scores, held_out_classifier
from fedlib.validation import ConfigError


#: the defences of the privacy-utility curve
UPLOAD_DEFENCE, DP_SGD = "clip + noise on uploads", "DP-SGD (per sample)"
#: the kinds of a leakage-table row


def accuracy(plan: Plan, method: str, summary: dict) -> float:
    """A run's accuracy (%) under the method's inference rule, mean over clients, at the last round."""
    return 100.0 * summary["metrics"][plan.metric(method)]["last"]


def _settings_key(plan: Plan, extra: str = "") -> str:
    keys = ("attacks", "attack_steps", "restarts", "batch1_images", "decoder_steps", "aux_images")
    body = {k: plan.settings[k] for k in keys} | {"attack": plan.spec["attack"], "defense": plan.spec["defense"],
                                                  "extra": extra, "version": 1}
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()[:10]


class Attacker:
    """The attacker of one seed: its auxiliary images, held-out classifier and the target client's private images,
    from the seed's first run (every run of a seed shares the partition); built on first use, so that reading
    archived attack results needs no model."""

    def __init__(self, plan: Plan, seed: int):
        self.plan, self.seed, self.cfg = plan, seed, config(plan, plan.table_methods()[0])

    @functools.cached_property
    def _built(self) -> tuple:
        atk, state = self.plan.spec["attack"], results.state(self.cfg, self.seed)
        aux = attacker_aux(state, atk["client"], self.plan.settings["aux_images"], self.seed)
        classifier = held_out_classifier(state, *aux, atk["classifier_epochs"], self.seed)
        private = state.data.train[atk["client"]]
        acc = float((classifier(private.x)[0].argmax(1) == private.y).float().mean())
        return aux, classifier, (private.x, private.y), acc

    aux = property(lambda self: self._built[0])
    classifier = property(lambda self: self._built[1])
    private = property(lambda self: self._built[2])

    @property
    def classifier_acc(self) -> float:
        """The held-out classifier's accuracy on the private images (kept with the seed's first run)."""
        return results.derived(self.cfg, self.seed, f"privacy-classifier-{_settings_key(self.plan)}",
                               lambda _state: self._built[3])


def attacks_name(plan: Plan, noise: float | None = None) -> str:
    """The derived value holding a run's attack scores: ``privacy-attacks-<hash of the settings and noise>``."""
    return f"privacy-attacks-{_settings_key(plan, f'noise={noise}')}"


def pictures_name(plan: Plan, noise: float | None = None) -> str:
    """The derived value holding a run's attack pictures: ``privacy-pictures-<hash>``, with :data:`PICTURES`."""
    return f"privacy-pictures-{_settings_key(plan, f'noise={noise}; pictures={PICTURES}')}"


def attacks(plan: Plan, cfg: dict, method: str, seed: int, attacker: Attacker, noise: float | None = None
            ) -> list[dict]:
    """The attack rows of the finished run ``(cfg, seed)``; computed, they are the rows of :func:`pictures`."""
    return results.derived(cfg, seed, attacks_name(plan, noise),
                           lambda _state: pictures(plan, cfg, method, seed, attacker, noise)["rows"])


def pictures(plan: Plan, cfg: dict, method: str, seed: int, attacker: Attacker, noise: float | None = None) -> dict:
    """``{"rows", "pictures": {attack: picture}}`` of every attack of the profile the server holds the inputs of,
    on the target client's next round of ``(cfg, seed)`` (``noise``: through the upload defence first)."""
    def make(state):
        todo = [a for a in plan.settings["attacks"] if a in what_server_holds(method).attacks]
        defence = None if noise is None else {**plan.spec["defense"], "noise_multiplier": float(noise)}
        rows, kept = attack_round(state, method, todo, plan.spec["attack"], plan.settings, attacker.aux,
                                  attacker.classifier, defence, seed, PICTURES)
        return {"rows": rows, "pictures": kept}

    return results.derived(cfg, seed, pictures_name(plan, noise), make)


def _holder(plan: Plan) -> str | None:
    """The first table method, on the study's model, whose server holds the extractor."""
    return next((m for m in plan.table_methods() if what_server_holds(m).holds_extractor
                 and plan.spec["methods"][m].get("model") is None), None)


def _invert(plan: Plan, f, stats, shape: tuple, seed: int):
    """White-box feature inversion (cosine) of ``stats`` through ``f`` with the profile's attack settings."""
    return invert_features(f, stats, shape, steps=plan.settings["attack_steps"], restarts=plan.settings["restarts"],
                           loss="cosine", mean=MNIST_MEAN, std=MNIST_STD, seed=seed).images


def reference_rows(plan: Plan, seed: int, attacker: Attacker) -> list[dict]:
    """The three references on the private images: the class average, the best auxiliary match and the white-box
    inversion of each image's own feature through :func:`_holder`'s extractor."""
    def make(_state):
        (x, y), single, holder = attacker.private, None, _holder(plan)
        if holder is not None:
            f = feature_fn(results.state(config(plan, holder), seed).model(plan.spec["attack"]["client"]), "high")
            with torch.no_grad():
                z = f(x)
            single = _invert(plan, f, z, tuple(x.shape[1:]), seed)
        refs = references(*attacker.aux, x, y, single, attacker.classifier, MNIST_MEAN, MNIST_STD)
        if holder is not None:
            refs.loc[refs.attack == "reference: single-sample inversion", "attack"] = \
                f"reference: single-sample inversion ({plan.label(holder)} extractor)"
        return [finite_scores(r) for r in refs.drop(columns="method").to_dict(orient="records")]

    return results.derived(attacker.cfg, seed, f"privacy-refs-{_settings_key(plan)}", make)


def leakage(plan: Plan) -> dict:
    """The attack rows and references of every seed: ``{"rows", "refs", "classifier_acc": {seed: accuracy},
    "holds": {method: ServerView}}``; the runs must have finished."""
    rows, refs, acc = [], [], {}
    for seed in plan.seeds:
        attacker = Attacker(plan, seed)
        acc[seed] = attacker.classifier_acc
        for m, cfg in table_configs(plan).items():
            rows += [{**r, "seed": seed} for r in attacks(plan, cfg, m, seed, attacker)]
        refs += [{**r, "seed": seed} for r in reference_rows(plan, seed, attacker)]
    columns = ["method", "attack", "seed", "psnr", "ssim", "label_acc", "images", "seconds"]
    return {"rows": pd.DataFrame(rows, columns=columns), "refs": pd.DataFrame(refs), "classifier_acc": acc,
            "holds": {m: what_server_holds(m) for m in plan.table_methods()}}


def holdings(plan: Plan) -> pd.DataFrame:
    """What the server holds of each method, from its declared messages, and which attacks apply."""
    frame = holdings_table(plan.table_methods())
    frame.index = [plan.label(m) for m in frame.index]
    return frame


def curve(plan: Plan, seed: int) -> pd.DataFrame:
    """The samples-per-prototype curves: each kind of statistic over n images of one class of the federation,
    attacked by white-box feature inversion and by the decoder through :func:`_holder`'s client model."""
    holder, s, atk = _holder(plan), plan.settings, plan.spec["attack"]
    if holder is None:
        raise ConfigError("methods", plan.table_methods(), "a method whose server holds the extractor (e.g. fedavg)")

    def make(state):
        model = state.model(atk["client"])
        f = feature_fn(model, "high")
        x, y = state.data.dataset.x_train, state.data.dataset.y_train
        aux_x = attacker_aux(state, atk["client"], s["aux_images"], seed)[0]
        decoder = train_inversion(model_query(model), aux_x, levels=("high",), steps=s["decoder_steps"],
                                  batch_size=atk["decoder_batch"], lr=atk["decoder_lr"], seed=seed, progress=False)

        def run_decoder(stats):
            with torch.no_grad():
                return reconstruct(decoder, {"high": stats})

        frames = [curve_frame(attack, f, x, y, s["curve_sizes"], s["curve_groups"], kind, MNIST_MEAN, MNIST_STD,
                              seed).assign(attack=name)
                  for name, attack in (("feature inversion", lambda z: _invert(plan, f, z, tuple(x.shape[1:]), seed)),
                                       ("decoder", run_decoder))
                  for kind in s["curve_kinds"]]
        return pd.concat(frames, ignore_index=True).assign(extractor=plan.label(holder)).to_dict(orient="records")

    shape = json.dumps([s[k] for k in ("curve_sizes", "curve_groups", "curve_kinds")] + ["decoder"])
    return pd.DataFrame(results.derived(config(plan, holder), seed, f"privacy-curve-{_settings_key(plan, shape)}",
                                        make))


def curve_frame(attack, f, x, y, sizes, groups, kind, mean=0.0, std=1.0, seed=0) -> pd.DataFrame:
    """One kind's curve (:func:`fedlib.privacy.samples_per_prototype`) with PSNR capped at 100 dB."""
    frame = samples_per_prototype(attack, f, x, y, sizes=sizes, groups=groups, kind=kind, mean=mean, std=std,
                                  seed=seed)
    return frame.assign(**{col: frame[col].clip(upper=100.0) for col in ("psnr", "psnr_best")})


def dp_sgd_epsilon(plan: Plan, cfg: dict, seed: int, noise: float) -> float:
    """Sample-level epsilon of a DP-SGD run: the largest over its clients (each client's own rate and steps)."""
    partition, t = results.split(cfg, seed)[1], results.context(cfg, seed).train
    return max(sample_level_epsilon(noise, n, t.batch_size, loops.steps(n, t) * t.local_epochs, plan.rounds,
                                    plan.spec["attack"]["delta"]) for n in {len(ix) for ix in partition.train})


def utility(plan: Plan, summaries: dict, dp_summaries: dict | None = None) -> pd.DataFrame:
    """The privacy-utility curve, means over seeds: per defence, method and noise the accuracy (%), the best attack's
    SSIM on the upload, that attack and the epsilon (upload defence: one release per round at rate 1; DP-SGD:
    :func:`dp_sgd_epsilon`). ``summaries`` / ``dp_summaries``: the runs of :func:`defense_configs` / DP-SGD."""
    attackers, rows = {s: Attacker(plan, s) for s in plan.seeds}, []
    curves = [(UPLOAD_DEFENCE, defense_configs(plan), summaries)]
    curves += [(DP_SGD, dp_sgd_configs(plan), dp_summaries)] if dp_summaries else []
    for defence, configs, runs in curves:
        for (m, sigma), cfg in configs.items():
            for seed, summary in zip(plan.seeds, runs[(m, sigma)], strict=True):
                eps = (math.inf if sigma == 0 else dp_sgd_epsilon(plan, cfg, seed, sigma) if defence == DP_SGD
                       else epsilon(sigma, plan.rounds, 1.0, plan.spec["attack"]["delta"]))
                row = {"defence": defence, "method": m, "noise": sigma, "seed": seed, "epsilon": eps}
                if summary.get("diverged_at"):  # the engine stops a run whose loss is not finite: no model to score
                    rows.append({**row, "accuracy": math.nan, "ssim": math.nan,
                                 "best attack": f"run diverged in round {summary['diverged_at']}"})
                    continue
                upload_noise = sigma if sigma and defence == UPLOAD_DEFENCE else None  # DP-SGD acts in training
                best = max(attacks(plan, cfg, m, seed, attackers[seed], upload_noise), key=lambda r: r["ssim"],
                           default={"ssim": math.nan, "attack": "no attack reconstructed an image"})
                rows.append({**row, "accuracy": accuracy(plan, m, summary), "ssim": best["ssim"],
                             "best attack": best["attack"]})
    return _mean_over_seeds(pd.DataFrame(rows), ["defence", "method", "noise"], ("epsilon", "accuracy", "ssim"),
                            "accuracy", "accuracy std", modes=("best attack",))


REALISTIC, UPPER_BOUND, REFERENCE = "realistic", "upper bound", "reference"
#: the attacks on a model upload at the client's real batch and local steps; the batch-1 gradient inversion (iDLG),
#: an upper bound no real round offers, is named apart and the claims rest on the realistic ones
REALISTIC_MODEL_ATTACKS = ("gradient_inversion (B ", "imprint")


UPPER_BOUND_ATTACKS = ("gradient_inversion (batch 1",)


#: the leakage table's column with each method's batch-1 gradient inversion, beside its realistic attacks
BOUND_COLUMN = "upper bound ssim"


#: a leakage-table row's scores, and those of a row no attack scored
SCORE_COLUMNS = ("psnr", "ssim", "label_acc", "ssim std")


NO_SCORES = dict.fromkeys(SCORE_COLUMNS, math.nan)


def _mean_over_seeds(frame: pd.DataFrame, keys: list[str], values=("psnr", "ssim", "label_acc"), spread="ssim",
                     spread_name="ssim_std", modes=()) -> pd.DataFrame:
    """Per ``keys``: the means of ``values``, the seeds ``n``, ``spread``'s std (one seed: none) and ``modes``' mode."""
    g = frame.groupby(keys, sort=False)
    out = g[list(values)].mean()
    out["n"] = g.size()
    out[spread_name] = g[spread].std(ddof=1).where(out["n"] > 1)
    for col in modes:
        out[col] = g[col].agg(lambda s: s.mode().iloc[0])
    return out.reset_index()


def merge_step_counts(frame: pd.DataFrame) -> pd.DataFrame:
    """``frame`` with each method's "gradient_inversion (B b, k steps)" rows renamed "(B b, lo-hi local steps)":
    k follows the seed's partition, and one method's rows must not split per seed."""
    found = frame["attack"].str.extract(r"^gradient_inversion \(B (\d+), (\d+) steps\)$") if len(frame) else None
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


def attack_kind(attack: str) -> str:
    """The row's kind: the batch-1 upper bound, a reference, or realistic (every other attack)."""
    if attack.startswith("reference:"):
        return REFERENCE
    return UPPER_BOUND if attack.startswith(UPPER_BOUND_ATTACKS) else REALISTIC


def table(plan: Plan, res: dict) -> pd.DataFrame:
    """The leakage table, means over seeds: realistic attacks and references ranked by SSIM, the batch-1 upper
    bound unranked after them and in :data:`BOUND_COLUMN`, then one row per method no image attack applies to."""
    res = {**res, "rows": merge_step_counts(res["rows"])}
    rows = _mean_over_seeds(res["rows"], ["method", "attack"]) if len(res["rows"]) else pd.DataFrame(
        columns=["method", "attack", "psnr", "ssim", "label_acc", "ssim_std", "n"])
    refs = _mean_over_seeds(res["refs"], ["attack"]).assign(method="—")
    ranked = leakage_table(rows[["method", "attack", "psnr", "ssim", "label_acc"]],
                           refs[["attack", "psnr", "ssim", "label_acc", "method"]])
    pairs = list(zip(ranked.method, ranked.attack, strict=True))
    spread, ref_spread = rows.set_index(["method", "attack"])["ssim_std"], refs.set_index("attack")["ssim_std"]
    ranked["ssim std"] = [spread.get((m, a), math.nan) if m != "—" else ref_spread.get(a, math.nan) for m, a in pairs]
    ranked.insert(3, "kind", [attack_kind(a) if m != "—" else REFERENCE for m, a in pairs])
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
                              **NO_SCORES, BOUND_COLUMN: math.nan} for m in missing])
        ranked = pd.concat([ranked, tail], ignore_index=True)
    return ranked


# -- the ledger ------------------------------------------------------------------------------------------------
def _best_attack(res: dict, method: str, kinds: tuple[str, ...] | None = None) -> tuple[list[float], str]:
    """The best SSIM per seed over a method's attacks starting with ``kinds`` and the most frequent best attack."""
    part = res["rows"][res["rows"].method == method]
    if kinds is not None:
        part = part[[a.startswith(kinds) for a in part.attack]]
    if not len(part):
        return [], ""
    best = part.loc[part.groupby("seed")["ssim"].idxmax()].sort_values("seed")
    return best["ssim"].tolist(), str(best["attack"].mode().iloc[0])


def added_attacks_rows(plan: Plan, methods: list[str]) -> tuple[pd.DataFrame, list[int]]:
    """The attack rows of the seeds the evidence planner added to every one of ``methods``' runs after the profile's
    (:func:`fedlib.results.more_seeds`, the seeds all of them hold), up to the first seed whose attack scores cannot
    be read (rendered from the archive: not archived), and those seeds; none under a short profile."""
    extra = None if plan.profile in claims.DECISIVE_PROFILES else []
    for k in methods if extra is None else ():
        got = results.more_seeds(config(plan, k), plan.seeds)
        extra = got if extra is None else extra[:len(got)]   # each list runs on from the profile's last seed
    rows, seeds = [], []
    for seed in extra or ():
        attacker = Attacker(plan, seed)
        try:
            got = [{**r, "seed": seed} for k in methods for r in attacks(plan, config(plan, k), k, seed, attacker)]
        except results.NotArchived:
            break
        rows, seeds = rows + got, seeds + [seed]
    return pd.DataFrame(rows), seeds


def derive_attacks(profile: str, method: str, cfg: dict, seed: int) -> None:
    """Make the attack scores of ``method``'s run of ``seed`` that the statistics-vs-models claims read, where the
    evidence planner added the seed (:attr:`fedlib.plateau.Group.derive`); its results folder is ``cfg``'s."""
    plan = Plan.load(profile, cfg.get("results_dir"))
    attacks(plan, config(plan, method), method, seed, Attacker(plan, seed))


def ledger(plan: Plan, res: dict) -> list:
    """The privacy claims (``params/privacy/claims.yaml``) judged by the claims engine on :func:`tables` (rules:
    docs/privacy.md, "Ledger rules"); ``res``: :func:`leakage`'s result."""
    return claims.ledger("privacy", tables(plan, res))


def tables(plan: Plan, res: dict) -> dict:
    """The claims' tables by name (:class:`fedlib.claims.Cells`): ``upload``, ``fedmps_inverted`` and
    ``safer_<method>``; without cells, and the reason as ``why``, where the rows lack them."""
    prof, n, methods = plan.profile, len(plan.seeds), set(res["rows"].method)
    caveat = f"{prof} profile: {plan.rounds} rounds, seeds {plan.seeds}" if prof != "paper" else ""
    avg = res["refs"][res["refs"].attack == "reference: class average"].sort_values("seed")["ssim"].tolist()

    def table(cells: dict | None = None, why: str = "", added: str = "", seeds: int = n, **text) -> Cells:
        return Cells(cells or {}, prof, study.with_added(caveat, added), seeds,
                     text={"why": res.get("missing") or why, **text})

    def cell(label: str, values: list, others: list, seeds: int = n, **extra) -> dict:
        """Per-seed values compared only where both sides hold every one of ``seeds`` seeds (the profile's, and
        any the evidence planner added to both sides)."""
        per_seed = list(values) if seeds > 1 and len(values) == len(others) == seeds else None
        return {"label": label, "value": np.mean(values), "per_seed": per_seed, "n": seeds, **extra}

    out = {"upload": None, "fedmps_inverted": table(why="FedMPS not in this profile")}
    if "fedmps" in plan.table_methods():
        v = res["holds"]["fedmps"]
        leaks = int(v.holds_extractor) + int("gradient_inversion" in v.attacks)
        out["upload"] = table({"fedmps": {"label": "FedMPS", "value": leaks, "per_seed": None, "n": n}},
                              upload=", ".join(v.upload), summary=v.summary(), attacks=", ".join(v.attacks))
    if "fedmps" in methods:
        best, bar = _best_attack(res, "fedmps")[0], [a + 0.02 for a in avg]
        out["fedmps_inverted"] = table({"fedmps": cell("FedMPS best", best, bar), "average": {
            **cell("class average + 0.02", bar, best), "value": np.mean(avg) + 0.02, "average": np.mean(avg)}})
    # the models' side under the realistic attacks; the batch-1 upper bound is named beside it, not judged on
    model_best = _best_attack(res, "fedavg", REALISTIC_MODEL_ATTACKS)[0] if "fedavg" in methods else []
    for m in ("mpfedcl", "gfpl"):
        label = plan.label(m)
        out[f"safer_{m}"] = table(why=f"{label} or FedAvg not in this profile")
        if m not in methods or not model_best:
            continue
        own = bool(_best_attack(res, m, REALISTIC_MODEL_ATTACKS)[0])   # the method uploads its model too
        side = m if own else "fedavg"   # whose model upload the statistics are compared with
        sides = sorted({m, side})
        extra, added = added_attacks_rows(plan, sides)   # the seeds the evidence planner added to both sides
        both = {**res, "rows": pd.concat([res["rows"], extra], ignore_index=True) if len(extra) else res["rows"]}
        stats, stats_attack = _best_attack(both, m, ("feature_inversion", "decoder"))
        ref, ref_attack = _best_attack(both, side, REALISTIC_MODEL_ATTACKS)
        bound = _best_attack(res, side, UPPER_BOUND_ATTACKS)[0]
        whose = f"{label}'s own model upload" if own else "FedAvg's model upload"
        runs = {k: study.trend(f"{plan.label(k)} (leakage study)", config(plan, k), [*plan.seeds, *added],
                               plan.metric(k), more=True, derive=(f"{__name__}:derive_attacks", plan.profile, k))
                for k in sides}   # each side's runs, named for the evidence planner, which may add seeds to them
        seeds = n + len(added)
        out[f"safer_{m}"] = table(
            {"statistics": cell(f"{label} statistics ({stats_attack})", stats, ref, seeds, attack=stats_attack,
                                trend=runs[m]),
             "model": cell(f"{whose} ({ref_attack})", ref, stats, seeds, attack=ref_attack, whose=whose,
                           trend=runs[side])},
            added=study.added_seeds_text({plan.label(k): [*plan.seeds, *added] for k in sides}, plan.seeds),
            seeds=seeds,
            fedavg=f" (FedAvg's {np.mean(model_best):.3f})" if own else "",
            bound=(f"the batch-1 gradient inversion (iDLG), an upper bound no real round offers, reaches "
                   f"{np.mean(bound):.3f} on the model upload and is not judged on") if bound else "",
            own="MP-FedCL uploads its model too, so its upload as a whole leaks what the model leaks" if own else "")
    return out
