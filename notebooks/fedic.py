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
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import torch
from matplotlib.ticker import MaxNLocator

from fedlib import analysis as A
from fedlib import claims as C
from fedlib import backends, logs, plots, report
from fedlib.papers import fedic as I
from fedlib.grid import run_many
from fedlib.runner import build, load_rounds, load_state

torch.set_num_threads(1)
logs.to_stdout()  # fedlib's notes (data source, warnings) as plain text, not red stderr
backends.use(backend)  # local processes, or Ray with --backend ray / FEDLIB_BACKEND=ray
pd.set_option("display.width", 160)
pd.set_option("display.max_colwidth", None)  # long claims and evidence wrap instead of ending in "..."
plan = I.load_plan(profile, methods=methods, seeds=seeds, rounds=rounds, device=device)
paper = report.load_paper("fedic")["tables"]
L = plan.label
seed0 = plan.seeds[0]
section = report.ReportSection("fedic", profile, title=report.load_paper("fedic")["title"], seeds=plan.seeds,
                               rounds=f"{plan.rounds} (every method)", device=I.config(plan, "fedic")["device"])
print(plan.setting())

# %% [markdown]
# ## Setting and deviations from the paper

# %%
cfg0 = I.config(plan, "fedic")
frac = plan.settings["fraction"]
rows = {
    "data": ("FMNIST, CIFAR-10, CIFAR-100, TinyImageNet", "Fashion-MNIST" + ("" if frac == 1 else
             f": a stratified {100 * frac:g}% of the pooled 70,000 images ({int(70000 * frac):,})")),
    "split": ("Pat, Pra (Dir 0.1); not detailed", "PFLlib: pooled train + test, 20 clients, 75/25 per client; Pat 2 "
              "classes per client, Pra Dir(0.1) with >= 40 samples per client (decision 9)"),
    "model": ("CNN", "PFLlib's FedAvgCNN (d = 512), every method"),
    "optimiser": ("SGD lr 0.005, batch 10, E = 1", "the same, no momentum; FedPAC/FedIC: one head epoch, then E = 1"),
    "rounds": ("T = 800", f"{plan.rounds}" + ("" if plan.rounds >= 800 else " (not converged)")),
    "FedIC": ("K = 3 (Fashion-MNIST), lam not given", f"K = {cfg0['algorithm']['K']}, lam {cfg0['algorithm']['lam']:g} "
              "(nn.MSELoss), agglomerative clusters (cosine), QP head weights (decisions 1-7)"),
    "runs": ("not stated", f"{len(plan.seeds)} (seed{'s' if len(plan.seeds) > 1 else ''} "
             f"{', '.join(map(str, plan.seeds))}); the partition is fixed (seed 1, PFLlib)"),
    "reported accuracy": ("test accuracy", "PFLlib's: every client's model on its own test split, total correct over "
                          "total samples, best round (last round beside it); FedProto: nearest global prototype"),
}
settings_df = pd.DataFrame(rows, index=["paper", f"this run ({profile})"]).T
section.text("**Setting: paper vs this run.**\n\n" + report.to_markdown(settings_df))
settings_df

# %% [markdown]
# ## All runs
#
# Every run of the notebook starts here, longest first, one process per core; finished runs are cache hits and an
# interrupted run resumes. The cells below only read the results.

# %%
jobs = I.all_jobs(plan)
print(f"{len(jobs)} runs ({sum(c['train']['rounds'] for c, _ in jobs)} rounds in all)")
_ = run_many(jobs, workers=workers, desc="FedIC runs")

# %% [markdown]
# ## The Pat and Pra splits

# %%
parts = {}
fig, axes = plt.subplots(1, len(plan.settings["partitions"]), figsize=(6 * len(plan.settings["partitions"]), 4),
                         squeeze=False)
for ax, p in zip(axes[0], plan.settings["partitions"]):
    d, _, _ = build(I.config(plan, "fedic", p), seed0)
    parts[p] = d.partition
    plots.partition_bubbles(d.partition, ax=ax, title=plan.partition_label(p))
section.figure(fig, "Training samples per client (x) and class (y), bubble area = count", name="partitions")
plt.show()

# %%
# NBVAL_CHECK_OUTPUT
for p, part in parts.items():
    n_tr, n_te = part.counts.sum(1), part.test_counts.sum(1)
    least = int(min(40, (n_tr + n_te).sum() / len(n_tr) / 2))   # PFLlib's least_samples (decision 9)
    print(f"{p}: {len(n_tr)} clients, each with a 25% test share (+- 1 sample):",
          bool((np.abs(n_te - 0.25 * (n_tr + n_te)) <= 1).all()), f"| every client >= {least} samples:",
          bool((n_tr + n_te >= least).all()))
    if p == "pat":
        print("   Pat: 2 classes per client:", bool(((part.counts > 0).sum(1) == 2).all()),
              "| holders per class:", sorted(set((part.counts > 0).sum(0).tolist())))

# %% [markdown]
# ## Table 1: accuracy, time and traffic per round
#
# Sample-weighted personalised accuracy (%), best round (the paper reads as PFLlib's printed maximum), the last round
# beside it. The paper's Fashion-MNIST columns come from 800 rounds on all images: **under `quick` the gap to them is
# mostly the short run**; compare the order of the methods. Time per round is measured on this machine (one thread per
# run) and traffic is counted from the messages (floats up + down, summed over clients, 4 bytes each); the paper's cost
# columns are CIFAR-100's.

# %%
t1_cfgs = I.table1_configs(plan)
t1 = I.run(t1_cfgs, workers=workers, desc="Table 1")
t1_recs = {k: load_rounds(c, seed0) for k, c in t1_cfgs.items()}
t1_cells = I.cells(plan, t1, t1_recs)
cmp = report.compare(paper["table1"], I.ours_table(plan, t1_cells))
last = {(m, f"{p}_fmnist"): f"{c['last']:.2f}" for (p, m), c in t1_cells.items()}
if cmp.index.nlevels == 1:
    cmp.index = pd.MultiIndex.from_tuples([(r, f"{plan.settings['partitions'][0]}_fmnist") for r in cmp.index])
cmp["ours, last round"] = [last.get(i, "—") for i in cmp.index]
cmp["best round"] = [t1_cells[(c[:3], m)]["best_round"] if (c[:3], m) in t1_cells else "—" for m, c in cmp.index]
cmp.index = pd.MultiIndex.from_tuples([(L(m), c) for m, c in cmp.index], names=["method", "setting"])
if profile != "paper":   # the gap to the paper is mostly the short run: the column says so
    cmp = cmp.rename(columns={"diff": f"diff ({profile}: not converged)"})
cost_df = pd.DataFrame({L(m): {"s / round (ours)": f"{c['seconds']:.2f}", "MB / round (ours)": f"{c['megabytes']:.2f}",
                               "s / round (paper, CIFAR-100)": paper["table1"]["seconds_per_round"][m],
                               "MB / round (paper, CIFAR-100)": paper["table1"]["megabytes_per_round"][m]}
                        for (p, m), c in t1_cells.items() if p == plan.settings["partitions"][-1]}).T
note = "" if profile == "paper" else " **Not the paper's protocol: " + plan.setting() + ".**"
section.text("**Table 1, Fashion-MNIST: accuracy (%), best round, sample-weighted.**" + note + "\n\n"
             + report.to_markdown(cmp))
section.text(f"**Table 1 cost columns ({plan.partition_label(plan.settings['partitions'][-1])}, first seed, this "
             "machine).**\n\n" + report.to_markdown(cost_df))
section.record(table1={f"{p}/{m}": {k: v for k, v in c.items()} for (p, m), c in t1_cells.items()})
display(cmp)
cost_df

# %%
# NBVAL_CHECK_OUTPUT
p0 = plan.settings["partitions"][-1]
part = parts[p0]
model = build(cfg0, seed0)[1].new_model(None)
P = sum(v.numel() for v in model.state_dict().values() if v.is_floating_point())
held = int((part.counts > 0).sum())
M = part.num_clients
up = {m: t1_recs[(p0, m)][0]["up_params"] for m in ("fedproto", "fedpac", "fedic") if (p0, m) in t1_recs}
print("model floats:", P)
if "fedic" in up:
    print(f"FedIC uplink = {M} models + one 512-d prototype per held class:", up["fedic"] == M * P + 512 * held)
if "fedpac" in up:
    print("FedPAC uplink = FedIC's + its 10 x 512 h statistics per client:", up["fedpac"] == M * P + 512 * held
          + M * 10 * 512)
if "fedproto" in up:
    print("FedProto uplink = prototypes only:", up["fedproto"] == 512 * held)

# %% [markdown]
# ## Accuracy per round
#
# Every Table 1 method on the last setting of the profile, round by round (sample-weighted).

# %%
fig, axes = plt.subplots(1, len(plan.settings["partitions"]), figsize=(7 * len(plan.settings["partitions"]), 4),
                         squeeze=False)
for ax, p in zip(axes[0], plan.settings["partitions"]):
    curves = {L(m): t1_recs[(p, m)] for m in plan.table1_methods()}
    plots.accuracy_curves(curves, {L(m): plan.metric(m) for m in plan.table1_methods()}, ax=ax, stat="weighted",
                          ylabel="personalised accuracy (%), sample-weighted")
    ax.set_title(plan.partition_label(p))
section.figure(fig, "Accuracy per round of every Table 1 method", name="accuracy_per_round")
plt.show()

# %% [markdown]
# ## Fig. 2: the number of clusters K
#
# FedIC on Pra with K = 1 (every anchor is the global prototype) up to the profile's largest K. The paper: K = 3 best
# on Fashion-MNIST with 20 clients.

# %%
k_cfgs = I.k_configs(plan)
k_cells = I.cells(plan, I.run(k_cfgs, workers=workers, desc="Fig. 2"))
fig, ax = plt.subplots(figsize=(5, 3.5))
ax.plot(list(k_cells), [c["best"] for c in k_cells.values()], marker="o", label="best round")
ax.plot(list(k_cells), [c["last"] for c in k_cells.values()], marker="s", label="last round")
ax.set(xlabel="K (clusters per class)", ylabel="accuracy (%)", title="Fig. 2 on Fashion-MNIST (Pra)")
ax.set_xticks(list(k_cells))
ax.legend()
section.figure(fig, "Fig. 2: FedIC's accuracy over K (Pra)", name="fig2_k")
plt.show()
print(", ".join(f"K {k}: {c['best']:.2f} (last {c['last']:.2f})" for k, c in k_cells.items()))

# %% [markdown]
# ## Fig. 4: the ablation
#
# The paper (CIFAR-100): the baseline with global prototypes and own heads < + clustering < + collaboration < both.
# Here on Fashion-MNIST Pra; the variants are FedIC with K = 1 and/or `collab: none` (decision 3).

# %%
ab_cfgs = I.ablation_configs(plan)
ab_cells = I.cells(plan, I.run(ab_cfgs, workers=workers, desc="Fig. 4"))
fig, ax = plt.subplots(figsize=(6, 4))
plots.accuracy_curves({L(v): load_rounds(c, seed0) for v, c in ab_cfgs.items()}, "acc_head", ax=ax, stat="weighted",
                      ylabel="accuracy (%), sample-weighted")
ax.set_title("Fig. 4 on Fashion-MNIST (Pra)")
section.figure(fig, "Fig. 4: the ablation, accuracy per round (Pra)", name="fig4_ablation")
plt.show()
ab_df = pd.DataFrame({L(v): {"best": round(c["best"], 2), "last": round(c["last"], 2)} for v, c in ab_cells.items()}).T
section.text("**Fig. 4 ablation (accuracy %, Pra).**\n\n" + report.to_markdown(ab_df))
ab_df

# %% [markdown]
# ## Table 3 and Table 4 analogues: more clients, other Dirichlet concentrations
#
# The paper's Tables 3-4 are CIFAR; here the same sweeps on Fashion-MNIST for the profile's sweep methods: the
# client counts on Pat (at 5% of the data a Dir(0.1) split cannot give 40 clients PFLlib's 40 samples each), the
# Dirichlet concentrations with 20 clients. Dirichlet 0.01 cannot give 20 clients 40 samples each on 10 classes
# (decision 9): 0.05 takes its place.

# %%
sc_cells = I.cells(plan, I.run(I.scale_configs(plan), workers=workers, desc="Table 3"))
al_cells = I.cells(plan, I.run(I.alpha_configs(plan), workers=workers, desc="Table 4"))
sc_df = pd.DataFrame({f"{n} clients": {L(m): round(c["best"], 2) for (nn, m), c in sc_cells.items() if nn == n}
                      for n in plan.settings["clients"]})
al_df = pd.DataFrame({f"Dir {a:g}": {L(m): round(c["best"], 2) for (aa, m), c in al_cells.items() if aa == a}
                      for a in plan.settings["alphas"]})
section.text(f"**Table 3 analogue (Fashion-MNIST {plan.partition_label(plan.settings['clients_partition'])}, "
             "accuracy %, best round).**\n\n" + report.to_markdown(sc_df)
             + "\n\n**Table 4 analogue (Fashion-MNIST, accuracy %, best round).**\n\n" + report.to_markdown(al_df))
display(sc_df)
al_df

# %% [markdown]
# ## The prototype-aggregation bias (Eqs. 4-5) and the clusters over rounds
#
# The paper's motivation: a client's prototype is far from the global average (Eq. 4) and clustering brings its anchor
# closer. Left: the mean distance of a client's class prototype to the global prototype and to its group's, per round
# (FedIC, Pra). Right: the group of every holder of class 0 in every round (blank: not a holder).

# %%
fic = t1_cfgs[(p0, "fedic")]
recs_ic = t1_recs[(p0, "fedic")]
st_ic = load_state(fic, seed0)
fig, axes = plt.subplots(1, 2, figsize=(12, 4))
rr = [r["round"] for r in recs_ic]
axes[0].plot(rr, [r["server"]["bias_global"] for r in recs_ic], marker="o", label="to the global prototype (Eq. 3)")
axes[0].plot(rr, [r["server"]["bias_cluster"] for r in recs_ic], marker="s", ls="--", label="to its group's prototype (Eq. 7)")
axes[0].set(xlabel="round", ylabel="mean L2 distance", title="prototype aggregation bias (FedIC)")
axes[0].legend(fontsize=8)
hist = st_ic.server["history"][:, 0].float().cpu().numpy()          # (rounds, clients), -1: not a holder
im = axes[1].imshow(np.ma.masked_less(hist.T, 0), aspect="auto", cmap="tab10", vmin=0, vmax=9, interpolation="nearest",
                    extent=(0.5, hist.shape[0] + 0.5, hist.shape[1] - 0.5, -0.5))  # columns are rounds 1..R
axes[1].set(xlabel="round", ylabel="client", title="class-0 groups per round")
for ax in axes:
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
section.figure(fig, "Prototype aggregation bias per round and the class-0 groups over rounds (FedIC)",
               name="bias_clusters")
plt.show()
bias = {"global": recs_ic[-1]["server"]["bias_global"], "cluster": recs_ic[-1]["server"]["bias_cluster"]}
changes = int((np.diff(hist, axis=0) != 0).sum())
print(f"last round: to global {bias['global']:.3f}, to group {bias['cluster']:.3f}; class-0 group changes over "
      f"the run: {changes}")

# %% [markdown]
# ## Fig. 3: class-0 prototype distances and the head weights
#
# (a) Pairwise cosine distances of the holders' class-0 prototypes after training: FedPAC (global prototypes) vs FedIC.
# (b) The head-combination weights beta_ij of the last round: FedPAC (every client) vs FedIC (within groups).

# %%
st_pac = load_state(t1_cfgs[(p0, "fedpac")], seed0) if (p0, "fedpac") in t1_cfgs else None
fig, axes = plt.subplots(2, 2, figsize=(11, 9))
for col, (name, st) in enumerate((("FedPAC", st_pac), ("FedIC", st_ic))):
    if st is None:
        continue
    dist, ids = I.prototype_distances(st, 0)
    plots.distance_heatmap(dist, [str(i + 1) for i in ids], ax=axes[0, col],
                           title=f"(a) {name}: class-0 prototypes, cosine distance", label="1 - cos")
    beta = st.server["beta"].cpu().numpy()
    plots.distance_heatmap(beta, [str(i + 1) for i in range(len(beta))], ax=axes[1, col],
                           title=f"(b) {name}: head weights beta (row: receiving client)", label="beta")
section.figure(fig, "Fig. 3: class-0 prototype distances (a) and head weights (b), FedPAC vs FedIC", name="fig3")
plt.show()
beta_ic = st_ic.server["beta"].cpu().numpy()
print(f"FedIC: mean nonzero weights per client {(beta_ic > 0).sum(1).mean():.1f} of 20, mean self weight "
      f"{np.diag(beta_ic).mean():.3f}")

# %% [markdown]
# ## Features and anchors
#
# t-SNE (or UMAP) of four clients' test features under their FedIC models, with the anchors the server sends them
# (stars, coloured by class).

# %%
feats, ys, anchors, anchor_y = [], [], [], []
for cid in range(4):
    test = st_ic.data.test[cid]
    with torch.no_grad():
        feats.append(st_ic.features(cid, test.x)["high"].cpu().numpy())
    ys.append(test.y.cpu().numpy())
    msg = st_ic.message(cid)
    anchors.append(msg["protos"].cpu().numpy())
    anchor_y.append(msg["classes"].cpu().numpy())
f, y = np.concatenate(feats), np.concatenate(ys)
keep = np.random.default_rng(0).permutation(len(y))[:plan.settings["tsne_points"]]
an, ay = np.concatenate(anchors), np.concatenate(anchor_y)
emb = A.embed_2d(np.concatenate([f[keep], an]), embedding)
fig, ax = plt.subplots(figsize=(6, 5))
plots.embedding_scatter(emb[:len(keep)], y[keep], ax=ax, num_classes=10, title="FedIC: clients 1-4, features")
cmap = plt.get_cmap("tab10")
ax.scatter(emb[len(keep):, 0], emb[len(keep):, 1], marker="*", s=200, c=[cmap(int(c)) for c in ay], ec="k")
section.figure(fig, f"{embedding} of four clients' features with their anchors (stars)", name="features")
plt.show()

# %% [markdown]
# ## Claims ledger
#
# Every claim of the paper, our evidence (the number and the runs that made it) and a verdict from an explicit rule on
# our numbers: supported, not supported, or not tested here (and why). The paper's numbers are never evidence.

# %%
ledger = I.ledger(plan, {"table1": t1_cells, "k": k_cells, "ablation": ab_cells, "scale": sc_cells,
                         "alphas": al_cells, "bias": bias})
ledger_df = C.write(section, ledger)
print(C.summary_line(ledger))
print("report section:", section.write())
ledger_df
