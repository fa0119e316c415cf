"""The privacy study: what each method's upload leaks, under attacks that try hard, and a defence's price.

Not one paper's: it tests the privacy claims of FedMPS, MP-FedCL and GFPL on every method of
``params/privacy/experiments.yaml`` (a registered method with no entry too). It draws the leakage table and its
headline, the reconstructions per attack family, the samples-per-prototype curves, the privacy-utility curve and the
ledger; the attacks' results are values derived from each run (:func:`fedlib.results.derived`), archived with it.
Threat models, scoring and decisions: docs/privacy.md.
"""

from __future__ import annotations

import dataclasses
import math
import time

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import torch

from fedlib import claims, report, results, study
from fedlib.algorithms import ALGORITHMS
from fedlib.plans.privacy import (  # noqa: F401  (re-exported: the study's plan part)
    CURVE_KINDS, IMAGE_ATTACKS, Plan, all_jobs, archived_tables, check_spec, config, defense_configs,
    dp_sgd_configs, load_plan, study_profile, table_configs)
from fedlib.privacy import (
    epsilon,
    what_server_holds,
)
from fedlib.privacy.pictures import decode, reconstruction_grid
from fedlib.study.notebook import Shown
from fedlib.validation import ConfigError
from fedlib.ledgers.privacy import (  # noqa: F401  (re-exported: the study's ledger)
    REALISTIC, REFERENCE, UPPER_BOUND, UPLOAD_DEFENCE, DP_SGD, REALISTIC_MODEL_ATTACKS, UPPER_BOUND_ATTACKS,
    BOUND_COLUMN, SCORE_COLUMNS, NO_SCORES, merge_step_counts, attack_kind, table, ledger, tables, _mean_over_seeds)
from fedlib.ledgers.privacy import (  # noqa: F401  (re-exported: the study's ledger)
    accuracy, Attacker, attacks_name, pictures_name, attacks, pictures, reference_rows, leakage, holdings, curve,
    curve_frame, dp_sgd_epsilon, utility)

TITLE = "What the uploads leak: one leakage study across the suite"
ROUNDING = {"psnr": 2, "ssim": 3, "label_acc": 3, "ssim std": 3, BOUND_COLUMN: 3}
#: the defended pictures: the largest noise whose accuracy stays within this many points of the undefended run
DEFENCE_TOLERANCE = 3.0


def headline(plan: Plan, res: dict, leak: pd.DataFrame | None = None) -> pd.DataFrame:
    """One row per method, its best realistic attack, ranked with the references; the batch-1 upper bound in its own
    column; methods with no realistic image attack follow, unranked. ``leak``: :func:`table`'s result."""
    leak = table(plan, res) if leak is None else leak
    ranked = leak[leak["rank"] != "—"]
    best = ranked[(ranked.kind == REFERENCE) | ~ranked.method.duplicated()]   # the table is sorted: first is best
    rest = leak[(leak["rank"] == "—") & ~leak.method.isin(set(best.method))].drop_duplicates("method")
    if len(rest):
        bound = leak[leak.kind == UPPER_BOUND].set_index("method")["ssim"]
        rest = rest.assign(**{BOUND_COLUMN: [bound.get(m, math.nan) for m in rest.method], **NO_SCORES,
                              "attack": [a if k == "—" else "no realistic attack reconstructed an image"
                                         for a, k in zip(rest.attack, rest.kind, strict=True)]})
    out = pd.concat([best.assign(rank=range(1, len(best) + 1)), rest.assign(rank="—")], ignore_index=True)
    return out.rename(columns={"attack": "best realistic attack"})[
        ["rank", "method", "holds", "best realistic attack", *SCORE_COLUMNS, BOUND_COLUMN]]


def curve_figure(frame: pd.DataFrame, ax=None):
    """SSIM against n: one colour per kind, one line style per attack (column ``attack``, when present)."""
    ax = plt.subplots(figsize=(6.5, 4.5))[1] if ax is None else ax
    names = {"mean": "mean (prototype)", "kmeans": "k-means centroid (K = 2)", "gmm": "mixture component (2)"}
    colours = {k: f"C{i}" for i, k in enumerate(dict.fromkeys(frame.kind))}
    frame = frame if "attack" in frame else frame.assign(attack="")
    styles = {a: ["-", "--", ":"][i % 3] for i, a in enumerate(dict.fromkeys(frame.attack))}
    for (attack, kind), part in frame.groupby(["attack", "kind"], sort=False):
        ax.plot(part.n, part.ssim, styles[attack], marker="o", color=colours[kind],
                label=f"{names.get(kind, kind)}" + (f", {attack}" if attack else ""))
    ax.set_xscale("log", base=2)
    ax.set_ylim(0, 1)
    ax.set(xlabel="images behind the statistic (n)", ylabel="SSIM to the images averaged",
           title=f"Samples per prototype ({frame.extractor.iloc[0]} client model)")
    ax.legend(fontsize=7)
    return ax


def epsilon_text(eps: float) -> str:
    """An epsilon as the tables print it: three significant digits, ``inf`` for no noise."""
    return "inf" if math.isinf(eps) else f"{eps:.3g}"


# -- pictures ---------------------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Family:
    """One attack family of the pictures: attacks whose name starts with ``prefix``; ``slug`` names the figure."""

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


def family(attack: str) -> Family | None:
    """The :data:`FAMILIES` entry of an attack row's name (None for a reference)."""
    return next((f for f in FAMILIES if attack.startswith(f.prefix)), None)


def attack_detail(attack: str) -> str:
    """What a row adds to its family's heading: the statistic, the batch and steps, or ``crafted broadcast``."""
    if ":" in attack:
        return "statistic " + attack.split(":", 1)[1]
    return attack[attack.index("(") + 1:attack.rindex(")")] if "(" in attack else attack


def picture_rows(plan: Plan, seed: int, runs, attacker: Attacker | None = None) -> pd.DataFrame:
    """One row per image attack of ``runs`` (``[(method, noise)]``; noise None or 0: undefended) on ``seed``: the
    scores of :func:`attacks`, the pictures of :func:`pictures` and their own SSIM (``pictures_ssim``)."""
    attacker, out = attacker or Attacker(plan, seed), []
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
    notes = [note] if note else []
    if not math.isnan(r.pictures_ssim) and not math.isclose(r.pictures_ssim, r.ssim, rel_tol=0, abs_tol=1e-9):
        # the pictures were made again, apart from the scores (a scores record older than its pictures)
        notes.append(f"pictures' own run: SSIM {r.pictures_ssim:.3f}")
    if (shown := 0 if r.recon is None else len(r.recon)) < r.images:
        notes.append(f"{shown} of {r.images} images")
    return {"label": f"{label or plan.label(r.method)}\n{attack_detail(r.attack)}", "ssim": r.ssim, "real": r.real,
            "recon": r.recon, "ssim_each": r.ssim_each, "note": "\n".join(notes)}


def _grid_title(plan: Plan, head: str, tail: str) -> str:
    return (f"{head}\nclient {plan.spec['attack']['client']}'s training images (top, grey) above the "
            f"reconstructions (red), SSIM under each\n{tail}")


def picture_figures(plan: Plan, frame: pd.DataFrame, seed: int) -> list[tuple[Family, object, pd.DataFrame]]:
    """``[(family, figure, layout)]``: one grid per attack family in ``frame`` (:func:`picture_rows`), the methods
    as rows (the plan's order), grouped by what the server holds."""
    order = {m: i for i, m in enumerate(plan.methods)}
    frame = frame.sort_values("method", key=lambda col: col.map(lambda m: order.get(m, len(order))), kind="stable")
    out = []
    for fam in FAMILIES:
        if len(part := frame[frame.family == fam.slug]):
            groups = [(f"server holds: {h}", [_grid_row(plan, r) for r in part[part.holds == h].itertuples()])
                      for h in dict.fromkeys(part.holds)]
            title = _grid_title(plan, fam.heading, f"{plan.profile} profile, seed {seed}")
            out.append((fam, *reconstruction_grid(groups, title)))
    return out


def family_figure(plan: Plan, frame: pd.DataFrame, title: str, labels: dict | None = None, notes: dict | None = None):
    """``(figure, layout)``: one grid of ``frame``'s rows grouped by attack family; ``labels`` / ``notes``:
    ``{(method, noise): text}`` for a row's label (default the method's name) and the line under it."""
    labels, notes = labels or {}, notes or {}
    groups = [(fam.heading, [_grid_row(plan, r, labels.get((r.method, r.noise)), notes.get((r.method, r.noise), ""))
                             for r in frame[frame.family == fam.slug].itertuples()])
              for fam in FAMILIES if (frame.family == fam.slug).any()]
    return reconstruction_grid(groups or [("no image attack applies to these uploads", [])], title)


def strongest_defence(plan: Plan, summaries: dict, tolerance: float = DEFENCE_TOLERANCE) -> dict[str, dict]:
    """``{method: {"noise", "accuracy", "undefended"}}``: per utility method, the largest upload-defence noise whose
    mean accuracy stays within ``tolerance`` points of the undefended run (a diverged run never; else noise 0)."""
    def acc(m: str, sigma: float) -> float:
        runs = summaries[(m, float(sigma))]
        if any(r.get("diverged_at") for r in runs):
            return math.nan
        return float(np.mean([accuracy(plan, m, r) for r in runs]))

    out = {}
    for m in plan.settings["utility_methods"]:
        base = acc(m, 0.0)
        best = max((float(s) for s in plan.settings["noise"] if s > 0 and acc(m, s) >= base - tolerance), default=0.0)
        out[m] = {"noise": best, "accuracy": acc(m, best), "undefended": base}
    return out


def strongest_baseline(plan: Plan, paper_table: dict, method: str) -> str:
    """Of ``paper_table``'s rows (a table of ``params/<paper>/paper.yaml``) other than ``method`` that this study lists
    and an image attack applies to, the one with the highest mean reported accuracy."""
    def mean(row: dict) -> float:
        vals = [v[0] if isinstance(v, list | tuple) else v for v in row.values()]
        vals = [float(v) for v in vals if isinstance(v, int | float) and not isinstance(v, bool)]
        return float(np.mean(vals)) if vals else -math.inf

    rows = {m: mean(r) for m, r in paper_table["rows"].items() if m != method and m in plan.methods
            and set(what_server_holds(m).attacks) & set(IMAGE_ATTACKS)}
    if not rows:
        raise ConfigError("paper table", sorted(paper_table["rows"]), "a baseline the privacy study can attack")
    return max(rows, key=lambda m: (rows[m], -list(plan.methods).index(m)))


def paper_pictures(nb, method: str, paper_table: dict):
    """A paper notebook's attack figure: ``method`` and its :func:`strongest_baseline` under the study's attacks, from
    the study's runs (:func:`study_profile`, first seed; trained where missing); returns the figure and scores."""
    profile, where = study_profile(nb.profile), {"results_dir": nb.plan.results_dir, "data_root": nb.plan.data_root}
    baseline = strongest_baseline(load_plan(profile, **where), paper_table, method)
    plan = load_plan(profile, **where, methods=[method, baseline])
    seed = plan.seeds[0]
    results.run_or_read(table_configs(plan), seeds=[seed], workers=nb.workers, desc="privacy-study runs",
                        progress=False)
    frame = picture_rows(plan, seed, [(method, None), (baseline, None)])
    shown = f"{plan.label(method)} and its strongest baseline {plan.label(baseline)} under the leakage study's attacks"
    run = f"privacy study, {profile} profile, {plan.rounds} rounds, seed {seed}"
    fig, layout = family_figure(plan, frame, _grid_title(plan, shown, run))
    nb.figure(fig, f"{shown} (notebooks/privacy.ipynb, {profile} profile, seed {seed}): the attacked client's images "
              "beside the reconstructions", "privacy_attack_pictures")
    scores = frame.assign(method=[plan.label(m) for m in frame.method])[
        ["method", "kind", "attack", "psnr", "ssim", "label_acc", "images"]].round(ROUNDING)
    nb.table(f"**{shown}** ({run}, client {plan.spec['attack']['client']}; the strongest baseline is the paper's "
             "best-scoring baseline an image attack applies to): PSNR (dB), SSIM and label accuracy, the leakage "
             "table's numbers.", scores.set_index(["method", "kind", "attack"]))
    nb.results["privacy_pictures"] = {"baseline": baseline, "layout": layout, "frame": frame}
    return Shown((fig, scores))


@study.command
def main(argv: list[str] | None = None) -> int:
    """``python -m fedlib.papers.privacy [--profile P] [--methods M ...] [--seeds S ...] [--rounds N]``: train the
    runs, attack every method's upload and print the ranked leakage table, the privacy-utility curve and the
    ledger."""
    parser = study.add_retrain_archived(study.cli("python -m fedlib.papers.privacy", main.__doc__))
    args, plan = study.plan_from_cli(parser, load_plan, argv)
    if plan is None:
        return 2
    torch.set_num_threads(1)
    t0 = time.perf_counter()
    summaries, dsum, dpsum = (
        results.run_or_read(configs(plan), workers=args.workers, desc=desc, retrain_archived=args.retrain_archived)
        for configs, desc in ((table_configs, "leakage runs"), (defense_configs, "defence runs"),
                              (dp_sgd_configs, "DP-SGD runs")))
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
    """The set-up cell: the notebook state the other cells take (its clock starts here, for the closing note)."""
    from fedlib.study.notebook import open_notebook

    t_start = time.perf_counter()
    return open_notebook("privacy", load_plan, profile, lambda plan: (
        str(plan.rounds), config(plan, plan.table_methods()[0])["device"],
        f"profile {profile!r}: {len(plan.table_methods())} methods, seeds {plan.seeds}, {plan.rounds} rounds"),
        backend=backend, workers=workers, title=TITLE, results={"t_start": t_start}, methods=methods, seeds=seeds,
        rounds=rounds, device=device)


def show_setting(nb):
    """The study's setting: data, model, training, the attacked client, the attacker's data, attacks, defence."""
    plan, s = nb.plan, nb.plan.settings
    cfg0, atk, defense = config(plan, plan.table_methods()[0]), plan.spec["attack"], plan.spec["defense"]
    part, train = cfg0["partition"], cfg0["train"]
    setting = pd.Series({
        "data": f"{cfg0['dataset']['name']}, {part['train_size']} training images, "
                f"{part['num_clients']} clients, Dir({part['alpha']:g}) (FedPCL's construction)",
        "model": f"{cfg0['model']['name']} for every method (FedMPS: cnn_fmnist, it needs two feature levels)",
        "training": f"{plan.rounds} rounds, SGD lr {train['lr']:g}, momentum {train['momentum']:g}, "
                    f"batch {train['batch_size']}, {train['local_epochs']} local epoch",
        "attacked client": f"client {atk['client']}: its next round after the run, (broadcast, upload) as the server "
                           "holds them",
        "attacker's data": f"{s['aux_images']} test images outside the client's test block (same distribution)",
        "held-out classifier": f"mlp_mnist trained {atk['classifier_epochs']} epochs on the attacker's images only",
        "attacks": f"{', '.join(s['attacks'])}; {s['attack_steps']} optimisation steps x {s['restarts']} start(s), "
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
    runs = {"summaries": (table_configs, "leakage runs"), "defense": (defense_configs, "defence runs"),
            "dp_sgd": (dp_sgd_configs, "DP-SGD runs")}
    for key, (configs, desc) in runs.items():
        nb.results[key] = results.run_or_read(configs(nb.plan), workers=nb.workers, desc=desc, progress=False)


def show_holdings(nb):
    """What the server holds of each method, from its declared messages."""
    return nb.table("**What the server holds, from the declared messages.**", holdings(nb.plan))


def check_holdings(nb) -> None:
    """Print the check that what the server holds is each method's declared upload."""
    print("what the server holds = each method's declared upload:",
          all(what_server_holds(m).upload == ALGORITHMS[m].UPLOAD for m in nb.plan.table_methods()))


def _leakage(nb) -> tuple[dict, pd.DataFrame]:
    """The attacks' results (:func:`leakage`) and the leakage table (:func:`table`)."""
    def make():
        res = leakage(nb.plan)
        return res, table(nb.plan, res)
    return nb.once("leakage", make)


def show_leakage(nb):
    """The leakage table, with the runs that made it."""
    plan, (res, leak) = nb.plan, _leakage(nb)
    shown = leak.round(ROUNDING).set_index("rank")
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
    """The leakage table's headline (:func:`headline`)."""
    plan, (res, leak) = nb.plan, _leakage(nb)
    head = headline(plan, res, leak)
    shown = head.round(ROUNDING).set_index("rank")
    nb.table(f"**The headline ({nb.profile} profile, {plan.rounds} rounds, seeds {plan.seeds}): each method's best "
             "realistic attack** (the gradient inversion of the client's real round, the imprint, the white-box "
             "feature inversion, the decoder), ranked by SSIM with the three references; `upper bound ssim`: the "
             "gradient inversion of a one-image update (iDLG), an upper bound no real round offers, not ranked.", shown)
    nb.section.record(headline=head.to_dict(orient="records"))
    return shown


def fig_reconstructions(nb):
    """One grid per attack family of the leakage table's runs on the first seed (:func:`picture_figures`)."""
    frame = nb.once("pictures", lambda: picture_rows(nb.plan, nb.seed0, [(m, None) for m in nb.plan.table_methods()]))
    figs, shown = [], {}
    for fam, fig, layout in picture_figures(nb.plan, frame, nb.seed0):
        figs.append(nb.figure(fig, f"{fam.heading}: the attacked client's images beside the reconstructions, SSIM "
                              f"under each ({nb.profile} profile, seed {nb.seed0})", f"reconstructions_{fam.slug}"))
        shown[fam.slug] = layout[["group", "label", "ssim", "images"]].to_dict(orient="records")
    nb.results["pictures_layout"] = shown
    nb.section.record(pictures=shown)
    return Shown(figs)


def _defended_pictures(nb) -> tuple[dict, pd.DataFrame]:
    """:func:`strongest_defence` per utility method and its run's pictures on the first seed."""
    def make():
        chosen = strongest_defence(nb.plan, nb.results["defense"])
        return chosen, picture_rows(nb.plan, nb.seed0, [(m, c["noise"]) for m, c in chosen.items()])
    return nb.once("defended_pictures", make)


def fig_reconstructions_defended(nb):
    """The pictures of the utility methods under :func:`strongest_defence`; returns the figure and the noises."""
    plan, (chosen, frame), delta = nb.plan, _defended_pictures(nb), nb.plan.spec["attack"]["delta"]
    labels, notes = {}, {}
    for m, c in chosen.items():
        key, eps = (m, c["noise"]), epsilon_text(epsilon(c["noise"], plan.rounds, 1.0, delta)) if c["noise"] else ""
        labels[key] = f"{plan.label(m)}, " + (f"σ = {c['noise']:g}, ε = {eps}" if c["noise"] else "no defence")
        notes[key] = (f"accuracy {c['accuracy']:.1f}% (undefended {c['undefended']:.1f}%)" if c["noise"] else
                      f"no σ > 0 within {DEFENCE_TOLERANCE:g} points")
    title = _grid_title(plan, f"Under the strongest upload defence within {DEFENCE_TOLERANCE:g} accuracy points "
                        f"(clip + noise, δ = {delta:g})", f"{nb.profile} profile, seed {nb.seed0}")
    fig, layout = family_figure(plan, frame, title, labels, notes)
    nb.figure(fig, f"The reconstructions under the strongest upload defence that keeps accuracy within "
              f"{DEFENCE_TOLERANCE:g} points ({nb.profile} profile, seed {nb.seed0})", "reconstructions_defended")
    df = defence_table(plan, chosen)
    nb.table(f"**The defence the pictures above use: the largest noise multiplier whose accuracy stays within "
             f"{DEFENCE_TOLERANCE:g} points of the undefended run** (mean over seeds, last round).", df)
    nb.results["defended_layout"] = layout
    nb.section.record(pictures_defended=layout[["group", "label", "ssim", "images"]].to_dict(orient="records"))
    return Shown((fig, df))


def defence_table(plan: Plan, chosen: dict) -> pd.DataFrame:
    """The table under the defended pictures: per method, :func:`strongest_defence`'s noise multiplier as the grid's
    label prints it (never rounded: the noises span decades, 0.001 is not 0) and the accuracies to 2 decimals."""
    return pd.DataFrame([{"method": plan.label(m), "noise": float(c["noise"]), "accuracy": report.fmt(c["accuracy"]),
                          "undefended accuracy": report.fmt(c["undefended"])} for m, c in chosen.items()],
                        columns=["method", "noise", "accuracy", "undefended accuracy"]).set_index("method")


def fig_samples_per_prototype(nb):
    """The samples-per-prototype figure (:func:`curve`); returns it and its numbers."""
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


def fig_utility(nb):
    """Privacy-utility (:func:`utility`): accuracy against the best attack's SSIM; returns the figure and numbers."""
    plan, dsum, dpsum = nb.plan, nb.results["defense"], nb.results["dp_sgd"]
    util = utility(plan, dsum, dp_summaries=dpsum)
    fig, ax = plt.subplots(figsize=(6.5, 4.5))
    for (defence, m), part in util.groupby(["defence", "method"], sort=False):
        dp = defence == DP_SGD
        ax.plot(part.ssim, part.accuracy, marker="s" if dp else "o", linestyle="--" if dp else "-",
                label=plan.label(m) + (" + DP-SGD" if dp else ""))
        for _, r in part.iterrows():
            ax.annotate(f"σ={r.noise:g}, ε={epsilon_text(r.epsilon)}", (r.ssim, r.accuracy), fontsize=6,
                        xytext=(3, 3), textcoords="offset points")
    ax.set(xlabel="SSIM of the best attack on the upload (lower: more private)", ylabel="accuracy (%)",
           title=f"Privacy-utility: clip + Gaussian noise (δ = {plan.spec['attack']['delta']:g})")
    ax.legend(fontsize=8)
    nb.figure(fig, f"Privacy-utility: accuracy against the best attack's SSIM under clip + noise on the uploads and "
              f"under DP-SGD ({nb.profile} profile)", "privacy_utility")
    shown = util.assign(method=[nb.label(m) for m in util.method], epsilon=[epsilon_text(e) for e in util.epsilon])
    shown = shown.round({"accuracy": 2, "accuracy std": 2, "ssim": 3}).set_index(["defence", "method", "noise"])
    nb.table("**Privacy-utility: accuracy (%) and the best attack's SSIM at each noise multiplier sigma.** "
             f"{UPLOAD_DEFENCE}: epsilon per round's release, every client every round; {DP_SGD}: each sample's "
             f"gradient clipped to {plan.spec['dp_sgd']['clip_sample']:g}, epsilon per sample (the least-protected "
             "client's), shuffled batches accounted as Poisson sampling at rate batch / samples. A run whose loss "
             "stopped being finite is not drawn; its row says so.", shown,
             f"_Runs: {study.made_by(s for d in (dsum, dpsum) for runs in d.values() for s in runs)}._")
    nb.section.record(utility=util.to_dict(orient="records"))
    return Shown((fig, shown))


def show_ledger(nb):
    """The claims ledger from the leakage results (claims resting on attack scores the archive lacks say so)."""
    res = nb.part(lambda: _leakage(nb)[0]) or {
        "rows": pd.DataFrame(columns=["method", "attack", "seed", "ssim"]),
        "refs": pd.DataFrame(columns=["attack", "seed", "ssim"]),
        "holds": {m: what_server_holds(m) for m in nb.plan.table_methods()},
        "missing": "the attack scores are not in the run archive (python -m fedlib.papers.privacy --profile "
                   f"{nb.profile} makes them; python -m fedlib archive keeps them)"}
    return nb.ledger(ledger(nb.plan, res), write=False)


def closing_note(nb) -> None:
    """The closing note (the table's top and bottom rows; the Run All's time unless rendered from the archive);
    writes the report section."""
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
