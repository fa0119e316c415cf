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
from fedlib.papers import privacy as P

nb = P.notebook(profile, methods=methods, seeds=seeds, rounds=rounds, workers=workers, device=device,
                backend=backend)

# %% [markdown]
# ## Setting

# %%
P.show_setting(nb)

# %% [markdown]
# ## All runs
#
# Every run of the notebook starts here (the leakage table's methods, and the utility methods under each noise level),
# longest first, one process per core; finished runs are cache hits. The cells below only read them.

# %%
P.run_all(nb)

# %% [markdown]
# ## What the server holds
#
# From each method's declared `UPLOAD` / `BROADCAST` (`fedlib.privacy.holdings_table`): the kinds it uploads, whether
# the server holds the extractor (uploaded, or broadcast and trained from), and which attacks apply.

# %%
P.show_holdings(nb)

# %%
# NBVAL_CHECK_OUTPUT
P.check_holdings(nb)

# %% [markdown]
# ## The leakage table
#
# Every method of the profile x every attack that applies to it, with the three references on the same private
# images. A per-class statistic is scored against its best match among the client's images of that class (does it
# reveal one particular image?); a batch reconstruction image by image against the best match of its label; the
# imprint's bins against the best match among all the client's images. `label_acc`: the held-out classifier's accuracy
# on the reconstructions. SSIM std is over seeds (blank with one seed).
#
# The ranking uses the **realistic attacks** only, those a server meets in a real round: the gradient inversion of the
# client's real batch and local steps, the imprint, the white-box feature inversion and the decoder. The gradient
# inversion of a one-image update (iDLG, "batch 1") is an **upper bound** no real round offers: it is not ranked, its
# rows follow the ranked ones and each method's rows carry it in their own column (`upper bound ssim`). The headline
# first: one row per method, its best realistic attack.

# %%
P.show_headline(nb)

# %%
P.show_leakage(nb)

# %%
# NBVAL_CHECK_OUTPUT
P.check_leakage(nb)

# %% [markdown]
# ## What the attacks reconstruct
#
# The numbers above as pictures: for each attack family one grid (the realistic ones first, then the batch-1 upper
# bound), one row per method, grouped by what the server holds. Each row shows up to 8 of the attack's reconstructions
# (evenly spaced over them, not chosen by score) under the client's training image each one was scored against, with
# that pair's SSIM under it; the row's label gives the mean SSIM over all its reconstructions, the leakage table's
# number (first seed). The pictures come from the same attack calls as the table's scores, kept with them as a value
# derived from the run (`privacy-pictures-<hash>` beside `privacy-attacks-<hash>`), so they are drawn again from the run
# archive without the model.

# %%
P.fig_reconstructions(nb)

# %% [markdown]
# ## Samples per prototype
#
# Two attacks (white-box inversion through a trained client extractor, and the decoder with query access and
# auxiliary data) on statistics averaged over n images of one class, as a client with n samples of a class uploads them: the class mean (a prototype), two k-means centroids (MP-FedCL) or
# two mixture-component means (GFPL). n = 1 is a single image's own feature, the upper bound. Each image is scored
# against the reconstruction of its own statistic.

# %%
P.fig_samples_per_prototype(nb)

# %% [markdown]
# ## The defence and its price
#
# Two defences, each a run config's `defense:` block. **Clip + noise on the uploads**
# (`fedlib.privacy.defense.defend_upload`): the model update as a whole to norm C with N(0, (sigma C)^2) per coordinate
# (DP-FedAvg's client-level mechanism), every row of a feature statistic to norm C with the same noise; epsilon is
# Opacus's RDP accountant for one release per round at sample rate 1. **DP-SGD** where the model is the upload
# (`mechanism: dp_sgd`, `fedlib.privacy.dpsgd`): Opacus clips each sample's gradient in local training and noises
# the batch sum; epsilon is per sample, for the least-protected client, with the shuffled batches accounted as
# Poisson sampling at rate batch / samples. Each noise level is a run trained under the defence (accuracy: its last
# round, each method's inference rule); the best attack's SSIM is on that run's upload.

# %%
P.fig_utility(nb)

# %% [markdown]
# ### The reconstructions under the defence
#
# The same pictures for the utility methods' runs under clip + noise on the uploads, each at the largest noise
# multiplier whose accuracy stays within 3 points of its undefended run (a method where no noise level does is shown
# undefended, and says so).

# %%
P.fig_reconstructions_defended(nb)

# %% [markdown]
# ## Claims ledger
#
# The papers' privacy claims, our evidence and a verdict by `fedlib.claims`' one rule: a short profile or one seed
# gives "inconclusive" whatever the numbers say; what the declared messages fix is "by construction".

# %%
P.show_ledger(nb)

# %% [markdown]
# ## What would decide the open claims
#
# The evidence planner (`python -m fedlib evidence`) on this ledger: for each inconclusive claim, why it is open (a
# margin within the seed spread, one seed, or a curve still rising under the converged profile) and what would decide
# it, cheapest first, in CPU-hours estimated from the archived runs' own seconds per round.

# %%
nb.evidence()

# %%
P.closing_note(nb)
