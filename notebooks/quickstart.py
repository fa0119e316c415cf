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
# # Quickstart: one setting, two methods, then your own method against the benchmark
#
# **How to run it.** Open it in JupyterLab (README, "Study a paper interactively") and Run All. Choose the profile in the parameters cell below (`profile = ...`) or for the whole session with `FEDLIB_PROFILE=<profile> jupyter lab ...`. Time on 2 CPU cores with an empty results folder: **smoke** about a minute (measured 2026-12-03: about 45 CPU-seconds for the whole notebook, which trains on one thread; its numbers mean nothing), **quick** a few minutes (the default). The longer profiles run as quick here: this notebook is for minutes, and the evidence for your method comes from `python -m fedlib.yours --method my_method.py --profile converged`. Finished runs are cached in `results/`, so a second Run All only reads them.
#
# What it does, one call per cell (the code is in `fedlib/quickstart.py`):
#
# 1. **A setting**: PFLlib's Fashion-MNIST protocol with a Dirichlet(0.1) label split, one of the benchmark's four settings (`params/benchmark/experiments.yaml`), and its partition;
# 2. **two methods**: FedAvg (the clients train one shared model, the server averages it) and FedProto (each client keeps its own model and shares one feature prototype per class), trained for a few rounds with a progress bar, and their accuracy curves;
# 3. **your method**: a method file from anywhere on disk (by default the 20-line template `docs/method_template.py`) goes through the contract check, trains on every benchmark setting its messages allow, and is ranked beside every built-in method's archived runs, every method read at the same round: the ranked table, where it lands, the critical-difference diagram, the accuracy-vs-communication front, and what the verdict rule says of "better".
#
# To write your own method, copy `docs/method_template.py` anywhere, change it, and point `method_file` at it: [docs/your_method.md](../docs/your_method.md) explains the contract, the settings, the table and the diagram.

# %% tags=["parameters"]
import os

profile = os.environ.get("FEDLIB_PROFILE", "quick")  # smoke | quick (converged and paper run as quick here)
rounds = None         # FedAvg's and FedProto's rounds, e.g. 10; None: the profile's (smoke 2, quick 5)
method_file = None    # your method file, e.g. "path/to/my_method.py"; None: docs/method_template.py
method_rule = None    # the rule your method is scored by (one of its RULES); None: its head
workers = None        # runs in parallel (default: one per CPU core; a small grid, as smoke's, in the kernel)
device = None         # "cpu", "cuda" or None (auto: CUDA when present)
backend = None        # "local", "ray" or None ($FEDLIB_BACKEND, else local): where the runs train

# %%
from fedlib import quickstart as Q

qs = Q.notebook(profile, rounds=rounds, method_file=method_file, method_rule=method_rule, workers=workers,
                device=device, backend=backend)

# %% [markdown]
# ## A setting
#
# A setting is everything the methods compared on it share: the data, how it is split over the clients, the model, the local optimiser and the rounds. Every client trains on its own part and is tested on its own test split.

# %%
Q.show_setting(qs)

# %%
# NBVAL_CHECK_OUTPUT
Q.check_partition(qs)

# %% [markdown]
# Dirichlet(0.1) gives each client a few dominant classes in very different amounts: the label skew that prototype methods were made for.

# %%
Q.fig_partition(qs)

# %% [markdown]
# ## FedAvg and FedProto
#
# One progress bar counts the rounds of both runs. A run is (config, seed): its id hashes the config, so running this cell again reads the finished runs instead of training them; an interrupted run resumes from its last round. Accuracy is PFLlib's: each client's model on its own test split, sample-weighted, each method by the rule its paper reports (FedAvg its classifier head, FedProto the nearest global prototype).

# %%
Q.run_methods(qs)

# %%
Q.fig_curves(qs)

# %% [markdown]
# ## Your method against the archived benchmark
#
# The method file was loaded and checked in the set-up cell: a method that breaks the contract (a missing hook, a message off its declared shape, a loss that is not finite) stopped the notebook there with one line. Here is what the check found and on which of the benchmark's settings the method can run (a method that sends weights of the client's own model cannot run where the clients' models differ).

# %%
# NBVAL_CHECK_OUTPUT
Q.check_method(qs)

# %% [markdown]
# Its runs train under the profile's budget (smoke: 2 rounds, one seed) on the archived benchmark's settings, and every built-in method is read from its archived run **at the same round**: a 2-round run is ranked against the others' first 2 rounds, never against their 100th. The table is sorted by mean rank (1 = best within each (setting, seed) block); your method's row is marked `(yours)`.

# %%
Q.show_ranked(qs)

# %% [markdown]
# The critical-difference diagram: mean ranks over the (setting, seed) blocks every method in it completed; methods joined by a thick bar are not told apart by the Nemenyi test at alpha 0.05. With one seed and a few settings the critical difference is wide: a diagram that separates methods needs the converged budget's three seeds.

# %%
Q.fig_cd(qs)

# %% [markdown]
# Accuracy against the floats sent per round (uploads plus broadcasts, all clients, counted from the messages): the Pareto front joins the methods no other beats on both.

# %%
Q.fig_costs(qs)

# %% [markdown]
# ## Is it better?
#
# "Better" is a claim, and every claim in this suite gets its verdict from one rule (`fedlib/claims.py`): it needs the converged budget (a short run ranks early training, not methods), at least two seeds, and a margin over the strongest other method beyond the seed spread, with a curve that is still rising projected before it may decide. Under smoke or quick every claim is inconclusive by construction of the rule.

# %%
Q.show_claims(qs)
