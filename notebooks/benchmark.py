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
# # One benchmark across the five papers: every method on the same splits, metric and budget
#
# **How to run it.** Open it in JupyterLab (README, "Study a paper interactively") and Run All. Choose the profile in
# the parameters cell (`profile = ...`) or for the session with `FEDLIB_PROFILE=<profile> jupyter lab ...`. On 2 CPU
# cores with an empty results folder: **smoke** about a minute (four methods on two settings; its numbers mean
# nothing), **quick** about 30 minutes (every method, one seed, 5 rounds on 2% of the data: not converged), and
# **converged** about 21 hours in the background from an empty archive (`python -m fedlib.papers.benchmark --profile
# converged`; its runs are archived, so a fresh clone reads them from `archive/` instead of training). Finished runs
# are cached in `results/`, so a second Run All only reads them.
#
# Each paper notebook compares one paper's method with that paper's baselines on that paper's setting. This one asks
# the question a researcher brings: **which prototype method should I use, and at what cost?** Every registered
# method runs on every setting it supports:
#
# - **PFLlib Pat and Dir(0.1)**: PFLlib's Fashion-MNIST protocol (20 clients, the pooled data split 75/25 per
#   client, pathological 2 classes per client or Dirichlet(0.1), its 4-layer CNN, SGD lr 0.005, batch 10, one
#   local epoch), the field's common ground; FedIC's Pat / Pra settings are the same, so its runs are shared;
# - **FedMPS Table II**: the n-way k-shot split (n 3, k 100) with FedProto's Fashion CNN; FedMPS's Table III runs
#   are shared;
# - **heterogeneous models**: ProtoNorm's Table 1 protocol (the `ht0_lite` family, one architecture per client)
#   for the methods that upload no whole model; ProtoNorm's Table 1 runs are shared.
#
# **Metric**: PFLlib's. Each client's model on its own test split, sample-weighted, best round (the last round
# beside it); each method by the rule its own paper reports (head, or nearest global prototype), named per row.
# Decisions: [docs/benchmark.md](../docs/benchmark.md). PFLlib's published numbers are reference data from
# `params/benchmark/paper.yaml`, shown beside ours with both budgets stated.

# %% tags=["parameters"]
import os

profile = os.environ.get("FEDLIB_PROFILE", "quick")  # smoke | quick | converged | paper
methods = None        # e.g. ["fedavg", "fedproto", "fedmps"]; None: the profile's (quick and longer: every method)
seeds = None          # e.g. [0, 1, 2]; None: the profile's
rounds = None         # every run's rounds, e.g. 20; None: the profile's
workers = None        # runs in parallel (default: one per CPU core; a small grid, as smoke's, in the kernel)
device = None         # "cpu", "cuda" or None (auto: CUDA when present)
backend = None        # "local", "ray" or None ($FEDLIB_BACKEND, else local): where the grids train
method_file = None    # your method, e.g. "../docs/method_template.py": ranked against the archived benchmark at the end
method_rule = None    # the rule your method is scored by (one of its RULES); None: its head

# %%
from fedlib import yours as Y
from fedlib.papers import benchmark as B

nb = B.notebook(profile, methods=methods, seeds=seeds, rounds=rounds, workers=workers, device=device, backend=backend)
Y.attach(nb, method_file, method_rule, rounds=rounds, seeds=seeds, methods=methods, device=device)

# %% [markdown]
# ## Settings
#
# What every method of a setting shares. A method missing from a setting is listed below it with the reason.
#
# One budget for all: a paper study's per-method training changes are not applied (FedMPS's 5 local epochs for
# FedNTD, lr 0.05 for FedGKD). A setting gives a method its own entry where the shared study's differs
# (`settings.<setting>.methods` in `params/benchmark/experiments.yaml`): on FedMPS Table II, FedAvg and FedProx
# average unweighted (the FedMPS code) and FedProto is FedMPS's; on the heterogeneous models FedProto is
# ProtoNorm's; on Pat and Dir(0.1), FedProc contrasts L2-normalised features (`normalize: true`), because PFLlib's
# CNN does not normalise them: FedProc's contrast is defined on unit vectors, and on the raw features its dot
# products over the temperature run into the thousands (the first runs, before the loss took a log-sum-exp, went
# NaN in round 2).

# %%
B.show_settings(nb)

# %%
# NBVAL_CHECK_OUTPUT
B.print_grid(nb)

# %% [markdown]
# ## All runs
#
# Runs the paper studies already made under the same config (the same run id) are read, not trained again.

# %%
B.results(nb)

# %% [markdown]
# ## The ranked table
#
# Mean rank within each (setting, seed) block (1 = best), per setting and overall; per setting the best round's
# mean ± std over seeds and the last round's mean (%).

# %%
B.show_ranked(nb)

# %% [markdown]
# ## Critical-difference diagram
#
# Friedman's test over the (setting, seed) blocks that every method completed, and the Nemenyi critical difference:
# methods joined by a bar are not told apart at alpha 0.05. The first diagram takes every setting, so only the
# methods that also run with heterogeneous models; the second takes the settings with one model for all, where
# every method but FedMPS (which needs a low-level feature map) runs on each.

# %%
B.fig_cd(nb)

# %% [markdown]
# ## Accuracy against cost
#
# Floats sent per round (uploads plus broadcasts, all clients, measured from the messages) and seconds per round
# (median, the machine that made the run); the Pareto front joins the methods no other beats on both.

# %%
B.figs_costs(nb)

# %% [markdown]
# ## PFLlib's published numbers beside ours
#
# PFLlib's leaderboard ran all of Fashion-MNIST for 2,000 rounds; our budget is in the caption.

# %%
B.show_pflib(nb)

# %% [markdown]
# ## The anchor: all of the data, against PFLlib's curve
#
# FedAvg and FedProto on PFLlib's pathological split with all of Fashion-MNIST, one seed, for the rounds 2 CPU cores
# allow (the converged profile), drawn against PFLlib's 2,000-round numbers. It separates what our reduced data
# fraction costs from what the shorter budget costs.

# %%
B.show_anchor(nb)

# %% [markdown]
# ## Top five per setting

# %%
B.show_top(nb)

# %% [markdown]
# ## Claims ledger
#
# The papers' cross-cutting claims on common ground, judged by the one verdict rule (`fedlib.claims`): "supported"
# needs the converged profile or longer and a margin beyond the seed spread. Each paper's method is judged twice: in
# its own paper's kind of setting, and on the other settings it runs on, against the strongest other method of each.

# %%
B.show_ledger(nb)

# %% [markdown]
# ## What would decide the open claims
#
# The evidence planner (`python -m fedlib evidence`) on this ledger: for each inconclusive claim, why it is open (a
# margin within the seed spread, one seed, or a curve still rising under the converged profile) and what would decide
# it, cheapest first, in CPU-hours estimated from the archived runs' own seconds per round.

# %%
nb.evidence()

# %% [markdown]
# ## Your method
#
# With `method_file` set in the parameters cell (a method file anywhere on disk, or an installed entry point of group
# `fedlib.methods`), the set-up cell put it through the contract check and this cell trains it on every setting its
# messages allow, under this profile's budget (smoke: 2 rounds, quick: 5, converged: 100 and three seeds), then ranks
# it beside every built-in method's archived converged run **read at the same round**: the ranked table, where it
# lands, the critical-difference diagrams and the accuracy-vs-cost fronts with your method highlighted, and the claim
# "it beats every other method" per setting under the verdict rule. Its runs are cached like every other; an edited
# file gets new runs. How to write one and how to read this: [docs/your_method.md](../docs/your_method.md).

# %%
Y.show(nb)
