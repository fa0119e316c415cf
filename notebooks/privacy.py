# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     notebook_metadata_filter: -jupytext.text_representation.jupytext_version
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # What the uploads leak: every method's upload under the same attacks, and a defence with its price
#
# **How to run it.** Open it in JupyterLab (README, "Study a paper interactively") and Run All. Choose the profile in the parameters cell below (`profile = ...`) or for the whole session with `FEDLIB_PROFILE=<profile> jupyter lab ...`; headless: `python -m fedlib.papers.privacy --profile quick` (the tables without the notebook) or `python -m fedlib reproduce --profile quick --only privacy`. Time on 2 CPU cores with an empty results folder: **smoke** under a minute (measured 2026-11-28 from an empty results folder: 27 CPU-seconds for the whole notebook, which trains on one thread, so about as many seconds of wall time on an idle 2-core machine plus the kernel's start) (checks that every cell runs; its numbers mean nothing), **quick** about 17 minutes (measured 2026-11-28 on the same machine: 7.8 + 8.0 minutes, the first attempt's kernel having died during the leakage cell and Run All going on from the cache; 21 runs, then the attacks; the decoder's samples-per-prototype curve, added afterwards, takes about 1 minute more) (the default: 9 methods, 10 rounds, one seed), **paper** not measured (every method, 30 rounds, 3 seeds, longer attacks: hours). Finished runs and attack results are cached in `results/`, so a second Run All only reads them.
#
# Three papers of the suite argue that sharing prototypes protects privacy: FedMPS (Fig. 11: a decoder applied to one
# client's prototypes), MP-FedCL (k-means centroids) and GFPL (Gaussian mixture components). Each tested it once, with
# a decoder. This study puts **every registered method's upload under the same attacks**:
#
# - **what the server holds** of each method is read from the method's declared messages (`UPLOAD`, `BROADCAST`;
#   `fedlib.privacy.what_server_holds`), so a method added to `params/privacy/experiments.yaml` enters the table with no
#   new code;
# - the uploads are **real**: every method trains a short federated run through the engine, and the attacks take the
#   (broadcast, upload) pair of the target client's next round;
# - the attacks (threat models in [docs/privacy.md](../docs/privacy.md)): gradient inversion of the round's update
#   (Inverting Gradients, labels given) and of a one-image update (iDLG label, the upper bound); white-box feature
#   inversion of the uploaded statistics where the server holds the extractor; the decoder with query access and
#   auxiliary data (FedMPS Fig. 11's attack); and an active server that crafts the broadcast (imprint, "Robbing the
#   Fed");
# - three **references** on the same private images: the attacker's class average, the best match in its auxiliary
#   data (an oracle), and the inversion of a single private image's own feature;
# - the **samples-per-prototype** curves (how many images must a statistic average before inversion stops revealing
#   them), the **privacy-utility** curve of clip + Gaussian noise on every upload with its (epsilon, delta) from Opacus's
#   RDP accountant, and the **ledger** of the papers' privacy claims under `fedlib.claims`' one rule.
#
# No paper reports numbers for this study's setting, so there is no paper column: every number below is ours, made by
# the run named beside it. LPIPS is not reported: it needs pretrained AlexNet/VGG weights, which are not available
# offline.

# %% tags=["parameters"]
import os

profile = os.environ.get("FEDLIB_PROFILE", "quick")  # smoke | quick | paper (params/privacy/experiments.yaml)
methods = None        # the leakage table's methods, e.g. ["fedavg", "fedproto", "mpfedcl"]; None: the profile's
seeds = None          # e.g. [0, 1, 2]; None: the profile's
rounds = None         # every run's rounds, e.g. 20; None: the profile's
workers = None        # runs in parallel (default: one per CPU core; every run trains with one thread)
device = None         # "cpu", "cuda" or None (auto: CUDA when present)
backend = None        # "local", "ray" or None ($FEDLIB_BACKEND, else local): where the runs train (fedlib.backends)

# %%
import math
import time

import matplotlib.pyplot as plt
import pandas as pd
import torch

from fedlib import backends, logs, papers, report
from fedlib import claims as C
from fedlib.grid import run_many
from fedlib.papers import privacy as P
from fedlib import results

torch.set_num_threads(1)
logs.to_stdout()
backends.use(backend)
pd.set_option("display.width", 160)
pd.set_option("display.max_colwidth", None)
t_start = time.perf_counter()
plan = P.load_plan(profile, methods=methods, seeds=seeds, rounds=rounds, device=device)
L = plan.label
cfg0 = P.config(plan, plan.table_methods()[0])
section = report.ReportSection("privacy", profile, title=P.TITLE, seeds=plan.seeds, rounds=str(plan.rounds),
                               device=cfg0["device"])
print(f"profile {profile!r}: {len(plan.table_methods())} methods, seeds {plan.seeds}, {plan.rounds} rounds")

# %% [markdown]
# ## Setting

# %%
atk, s = plan.spec["attack"], plan.settings
setting = pd.Series({
    "data": f"{cfg0['dataset']['name']}, {cfg0['partition']['train_size']} training images, "
            f"{cfg0['partition']['num_clients']} clients, Dir({cfg0['partition']['alpha']:g}) (FedPCL's construction)",
    "model": f"{cfg0['model']['name']} for every method (FedMPS: cnn_fmnist, it needs two feature levels)",
    "training": f"{plan.rounds} rounds, SGD lr {cfg0['train']['lr']:g}, momentum {cfg0['train']['momentum']:g}, "
                f"batch {cfg0['train']['batch_size']}, {cfg0['train']['local_epochs']} local epoch",
    "attacked client": f"client {atk['client']}: its next round after the run, (broadcast, upload) as the server holds them",
    "attacker's data": f"{s['aux_images']} test images outside the client's test block (same distribution)",
    "held-out classifier": f"mlp_mnist trained {atk['classifier_epochs']} epochs on the attacker's images only",
    "attacks": f"{', '.join(plan.attacks())}; {s['attack_steps']} optimisation steps x {s['restarts']} start(s), "
               f"decoder {s['decoder_steps']} steps, batch-1 upper bound on {s['batch1_images']} image(s)",
    "defence": f"clip the update to {plan.spec['defense']['clip_update']:g} and every statistic row to "
               f"{plan.spec['defense']['clip_features']:g}, Gaussian noise sigma x clip; noise multipliers "
               f"{s['noise']}; epsilon by Opacus's RDP accountant, delta {atk['delta']:g}",
    "seeds": ", ".join(map(str, plan.seeds)),
}, name="this study").to_frame()
section.text("**Setting.**\n\n" + report.to_markdown(setting))
setting

# %% [markdown]
# ## All runs
#
# Every run of the notebook starts here (the leakage table's methods, and the utility methods under each noise level),
# longest first, one process per core; finished runs are cache hits. The cells below only read them.

# %%
jobs = P.all_jobs(plan)
print(f"{len(jobs)} runs ({sum(c['train']['rounds'] for c, _ in jobs)} rounds in all)")
_ = run_many(jobs, workers=workers, desc="privacy runs")
summaries = results.run_or_read(P.table_configs(plan), workers=workers, desc="leakage runs", progress=False)
dsum = results.run_or_read(P.defense_configs(plan), workers=workers, desc="defence runs", progress=False)

# %% [markdown]
# ## What the server holds
#
# From each method's declared `UPLOAD` / `BROADCAST` (`fedlib.privacy.holdings_table`): the kinds it uploads, whether
# the server holds the extractor (uploaded, or broadcast and trained from), and which attacks apply.

# %%
held = P.holdings(plan)
section.text("**What the server holds, from the declared messages.**\n\n" + report.to_markdown(held))
held

# %%
# NBVAL_CHECK_OUTPUT
from fedlib.algorithms import ALGORITHMS
from fedlib.privacy import what_server_holds

print("what the server holds = each method's declared upload:",
      all(what_server_holds(m).upload == ALGORITHMS[m].UPLOAD for m in plan.table_methods()))

# %% [markdown]
# ## The leakage table
#
# Every method of the profile x every attack that applies to it, ranked by SSIM (best-revealed first), with the three
# references on the same private images. A per-class statistic is scored against its best match among the client's
# images of that class (does it reveal one particular image?); a batch reconstruction image by image against the best
# match of its label; the imprint's bins against the best match among all the client's images. `label_acc`: the
# held-out classifier's accuracy on the reconstructions. SSIM std is over seeds (blank with one seed).

# %%
res = P.leakage(plan)
leak = P.table(plan, res)
shown = leak.round({"psnr": 2, "ssim": 3, "label_acc": 3, "ssim std": 3}).set_index("rank")
acc = ", ".join(f"seed {k}: {100 * v:.1f}%" for k, v in res["classifier_acc"].items())
section.text(f"**The leakage table ({profile} profile, {plan.rounds} rounds, seeds {plan.seeds}; client "
             f"{atk['client']}'s next round).** PSNR (dB, capped at 100), SSIM and the held-out classifier's label "
             f"accuracy on the reconstructions (that classifier's accuracy on the client's real images: {acc}).\n\n"
             + report.to_markdown(shown) + f"\n\n_Runs: {papers.made_by(s for runs in summaries.values() for s in runs)}._")
section.record(leakage=leak.to_dict(orient="records"), classifier_acc=res["classifier_acc"])
shown

# %%
# NBVAL_CHECK_OUTPUT
print("every method of the profile is in the table:", {L(m) for m in plan.table_methods()} <= set(leak.method))
print("three references per seed:", len(res["refs"]) == 3 * len(plan.seeds))

# %% [markdown]
# ## Samples per prototype
#
# Two attacks (white-box inversion through a trained client extractor, and the decoder with query access and
# auxiliary data) on statistics averaged over n images of one class, as a client with n samples of a class uploads them: the class mean (a prototype), two k-means centroids (MP-FedCL) or
# two mixture-component means (GFPL). n = 1 is a single image's own feature, the upper bound. Each image is scored
# against the reconstruction of its own statistic.

# %%
spp = P.curve(plan, plan.seeds[0])
fig, ax = plt.subplots(figsize=(6, 4))
P.curve_figure(spp, ax)
section.figure(fig, f"Samples per prototype: SSIM of each attack's reconstruction against the images averaged "
               f"({profile} profile, seed {plan.seeds[0]})", name="samples_per_prototype")
plt.show()
spp_table = spp.pivot_table(index="n", columns=["attack", "kind"], values="ssim").round(3)
spp_table.columns = [f"{attack}: {kind}" for attack, kind in spp_table.columns]
section.text("**Samples per prototype: SSIM (mean over the images averaged).**\n\n" + report.to_markdown(spp_table))
section.record(samples_per_prototype=spp.to_dict(orient="records"))
spp_table

# %% [markdown]
# ## The defence and its price
#
# Every upload is clipped and noised before the server sees it (`defense:` in the run config;
# `fedlib.privacy.defense.defend_upload`): the model update as a whole to norm C with N(0, (sigma C)^2) per coordinate
# (DP-FedAvg's client-level mechanism), every row of a feature statistic to norm C with the same noise. Each noise
# level is a run trained under the defence (accuracy: its last round, each method's inference rule); the best attack's
# SSIM is on that run's defended upload; epsilon is Opacus's RDP accountant for one release per round at sample rate 1.

# %%
util = P.utility(plan, dsum)
fig, ax = plt.subplots(figsize=(6.5, 4.5))
P.utility_figure(plan, util, ax)
section.figure(fig, f"Privacy-utility: accuracy against the best attack's SSIM under clip + noise ({profile} profile)",
               name="privacy_utility")
plt.show()
util_shown = util.assign(method=[L(m) for m in util.method]).round({"epsilon": 2, "accuracy": 2, "ssim": 3})
util_shown = util_shown.set_index(["method", "noise"])
section.text("**Privacy-utility: accuracy (%) and the best attack's SSIM at each noise multiplier sigma** (a run "
             "whose loss stopped being finite is not drawn; its row says so).\n\n" + report.to_markdown(util_shown)
             + f"\n\n_Runs: {papers.made_by(s for runs in dsum.values() for s in runs)}._")
section.record(utility=util.to_dict(orient="records"))
util_shown

# %% [markdown]
# ## Claims ledger
#
# The papers' privacy claims, our evidence and a verdict by `fedlib.claims`' one rule: a short profile or one seed
# gives "inconclusive" whatever the numbers say; what the declared messages fix is "by construction".

# %%
ledger = P.ledger(plan, res)
ledger_df = C.write(section, ledger)
print(C.summary_line(ledger))
ledger_df

# %%
ranked = leak[leak["rank"] != "—"]
attacked = ranked[ranked.method != "—"]
top, bottom, last = attacked.iloc[0], attacked.iloc[-1], ranked.iloc[-1]
closing = (f"**Closing note ({profile} profile, {plan.rounds} rounds, seeds {plan.seeds}).** Top of the leakage table: "
           f"{top.method}, {top.attack}: SSIM {top.ssim:.3f}, PSNR {top.psnr:.2f} dB, label accuracy "
           f"{top.label_acc:.2f}. Bottom attack row: {bottom.method}, {bottom.attack}: SSIM {bottom.ssim:.3f}, PSNR "
           f"{bottom.psnr:.2f} dB" + ("" if last is bottom else f"; below it the {last.attack.removeprefix('reference: ')} "
                                      f"reference, SSIM {last.ssim:.3f}") + ". This Run All took "
           f"{(time.perf_counter() - t_start) / 60:.1f} minutes, reading the runs and attacks that had finished before "
           "(from an empty results folder: the first cell's times).")
section.text(closing)
print(closing)
print("report section:", section.write())
