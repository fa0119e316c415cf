"""The leakage study's pictures and headline ranking (fedlib/papers/privacy.py, fedlib/privacy/pictures.py: images
kept as small PNG strips in JSON, the grid's shape and labels), the paper notebooks' attack figures drawn from the
study's runs, and the prototype-distance heatmaps of GFPL and FedIC.

The figures' tests train the smoke profile in a temporary output root (``FEDLIB_ROOT``: results and figures there)
and check the grid's shape (one row per method and attack, up to 8 images a row) and that the SSIM printed in each
row's label is the leakage table's number for that attack."""

from __future__ import annotations

import importlib
import json
import math

import matplotlib

matplotlib.use("Agg")

import numpy as np
import pandas as pd
import pytest

from fedlib import report
from fedlib.papers import privacy as P
from fedlib.privacy.rounds import PICTURES
from fedlib.privacy import leakage_table, what_server_holds
from fedlib.privacy.pictures import decode, encode, reconstruction_grid, spread


# -- the pictures' helpers (fedlib/privacy/pictures.py) ----------------------------------------------------------

@pytest.mark.parametrize("channels", [1, 3])
def test_a_strip_round_trips_within_one_grey_level_and_stays_small(channels):
    rng = np.random.default_rng(0)
    images = rng.random((8, 28, 28, channels))
    text = encode(images)
    assert json.loads(json.dumps(text)) == text and text.isascii()
    back = decode(text, 8)
    assert back.shape == images.shape
    assert np.abs(back - images).max() <= 0.5 / 255 + 1e-12
    # noise is the worst case for PNG: 8 grey 28 x 28 images stay about their raw size (6,272 bytes) in base64
    assert len(text) < (12_000 if channels == 1 else 30_000)
    digits = np.zeros((8, 28, 28, 1))
    digits[:, 8:20, 12:16] = 1.0
    assert len(encode(digits)) < 600   # a digit-like image compresses well


def test_a_picture_shows_evenly_spaced_reconstructions():
    assert spread(3, 8) == [0, 1, 2]
    assert spread(111, 8) == [0, 16, 31, 47, 63, 79, 94, 110]
    assert spread(0, 8) == []
    assert spread(9, 8)[0] == 0 and spread(9, 8)[-1] == 8 and len(spread(9, 8)) == 8


def test_the_grid_has_one_row_per_entry_and_prints_each_ssim():
    rng = np.random.default_rng(1)

    def row(label, n, ssim):
        each = list(rng.random(n))
        return {"label": label, "ssim": ssim, "real": rng.random((n, 12, 12, 1)), "recon": rng.random((n, 12, 12, 1)),
                "ssim_each": each}

    groups = [("server holds: model", [row("FedAvg\nB 32, 3 steps", 8, 0.0741), row("FedProx\nB 32, 3 steps", 3, 0.5)]),
              ("server holds: prototypes", [row("FedProto\nstatistic protos", 5, 0.25),
                                            {"label": "LG-FedAvg", "ssim": float("nan"), "recon": None,
                                             "note": "no image"}])]
    fig, layout = reconstruction_grid(groups, "a title")
    assert layout["label"].tolist() == ["FedAvg\nB 32, 3 steps", "FedProx\nB 32, 3 steps", "FedProto\nstatistic protos",
                                        "LG-FedAvg"]
    assert layout["images"].tolist() == [8, 3, 5, 0]
    assert layout["group"].tolist() == ["server holds: model"] * 2 + ["server holds: prototypes"] * 2
    # each image shown twice (the real one, the reconstruction); one SSIM under each reconstruction
    assert sum(1 for ax in fig.axes if ax.images) == 2 * (8 + 3 + 5)
    assert layout["ssim_text"][0] == [f"{v:.2f}" for v in groups[0][1][0]["ssim_each"]]
    assert "mean SSIM 0.074" in layout["text"][0] and "no image" in layout["text"][3]
    shown = {ax.get_xlabel() for ax in fig.axes if ax.images}
    assert set(layout["ssim_text"][1]) <= shown
    # the figure fits a report's width at 120 dpi (8 images a row)
    assert fig.get_size_inches()[0] * 120 <= 1000




# -- the headline ranking --------------------------------------------------------------------------------------

def _res(plan, rows, refs):
    return {"rows": pd.DataFrame(rows), "refs": pd.DataFrame(refs),
            "holds": {m: what_server_holds(m) for m in plan.table_methods()}}


def test_the_leakage_ranking_uses_the_realistic_attacks(tmp_path):
    """FedAvg's batch-1 gradient inversion (iDLG) is the best number of the frame, but no real round offers a one-image
    update: under the realistic attacks FedProto's decoder leaks most, so it heads the ranking; the bound is shown in
    its own column, unranked."""
    plan = P.load_plan("smoke", results_dir=str(tmp_path))
    base = {"psnr": 10.0, "label_acc": 0.5, "images": 8, "seconds": 0.1, "seed": 0}
    rows = [{"method": "fedavg", "attack": "gradient_inversion (batch 1, iDLG label)", "ssim": 0.99, **base},
            {"method": "fedavg", "attack": "gradient_inversion (B 32, 6 steps)", "ssim": 0.20, **base},
            {"method": "fedavg", "attack": "imprint (crafted broadcast)", "ssim": 0.10, **base},
            {"method": "fedproto", "attack": "decoder:protos", "ssim": 0.45, **base},
            {"method": "mpfedcl", "attack": "gradient_inversion (batch 1, iDLG label)", "ssim": 0.95, **base},
            {"method": "mpfedcl", "attack": "decoder:protos", "ssim": 0.30, **base}]
    refs = [{"attack": "reference: class average", "seed": 0, "psnr": 12.0, "ssim": 0.35, "label_acc": 1.0},
            {"attack": "reference: best auxiliary match", "seed": 0, "psnr": 12.0, "ssim": 0.40, "label_acc": np.nan}]
    res = _res(plan, rows, refs)
    # the generic ranking over every row puts the upper bound first: what the table did before
    assert leakage_table(res["rows"]).iloc[0].attack.startswith("gradient_inversion (batch 1")

    table = P.table(plan, res)
    ranked = table[table["rank"] != "—"]
    assert ranked["rank"].tolist() == list(range(1, 7))
    assert ranked[["method", "attack"]].values.tolist() == [
        ["FedProto", "decoder:protos"], ["—", "reference: best auxiliary match"], ["—", "reference: class average"],
        ["MP-FedCL", "decoder:protos"], ["FedAvg", "gradient_inversion (B 32, 6 local steps)"],
        ["FedAvg", "imprint (crafted broadcast)"]]
    assert set(ranked.kind) == {P.REALISTIC, P.REFERENCE}
    bounds = table[table.kind == P.UPPER_BOUND]
    assert (bounds["rank"] == "—").all() and bounds.index.min() > ranked.index.max()   # after the ranked rows
    assert bounds.method.tolist() == ["FedAvg", "MP-FedCL"]
    # each method's realistic rows carry its bound in their own column
    col = table.set_index(["method", "attack"])[P.BOUND_COLUMN]
    assert col[("FedAvg", "imprint (crafted broadcast)")] == 0.99
    assert col[("MP-FedCL", "decoder:protos")] == 0.95
    assert math.isnan(col[("FedProto", "decoder:protos")])
    assert table.iloc[-1].method == "LG-FedAvg" and table.iloc[-1]["rank"] == "—"   # no image attack applies
    assert len(table) == len(rows) + len(refs) + 1

    head = P.headline(plan, res, table)
    assert head[["rank", "method", "best realistic attack"]].values.tolist() == [
        [1, "FedProto", "decoder:protos"], [2, "—", "reference: best auxiliary match"],
        [3, "—", "reference: class average"], [4, "MP-FedCL", "decoder:protos"],
        [5, "FedAvg", "gradient_inversion (B 32, 6 local steps)"],
        ["—", "LG-FedAvg", "no image attack applies (label_inference)"]]
    assert head.set_index("method")[P.BOUND_COLUMN]["FedAvg"] == 0.99
    assert head.set_index("method")["ssim"]["FedAvg"] == 0.20


def test_a_method_with_only_the_upper_bound_is_listed_unranked(tmp_path):
    plan = P.load_plan("smoke", results_dir=str(tmp_path))
    rows = [{"method": "fedavg", "attack": "gradient_inversion (batch 1, iDLG label)", "ssim": 0.99, "psnr": 40.0,
             "label_acc": 1.0, "images": 1, "seconds": 0.1, "seed": 0},
            {"method": "fedproto", "attack": "decoder:protos", "ssim": 0.45, "psnr": 12.0, "label_acc": 0.5,
             "images": 8, "seconds": 0.1, "seed": 0}]
    refs = [{"attack": "reference: class average", "seed": 0, "psnr": 12.0, "ssim": 0.35, "label_acc": 1.0}]
    head = P.headline(plan, _res(plan, rows, refs)).set_index("method")
    assert head.loc["FedAvg", "rank"] == "—" and head.loc["FedAvg", P.BOUND_COLUMN] == 0.99
    assert head.loc["FedAvg", "best realistic attack"] == "no realistic attack reconstructed an image"
    assert head.loc["FedProto", "rank"] == 1


def test_the_attack_kinds_and_families():
    assert P.attack_kind("gradient_inversion (batch 1, known label)") == P.UPPER_BOUND
    for name in ("gradient_inversion (B 32, 4 steps)", "imprint (crafted broadcast)", "feature_inversion:protos",
                 "decoder:low"):
        assert P.attack_kind(name) == P.REALISTIC and P.family(name).kind == P.REALISTIC
    assert P.attack_kind("reference: class average") == P.REFERENCE and P.family("reference: class average") is None
    assert [P.attack_detail(a) for a in ("gradient_inversion (B 32, 4 steps)", "decoder:means",
                                         "imprint (crafted broadcast)")] == ["B 32, 4 steps", "statistic means",
                                                                             "crafted broadcast"]


# -- which runs the paper notebooks and the defended pictures take ----------------------------------------------

@pytest.mark.parametrize("paper, table, method, baseline", [
    ("gfpl", "table1_mnist", "gfpl", "fedproto"), ("protonorm", "table1", "protonorm", "fedkd"),
    ("mpfedcl", "table6", "mpfedcl", "fedproto"), ("fedic", "table1", "fedic", "fedpac")])
def test_each_paper_picture_takes_its_strongest_attackable_baseline(paper, table, method, baseline, tmp_path):
    plan = P.load_plan("smoke", results_dir=str(tmp_path))
    assert P.strongest_baseline(plan, report.load_paper(paper)["tables"][table], method) == baseline
    assert P.study_profile("smoke") == "smoke" and P.study_profile("converged") == "paper"


def test_the_defended_pictures_take_the_largest_noise_within_the_tolerance(tmp_path):
    plan = P.load_plan("quick", results_dir=str(tmp_path))

    def run(acc, diverged=None):
        return [{"metrics": {"acc_head": {"last": acc / 100}, "acc_proto": {"last": acc / 100}},
                 "diverged_at": diverged}]
    accs = {"fedavg": {0.0: 33.6, 0.01: 31.0, 0.1: 20.0, 1.0: None},      # 0.01 within 3 points, 1 diverged
            "fedproto": {0.0: 14.4, 0.01: 14.0, 0.1: 13.0, 1.0: 11.0},    # 0.1 is the largest within 3 points
            "fedmps": {0.0: 50.0, 0.01: 40.0, 0.1: None, 1.0: None},      # none within: undefended
            "gfpl": {0.0: 17.4, 0.01: 17.0, 0.1: 16.0, 1.0: 15.0}}        # all within: the largest, 1
    summaries = {(m, s): run(a if a is not None else math.nan, None if a is not None else 2)
                 for m, v in accs.items() for s, a in v.items()}
    got = P.strongest_defence(plan, summaries)
    assert {m: c["noise"] for m, c in got.items()} == {"fedavg": 0.01, "fedproto": 0.1, "fedmps": 0.0, "gfpl": 1.0}
    assert got["fedavg"]["accuracy"] == pytest.approx(31.0) and got["fedavg"]["undefended"] == pytest.approx(33.6)


def test_the_defence_table_prints_the_noise_the_grid_uses(tmp_path):
    """The table under the defended grid says which noise each row's pictures were made under: a noise multiplier of
    0.001 (FedMPS's in the paper profile) is printed as 0.001, as the grid's label has it, not rounded to 0.0 (which
    reads as "undefended"); the accuracies keep 2 decimals."""
    plan = P.load_plan("quick", results_dir=str(tmp_path))
    chosen = {"fedavg": {"noise": 0.01, "accuracy": 75.4666, "undefended": 72.2666},
              "fedmps": {"noise": 0.001, "accuracy": 84.4666, "undefended": 84.4},
              "fedproto": {"noise": 0.0, "accuracy": 33.0666, "undefended": 33.0666}}
    df = P.defence_table(plan, chosen)
    assert df.index.tolist() == ["FedAvg", "FedMPS", "FedProto"]
    assert df["noise"].tolist() == [0.01, 0.001, 0.0]
    assert df["accuracy"].tolist() == ["75.47", "84.47", "33.07"]
    text = report.to_markdown(df)   # 84.4 keeps its second decimal: the column reads as one precision
    assert "| FedMPS | 0.001 | 84.47 | 84.40 |" in text and "| FedAvg | 0.01 | 75.47 | 72.27 |" in text


def test_the_class_blocks_and_groups_of_a_distance_heatmap():
    import matplotlib.pyplot as plt

    from fedlib import plots

    D = np.random.default_rng(0).random((6, 6))
    fig, ax = plt.subplots()
    plots.distance_heatmap(D, [0, 0, 0, 1, 1, 2], ax=ax, blocks=True, xlabel="component", ylabel="component")
    assert [t.get_text() for t in ax.get_xticklabels()] == ["0", "1", "2"]
    assert sorted({float(line.get_ydata()[0]) for line in ax.lines if line.get_ydata()[0] == line.get_ydata()[1]}
                  ) == [3.0, 5.0]
    assert ax.get_xlabel() == "component"
    fig, ax = plt.subplots()
    plots.distance_heatmap(D[:4, :4], ["2", "7", "3", "9"], ax=ax, groups=[0, 0, 1, 1], cbar=False)
    assert [t.get_text() for t in ax.get_yticklabels()] == ["2", "7", "3", "9"]
    assert {float(line.get_xdata()[0]) for line in ax.lines if line.get_xdata()[0] == line.get_xdata()[1]} == {2.0}
    assert len(fig.axes) == 1   # no colour bar
    plt.close("all")


# -- the figures on the smoke profile --------------------------------------------------------------------------

def _table_ssim(plan, table: pd.DataFrame) -> dict:
    """``{(method label, family, statistic): SSIM}`` of the leakage table's attack rows (a family's gradient
    inversion is one row per method; its name's step count is merged over seeds, so it is left out of the key)."""
    out = {}
    for r in table[table.kind.isin([P.REALISTIC, P.UPPER_BOUND])].itertuples():
        fam = P.family(r.attack)
        out[(r.method, fam.slug, P.attack_detail(r.attack) if ":" in r.attack else "")] = r.ssim
    return out


def _layout_key(label: str, family: str) -> tuple:
    method, detail = label.split("\n")[:2]
    return method, family, detail if detail.startswith("statistic") else ""


@pytest.mark.slow
def test_the_privacy_pictures_are_the_tables_attacks(tmp_path, monkeypatch):
    monkeypatch.setenv("FEDLIB_ROOT", str(tmp_path))
    nb = P.notebook("smoke", workers=0)
    P.run_all(nb)
    res, table = P._leakage(nb)
    figs = P.fig_reconstructions(nb)
    expected = _table_ssim(nb.plan, table)
    layouts = nb.results["pictures_layout"]
    # one grid per attack family present, rows = the methods it applies to
    present = {P.family(a).slug for a in res["rows"].attack}
    assert set(layouts) == present and len(figs) == len(present)
    seen = set()
    for slug, rows in layouts.items():
        frame = pd.DataFrame(rows)
        for r in frame.itertuples():
            key = _layout_key(r.label, slug)
            assert r.ssim == expected[key], key       # the label's SSIM is the table's (one seed: the same number)
            seen.add(key)
        # columns are images: up to 8, as many as the attack reconstructed below that
        n_images = {(nb.label(m), P.family(a).slug): n for m, a, n in zip(res["rows"].method, res["rows"].attack,
                                                                         res["rows"].images, strict=True)}
        assert all(r.images == min(PICTURES, n_images[(r.label.split("\n")[0], slug)]) for r in frame.itertuples())
    assert seen == set(expected)                      # every attack row of the table is drawn
    for fig, rows in zip(figs, layouts.values(), strict=True):
        assert sum(1 for ax in fig.axes if ax.images) == 2 * sum(r["images"] for r in rows)
        assert any(f"mean SSIM {rows[0]['ssim']:.3f}" in t.get_text() for ax in fig.axes for t in ax.texts)
    folder = tmp_path / "results" / "smoke" / "figures" / "privacy"
    assert {f"reconstructions_{s}.png" for s in present} <= {p.name for p in folder.iterdir()}
    # the pictures are kept beside the scores, named by the settings hash, small
    name = P.pictures_name(nb.plan)
    from fedlib.config import run_dir

    kept = [run_dir(c, 0) / "derived" / f"{name}.json" for c in P.table_configs(nb.plan).values()]
    assert all(p.is_file() and p.stat().st_size < 60_000 for p in kept)
    assert name.startswith("privacy-pictures-") and P.attacks_name(nb.plan).startswith("privacy-attacks-")

    # the defended grid: each utility method at its strongest noise within the tolerance, the SSIMs those runs' own
    P.fig_utility(nb)
    shown = P.fig_reconstructions_defended(nb)
    chosen, frame = P._defended_pictures(nb)
    layout = nb.results["defended_layout"]
    assert set(frame.method) <= set(nb.plan.settings["utility_methods"])
    attacker, heading = P.Attacker(nb.plan, 0), {f.heading: f.slug for f in P.FAMILIES}
    expected = {}
    for m, c in chosen.items():   # the scores of the run the row names, as the privacy-utility curve reads them
        noise = c["noise"] or None
        for a in P.attacks(nb.plan, P.config(nb.plan, m, noise), m, 0, attacker, noise):
            expected[(nb.label(m), P.family(a["attack"]).slug, P.attack_detail(a["attack"]))] = a["ssim"]
    assert len(layout) == len(frame) == len(expected)
    for row in layout.itertuples():
        name, detail = row.label.split("\n")[:2]
        method = next(nb.label(m) for m in chosen if name.startswith(nb.label(m) + ","))
        assert row.ssim == expected[(method, heading[row.group], detail)]
    assert len(shown) == 2


@pytest.mark.slow
@pytest.mark.parametrize("paper, method", [("gfpl", "gfpl"), ("protonorm", "protonorm"), ("mpfedcl", "mpfedcl"),
                                           ("fedic", "fedic"), ("fedmps", "fedmps")])
def test_a_paper_notebooks_attack_pictures_are_the_studys(paper, method, tmp_path, monkeypatch):
    monkeypatch.setenv("FEDLIB_ROOT", str(tmp_path))
    M = importlib.import_module(f"fedlib.papers.{paper}")
    nb = M.notebook("smoke", workers=0)
    fig, scores = M.fig_attack_pictures(nb)
    baseline = nb.results["privacy_pictures"]["baseline"]
    layout = nb.results["privacy_pictures"]["layout"]
    # the privacy study's own table for these two methods, from the same runs and derived values
    plan = P.load_plan("smoke", methods=[method, baseline])
    res = P.leakage(plan)
    expected = _table_ssim(plan, P.table(plan, res))
    heading = {f.heading: f.slug for f in P.FAMILIES}
    assert {_layout_key(r.label, heading[r.group]) for r in layout.itertuples()} == set(expected)
    for r in layout.itertuples():
        assert r.ssim == expected[_layout_key(r.label, heading[r.group])]
    assert set(scores.method) == {plan.label(method), plan.label(baseline)}
    assert sum(1 for ax in fig.axes if ax.images) == 2 * layout["images"].sum()
    assert (tmp_path / "results" / "smoke" / "figures" / paper / "privacy_attack_pictures.png").is_file()


@pytest.mark.slow
def test_gfpl_draws_the_fused_components_distances_in_class_blocks(tmp_path, monkeypatch):
    from fedlib.papers import gfpl as G

    monkeypatch.setenv("FEDLIB_ROOT", str(tmp_path))
    nb = G.notebook("smoke", workers=0)
    fig, df = G.fig_distances(nb)
    server = G._gfpl_state(nb).server
    k = len(server["classes"])
    D, gc = G.component_distances(server)
    assert D.shape == (k, k) and np.allclose(D, D.T) and np.allclose(np.diag(D), 0, atol=1e-6)
    assert list(gc) == sorted(gc)
    mesh = fig.axes[0].collections[0]
    assert mesh.get_array().size == k * k
    assert [t.get_text() for t in fig.axes[0].get_xticklabels()] == [str(c) for c in sorted(set(gc.tolist()))]
    assert df.index.tolist() == [str(c) for c in sorted(set(gc.tolist()))] + ["all"]
    assert df["components"].sum() == 2 * k   # per class, and all of them in the last row
    assert fig.axes[0].get_xlabel() and fig.axes[0].get_title()
    assert (tmp_path / "results" / "smoke" / "figures" / "gfpl" / "component_distances.png").is_file()


@pytest.mark.slow
def test_fedic_draws_every_classs_client_clusters(tmp_path, monkeypatch):
    from fedlib.papers import fedic as I

    monkeypatch.setenv("FEDLIB_ROOT", str(tmp_path))
    nb = I.notebook("smoke", workers=0)
    fig, df = I.fig_class_distances(nb)
    st = I._fedic_state(nb)
    per_class = I.class_prototype_distances(st)
    assert len(per_class) > 1 and list(per_class) == df.index.tolist()
    panels = [ax for ax in fig.axes if ax.get_visible() and ax.collections and ax.get_title().startswith("class")]
    assert len(panels) == len(per_class)
    labels = st.server["labels"]
    for ax, (c, v) in zip(panels, per_class.items(), strict=True):
        n = len(v["clients"])
        assert v["distance"].shape == (n, n) and ax.collections[0].get_array().size == n * n
        assert ax.get_title().startswith(f"class {c}: {n} holders")
        assert v["groups"] == sorted(v["groups"])                       # ordered by FedIC's groups
        assert v["groups"] == [int(labels[c, i]) for i in v["clients"]]
        assert [t.get_text() for t in ax.get_yticklabels()] == [str(i + 1) for i in v["clients"]]
    assert (df["holders"] == [len(v["clients"]) for v in per_class.values()]).all()
    assert (tmp_path / "results" / "smoke" / "figures" / "fedic" / "class_prototype_distances.png").is_file()


#: each paper notebook's four kinds of figure beside its tables (README's table of what a paper notebook shows):
#: the cell that draws a t-SNE/UMAP of features, a prototype-distance heatmap and the leakage study's attack picture
FOUR_KINDS = {"fedmps": ("fig6", "fig_distances", "fig_attack_pictures"),
              "gfpl": ("fig_etf", "fig_distances", "fig_attack_pictures"),
              "protonorm": ("fig_features", "fig_distances", "fig_attack_pictures"),
              "mpfedcl": ("fig1", "fig_pool", "fig_attack_pictures"),
              "fedic": ("fig_features", "fig_class_distances", "fig_attack_pictures")}


@pytest.mark.parametrize("paper", sorted(FOUR_KINDS))
def test_every_paper_notebook_draws_an_embedding_a_heatmap_and_an_attack(paper):
    from tests.conftest import ROOT

    module = importlib.import_module(f"fedlib.papers.{paper}")
    cells = (ROOT / "notebooks" / f"{paper}.py").read_text()
    for name in FOUR_KINDS[paper]:
        assert callable(getattr(module, name)), name
        assert f".{name}(nb)" in cells, f"notebooks/{paper}.py draws no {name}"
