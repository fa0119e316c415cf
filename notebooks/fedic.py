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
# # FedIC: intra-class prototype clusters, bias-aware anchors and in-cluster classifier collaboration — reproduction
#
# **How to run it.** Open it in JupyterLab (README, "Study a paper interactively") and Run All. Choose the profile in the parameters cell below (`profile = ...`) or for the whole session with `FEDLIB_PROFILE=<profile> jupyter lab ...`. Time on 2 CPU cores with an empty results folder: **smoke** under a minute (measured 2026-11-28 from an empty results folder: 36 CPU-seconds for the whole notebook, which trains on one thread, so about as many seconds of wall time on an idle 2-core machine plus the kernel's start) (checks that every cell runs; its numbers mean nothing), **quick** about 20 minutes (the default; not converged), **paper** GPU-sized, about 14 hours per run on a CPU; `converged`, the evidence profile, about 10 hours in the background, is read from `archive/`. Finished runs are cached in `results/`, so a second Run All only reads them.
#
# H. Zheng, S. Song, Z. Hu, M. Zheng, L. Yang, A. Xu, R. Zhao, R. Pu, R. Fang, B. Wang, *Intra-Class Unbiased Prototype
# Aggregation and Classifier Collaboration for Personalized Federated Learning*, AAAI 2026. No code was released; the
# method builds on FedPAC (Xu, Tong, Huang, ICLR 2023, arXiv [2306.11867](https://arxiv.org/abs/2306.11867)) and its
# settings are PFLlib's. Every point where the paper is silent or ambiguous, and what this suite does, is in
# [docs/fedic.md](../docs/fedic.md) ("decision N" below refers to it).
#
# The method: every client has a shared extractor and a personal head. For each class the server clusters the
# clients' prototypes into K groups by cosine similarity (Eq. 6), averages each group (Eq. 7) and gives each client the
# prototype of its own group as the anchor it aligns its features to (Eqs. 8-10); the extractors are averaged, and each
# client's head becomes a convex combination of the heads of the clients in its groups, the weights from FedPAC's
# quadratic program (Eqs. 11-12).
#
# What this notebook reproduces on **Fashion-MNIST** (the one dataset of the paper that is offline): **Table 1**'s Pat
# and Pra columns with all nine methods (IFCA, FeSEM, IFCA-CAM, FeSEM-CAM, CFL-GP, FedProto, FedPAC, FedCCFA, FedIC),
# with time and traffic per round measured here; **Fig. 2** (the number of clusters K), **Fig. 4** (the component
# ablation), analogues of **Table 3** (client count) and **Table 4** (Dirichlet concentration) on Fashion-MNIST; the
# prototype-aggregation bias the paper argues from (Eqs. 4-5), the per-class clusters over rounds, the head weights
# (Fig. 3b), class-0 prototype distances (Fig. 3a), a t-SNE/UMAP of the features, and the claims ledger. CIFAR-10/100
# and TinyImageNet run through the same code when their files are in the data root; they are not on this machine.
#
# **Profiles** (`params/fedic/experiments.yaml`): `smoke` (tests), `quick` (the main command: 5% of the data, 15
# rounds, one seed: **not converged**), `paper` (all 70,000 images, 800 rounds, three seeds: GPU-sized). Paper numbers
# are reference data from `params/fedic/paper.yaml`, always shown beside ours.

# %% tags=["parameters"]
import os

profile = os.environ.get("FEDLIB_PROFILE", "quick")  # smoke | quick | paper (params/fedic/experiments.yaml)
methods = None        # Table 1 rows, e.g. ["fedproto", "fedpac", "fedic"]; None: the profile's
seeds = None          # e.g. [0, 1, 2]; None: the profile's
rounds = None         # every run's rounds, e.g. 20; None: the profile's
workers = None        # runs in parallel (default: one per CPU core; a small grid, as smoke's, in the kernel)
embedding = "tsne"    # "tsne" or "umap" for the feature picture
device = None         # "cpu", "cuda" or None (auto: CUDA when present)
backend = None        # "local", "ray" or None ($FEDLIB_BACKEND, else local): where the grids train (fedlib.backends)

# %%
from fedlib.papers import fedic as I

nb = I.notebook(profile, methods=methods, seeds=seeds, rounds=rounds, workers=workers, embedding=embedding,
                device=device, backend=backend)

# %% [markdown]
# ## Setting and deviations from the paper

# %%
I.show_setting(nb)

# %% [markdown]
# ## All runs
#
# Every run of the notebook starts here, longest first, one process per core; finished runs are cache hits and an
# interrupted run resumes. The cells below only read the results.

# %%
nb.run_all(I.all_jobs(nb.plan), desc="FedIC runs")

# %% [markdown]
# ## The Pat and Pra splits

# %%
I.fig_partitions(nb)

# %%
# NBVAL_CHECK_OUTPUT
I.check_partitions(nb)

# %% [markdown]
# ## Table 1: accuracy, time and traffic per round
#
# Sample-weighted personalised accuracy (%), best round (the paper reads as PFLlib's printed maximum), the last round
# beside it. The paper's Fashion-MNIST columns come from 800 rounds on all images: **under `quick` the gap to them is
# mostly the short run**; compare the order of the methods. Time per round is measured on this machine (one thread per
# run) and traffic is counted from the messages (floats up + down, summed over clients, 4 bytes each); the paper's cost
# columns are CIFAR-100's.

# %%
I.show_table1(nb)

# %%
# NBVAL_CHECK_OUTPUT
I.check_communication(nb)

# %% [markdown]
# ## Accuracy per round
#
# Every Table 1 method on the last setting of the profile, round by round (sample-weighted).

# %%
I.fig_accuracy(nb)

# %% [markdown]
# ## Fig. 2: the number of clusters K
#
# FedIC on Pra with K = 1 (every anchor is the global prototype) up to the profile's largest K. The paper: K = 3 best
# on Fashion-MNIST with 20 clients.

# %%
I.fig2(nb)

# %% [markdown]
# ## Fig. 4: the ablation
#
# The paper (CIFAR-100): the baseline with global prototypes and own heads < + clustering < + collaboration < both.
# Here on Fashion-MNIST Pra; the variants are FedIC with K = 1 and/or `collab: none` (decision 3).

# %%
I.fig4(nb)

# %% [markdown]
# ## Table 1 and Figs. 2 and 4 under the converged profile
#
# The evidence the claims ledger judges: the `converged` profile runs Table 1 (both splits, all nine methods), Fig. 2
# and Fig. 4 with three seeds for 100 rounds on 5% of Fashion-MNIST, and checks every curve for a plateau (the
# best-so-far accuracy of the seed-mean curve gains under 0.2 points over the last 20% of rounds; a row that has not
# plateaued says so). Its runs take hours on 2 CPU cores, so this cell reads them, training nothing: from the results
# folder, else from the run archive (`archive/`, committed), so a fresh clone shows them. Under the `converged`
# profile the cells above are this protocol.

# %%
I.show_converged(nb)

# %% [markdown]
# ## Table 3 and Table 4 analogues: more clients, other Dirichlet concentrations
#
# The paper's Tables 3-4 are CIFAR; here the same sweeps on Fashion-MNIST for the profile's sweep methods: the
# client counts on Pat (at 5% of the data a Dir(0.1) split cannot give 40 clients PFLlib's 40 samples each), the
# Dirichlet concentrations with 20 clients. Dirichlet 0.01 cannot give 20 clients 40 samples each on 10 classes
# (decision 9): 0.05 takes its place.

# %%
I.show_tables3_4(nb)

# %% [markdown]
# ## The prototype-aggregation bias (Eqs. 4-5) and the clusters over rounds
#
# The paper's motivation: a client's prototype is far from the global average (Eq. 4) and clustering brings its anchor
# closer. Left: the mean distance of a client's class prototype to the global prototype and to its group's, per round
# (FedIC, Pra). Right: the group of every holder of class 0 in every round (blank: not a holder).

# %%
I.fig_bias(nb)

# %% [markdown]
# ## Fig. 3: class-0 prototype distances and the head weights
#
# (a) Pairwise cosine distances of the holders' class-0 prototypes after training: FedPAC (global prototypes) vs FedIC.
# (b) The head-combination weights beta_ij of the last round: FedPAC (every client) vs FedIC (within groups).

# %%
I.fig3(nb)

# %% [markdown]
# ## Intra-class prototype clusters of every class
#
# Fig. 3a shows class 0; here every class held by at least two clients: the cosine distances between the holders'
# prototypes (those of one more local update after the run, as in Fig. 3a), the clients ordered by the group FedIC's
# server put them in at the last round, white lines between the groups, one colour scale. The table gives, per class,
# the holders, the groups and the mean distance within a group and between groups.

# %%
I.fig_class_distances(nb)

# %% [markdown]
# ## Features and anchors
#
# t-SNE (or UMAP) of four clients' test features under their FedIC models, with the anchors the server sends them
# (stars, coloured by class).

# %%
I.fig_features(nb)

# %% [markdown]
# ## Privacy: the leakage study's attacks on FedIC and its strongest baseline
#
# FedIC's upload (its model, prototypes and the scalar V) and that of its strongest baseline in Table 1 (FedPAC) under
# the suite's attacks. The server here is the leakage study's (`notebooks/privacy.ipynb`, docs/privacy.md): every attack that applies to
# what the method uploads, on the attacked client's next round of the study's own runs (MNIST, 5 clients, the study's
# profile of the same name; `paper` for the long profiles), read through the run cache and the study's derived values,
# so these are the pictures and numbers of the study's leakage table. Each row shows up to 8 reconstructions under the
# client's training image each was scored against, the pair's SSIM under it and the row's mean SSIM in its label;
# realistic attacks first, the batch-1 gradient inversion (an upper bound no real round offers) last.

# %%
I.fig_attack_pictures(nb)

# %% [markdown]
# ## Claims ledger
#
# Every claim of the paper, our evidence (the number and the runs that made it) and a verdict by the one rule of
# `fedlib.claims`: supported or not supported (the paper protocol or the converged profile, and a margin beyond the
# seed spread), inconclusive (a short profile, one seed, or a margin within the spread), by construction (true by
# how the method is built, message counts included: stated, not counted as evidence) or not tested here (and why).
# The paper's numbers are never evidence.

# %%
I.show_ledger(nb)

# %% [markdown]
# ## What would decide the open claims
#
# The evidence planner (`python -m fedlib evidence`) on this ledger: for each inconclusive claim, why it is open (a
# margin within the seed spread, one seed, or a curve still rising under the converged profile) and what would decide
# it, cheapest first, in CPU-hours estimated from the archived runs' own seconds per round.

# %%
nb.evidence()
