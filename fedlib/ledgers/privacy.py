"""The privacy study's numbers and claims ledger: the values of its tables' cells, read from its runs through
:mod:`fedlib.results`, the named cells (:class:`fedlib.claims.Cells`) that params/privacy/claims.yaml reads
(``tables``) and the claims judged on them (``ledger``). The tables and figures are drawn by
:mod:`fedlib.papers.privacy`, which re-exports these names (the study interface)."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from fedlib import claims, study
from fedlib.claims import Cells
from fedlib.plans.privacy import Plan, config
from fedlib.privacy import leakage_table


#: the kinds of a leakage-table row
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

    def table(cells: dict | None = None, why: str = "", **text) -> Cells:
        return Cells(cells or {}, prof, caveat, n, text={"why": res.get("missing") or why, **text})

    def cell(label: str, values: list, others: list, **extra) -> dict:
        """Per-seed values compared only where both sides hold every seed of the profile."""
        per_seed = list(values) if n > 1 and len(values) == len(others) == n else None
        return {"label": label, "value": np.mean(values), "per_seed": per_seed, "n": n, **extra}

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
        stats, stats_attack = _best_attack(res, m, ("feature_inversion", "decoder"))
        own = bool(_best_attack(res, m, REALISTIC_MODEL_ATTACKS)[0])   # the method uploads its model too
        side = m if own else "fedavg"   # whose model upload the statistics are compared with
        ref, ref_attack = _best_attack(res, side, REALISTIC_MODEL_ATTACKS)
        bound = _best_attack(res, side, UPPER_BOUND_ATTACKS)[0]
        whose = f"{label}'s own model upload" if own else "FedAvg's model upload"
        runs = {k: study.trend(f"{plan.label(k)} (leakage study)", config(plan, k), plan.seeds, plan.metric(k))
                for k in {m, side}}   # each side's runs, named for the evidence planner
        out[f"safer_{m}"] = table(
            {"statistics": cell(f"{label} statistics ({stats_attack})", stats, ref, attack=stats_attack,
                                trend=runs[m]),
             "model": cell(f"{whose} ({ref_attack})", ref, stats, attack=ref_attack, whose=whose, trend=runs[side])},
            fedavg=f" (FedAvg's {np.mean(model_best):.3f})" if own else "",
            bound=(f"the batch-1 gradient inversion (iDLG), an upper bound no real round offers, reaches "
                   f"{np.mean(bound):.3f} on the model upload and is not judged on") if bound else "",
            own="MP-FedCL uploads its model too, so its upload as a whole leaks what the model leaks" if own else "")
    return out
