"""The privacy study (fedlib/papers/privacy.py): its plan, what its table says the server holds, the
samples-per-prototype curve, the defence inside a run, and the smoke profile end to end."""

from __future__ import annotations

import math

import pandas as pd
import pytest
import torch
import yaml

from fedlib.algorithms import ALGORITHMS
from fedlib.config import run_id, validate
from fedlib.papers import privacy as P
from fedlib.privacy import epsilon, what_server_holds
from fedlib.privacy.defense import check_defense, defend_upload
from fedlib.validation import ConfigError


# -- the plan ---------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("profile", ["smoke", "quick", "paper"])
def test_every_profile_loads_and_its_configs_validate(profile, tmp_path):
    plan = P.load_plan(profile, results_dir=str(tmp_path))
    table = P.table_configs(plan)
    assert list(table) == plan.table_methods()
    assert all(c["train"]["rounds"] == plan.rounds and "defense" not in c for c in table.values())
    defended = P.defense_configs(plan)
    assert len(defended) == len(plan.settings["utility_methods"]) * len(plan.settings["noise"])
    for (m, sigma), cfg in defended.items():
        # noise 0 is the leakage table's own run; the others carry the defence with the file's clips
        assert (run_id(cfg, 0) == run_id(table[m], 0)) if sigma == 0 and m in table else True
        assert ("defense" in cfg) == (sigma > 0)
        if sigma > 0:
            assert cfg["defense"] == {**plan.spec["defense"], "noise_multiplier": sigma}
    for (m, sigma), cfg in P.dp_sgd_configs(plan).items():
        # DP-SGD's noise 0 is the undefended run too; the others clip each sample's gradient in local training
        assert m in plan.settings["dp_sgd_methods"] and (run_id(cfg, 0) == run_id(table[m], 0)) == (sigma == 0)
        if sigma > 0:
            assert cfg["defense"] == {"mechanism": "dp_sgd", **plan.spec["dp_sgd"], "noise_multiplier": sigma}
            assert cfg["executor"] == "sequential"
    jobs = P.all_jobs(plan)
    assert len(jobs) == len({(run_id(c, s)) for c, s in jobs})


def test_dp_sgd_methods_are_checked(tmp_path):
    plan = P.load_plan("smoke", results_dir=str(tmp_path))
    plan.settings["dp_sgd_methods"] = ["fedproto"]
    with pytest.raises(ConfigError, match=r"profiles.smoke.dp_sgd_methods: got \['fedproto'\]; allowed: .*fedavg, "
                                          "fedper"):
        P.check_spec(plan)


def test_the_paper_profile_lists_every_registered_method(tmp_path):
    plan = P.load_plan("paper", results_dir=str(tmp_path))
    assert sorted(plan.table_methods()) == sorted(ALGORITHMS)
    assert plan.seeds == [0, 1, 2]
    quick = P.load_plan("quick", results_dir=str(tmp_path))
    assert len(quick.seeds) == 1 and set(quick.table_methods()) < set(plan.table_methods())


@pytest.mark.slow
def test_bad_plan_values_give_one_line_errors(tmp_path):
    with pytest.raises(ConfigError, match=r"^methods: got \['fedfoo'\]"):
        P.load_plan("smoke", results_dir=str(tmp_path), methods=["fedfoo"])
    with pytest.raises(ConfigError, match=r"^profile: got 'converged'"):
        P.load_plan("converged", results_dir=str(tmp_path))
    spec = yaml.safe_load(P.Plan.params_file().read_text())
    for key, value, field in (("noise", [0.0, -1.0], "noise"), ("attacks", ["dlg_magic"], "attacks"),
                              ("curve_kinds", [], "curve_kinds"), ("utility_methods", ["nope"], "utility_methods"),
                              ("curve_sizes", [1, 0], "curve_sizes")):
        bad = yaml.safe_load(yaml.safe_dump(spec))
        bad["profiles"]["smoke"][key] = value
        path = tmp_path / key / "privacy" / "experiments.yaml"
        path.parent.mkdir(parents=True)
        path.write_text(yaml.safe_dump(bad))
        plan = P.Plan.load("smoke", str(tmp_path), path=path)
        with pytest.raises(ConfigError, match=rf"profiles\.smoke\.{field}: got") as err:
            P.check_spec(plan)
        assert "\n" not in str(err.value)


# -- what the server holds, in the table -------------------------------------------------------------------------

def test_the_table_says_what_each_method_declares(tmp_path):
    plan = P.load_plan("paper", results_dir=str(tmp_path))
    held = P.holdings(plan)
    for m in plan.table_methods():
        row = held.loc[plan.label(m)]
        assert row["upload keys"] == (", ".join(ALGORITHMS[m].UPLOAD) or "—")
        assert row["server holds"] == what_server_holds(m).summary()
    # a table built from attack rows: the holds column comes from the declarations, methods without an image
    # attack get one row naming what applies
    plan = P.load_plan("smoke", results_dir=str(tmp_path))
    rows = pd.DataFrame([
        {"method": "fedavg", "attack": "imprint", "seed": 0, "psnr": 40.0, "ssim": 0.9, "label_acc": 1.0},
        {"method": "fedproto", "attack": "decoder:protos", "seed": 0, "psnr": 12.0, "ssim": 0.2, "label_acc": 0.5},
        {"method": "mpfedcl", "attack": "feature_inversion:protos", "seed": 0, "psnr": 10.0, "ssim": 0.1,
         "label_acc": 0.3}])
    refs = pd.DataFrame([{"attack": "reference: class average", "seed": 0, "psnr": 14.0, "ssim": 0.45,
                          "label_acc": 1.0}])
    res = {"rows": rows, "refs": refs, "holds": {m: what_server_holds(m) for m in plan.table_methods()}}
    table = P.table(plan, res)
    assert table.method.tolist() == ["FedAvg", "—", "FedProto", "MP-FedCL", "LG-FedAvg"]
    assert table["rank"].tolist() == [1, 2, 3, 4, "—"]
    assert table.holds.tolist() == ["model (extractor known)", "auxiliary data", "prototypes",
                                    "model+prototypes (extractor known)", "head"]
    assert table.attack.iloc[-1] == "no image attack applies (label_inference)"
    assert math.isnan(table["ssim std"].iloc[0])  # one seed: no spread


# -- samples per prototype ---------------------------------------------------------------------------------------

def test_samples_per_prototype_curve_falls_on_a_toy_case():
    # identity extractor, and an attack that returns the statistic itself as the image: the reconstruction of a
    # mean of n images is their mean image, which resembles each of them less as n grows
    g = torch.Generator().manual_seed(0)
    x = torch.rand(64, 1, 8, 8, generator=g)
    y = torch.arange(64) % 2

    def f(images):
        return images.flatten(1)

    def attack(stats):
        return stats.view(-1, 1, 8, 8)

    frame = P.curve_frame(attack, f, x, y, sizes=[1, 2, 4, 8, 16], groups=4, kind="mean")
    assert frame.n.tolist() == [1, 2, 4, 8, 16]
    assert frame.ssim.iloc[0] == pytest.approx(1.0) and frame.psnr.iloc[0] == 100.0  # an exact copy, capped
    assert (frame.ssim.diff().iloc[1:] < 0).all() and (frame.psnr.diff().iloc[1:] < 0).all()
    km = P.curve_frame(attack, f, x, y, sizes=[1, 2], groups=4, kind="kmeans")
    assert km.ssim.tolist() == pytest.approx([1.0, 1.0])  # two centroids of two images are the images
    ax = P.curve_figure(pd.concat([frame, km]).assign(extractor="toy"))
    assert len(ax.get_lines()) == 2


# -- the defence inside a run ------------------------------------------------------------------------------------

def test_defend_upload_clips_and_noises_by_kind():
    b = {"w.a": torch.zeros(3, 4), "w.b": torch.zeros(5)}
    up = {"w.a": torch.full((3, 4), 2.0), "w.b": torch.full((5,), 2.0), "num_samples": 7,
          "protos": torch.tensor([[3.0, 4.0], [0.3, 0.4]]), "classes": torch.tensor([1, 4]),
          "counts": torch.tensor([5, 9])}
    clipped = defend_upload(b, up, {"clip_update": 1.0, "clip_features": 2.5, "noise_multiplier": 0.0})
    norm = torch.sqrt(sum((b[k] - clipped[k]).pow(2).sum() for k in ("w.a", "w.b")))
    assert float(norm) == pytest.approx(1.0)                      # the update as a whole, to C
    assert torch.allclose(clipped["protos"], torch.tensor([[1.5, 2.0], [0.3, 0.4]]))  # rows above C only
    assert clipped["num_samples"] == 7 and torch.equal(clipped["counts"], up["counts"])
    noisy = defend_upload(b, up, {"clip_update": 1.0, "clip_features": 2.5, "noise_multiplier": 4.0},
                          torch.Generator().manual_seed(0))
    assert float((noisy["protos"] - clipped["protos"]).std()) > 1.0   # sigma C = 10 per coordinate
    assert torch.equal(noisy["classes"], up["classes"])
    for bad, field in (({"clip_update": 0, "clip_features": 1, "noise_multiplier": 1}, "defense.clip_update"),
                       ({"clip_update": 1, "clip_features": 1, "noise_multiplier": -1}, "defense.noise_multiplier"),
                       ({"clip_update": 1, "clip_features": 1}, "defense.noise_multiplier"),
                       ({"clip_update": 1, "clip_features": 1, "noise_multiplier": 1, "mu": 2}, "defense.mu"),
                       ([1, 2], "defense")):
        with pytest.raises(ConfigError, match=rf"^{field}: got"):
            check_defense(bad)


def test_a_defence_block_changes_the_run_id_and_nothing_else_does(tmp_path):
    plan = P.load_plan("smoke", results_dir=str(tmp_path))
    cfg = P.config(plan, "fedavg")
    assert "defense" not in cfg
    raw = {k: v for k, v in cfg.items()}
    assert run_id(validate(raw), 0) == run_id(cfg, 0)
    defended = validate({**raw, "defense": {"clip_update": 1, "clip_features": 5, "noise_multiplier": 0.5}})
    assert defended["defense"] == {"clip_update": 1.0, "clip_features": 5.0, "noise_multiplier": 0.5}
    assert run_id(defended, 0) != run_id(cfg, 0)


# -- the smoke profile end to end --------------------------------------------------------------------------------

@pytest.mark.slow
def test_the_smoke_profile_end_to_end(tmp_path):
    from fedlib import claims, results

    plan = P.load_plan("smoke", results_dir=str(tmp_path))
    results.run_or_read(P.table_configs(plan), workers=1, progress=False)
    dsum = results.run_or_read(P.defense_configs(plan), workers=1, progress=False)
    dpsum = results.run_or_read(P.dp_sgd_configs(plan), workers=1, progress=False)
    res = P.leakage(plan)
    # every image attack that applies, and only those: FedAvg has a model going both ways, FedProto prototypes
    # without an extractor, MP-FedCL both, LG-FedAvg a head only
    got = res["rows"].groupby("method").attack.apply(list).to_dict()
    assert got == {"fedavg": ["gradient_inversion (B 32, 3 steps)", "gradient_inversion (batch 1, iDLG label)",
                              "imprint (crafted broadcast)"],
                   "fedproto": ["decoder:protos"],
                   "mpfedcl": ["feature_inversion:protos", "gradient_inversion (B 32, 3 steps)",
                               "gradient_inversion (batch 1, iDLG label)", "decoder:protos",
                               "imprint (crafted broadcast)"]}
    assert res["rows"].ssim.between(-1, 1).all() and res["rows"].psnr.between(0, 100).all()
    table = P.table(plan, res)
    assert {plan.label(m) for m in plan.table_methods()} <= set(table.method)
    assert len(table) == len(res["rows"]) + 3 + 1   # attacks, the three references, LG-FedAvg's row
    for m in plan.table_methods():
        assert set(table.holds[table.method == plan.label(m)]) == {what_server_holds(m).summary()}
    # the imprint server recovers exact training images from FedAvg's update, the class average does not
    imprint = res["rows"].query("method == 'fedavg' and attack.str.startswith('imprint')").iloc[0]
    average = res["refs"].query("attack == 'reference: class average'").iloc[0]
    assert imprint.ssim > average.ssim
    # a second call reads the cached attacks: the same numbers
    again = P.leakage(plan)
    pd.testing.assert_frame_equal(again["rows"].drop(columns="seconds"), res["rows"].drop(columns="seconds"))
    spp = P.curve(plan, 0)
    assert len(spp) == 2 * 2 * 3  # two attacks x kinds mean, kmeans x sizes 1, 2, 4
    one = spp[spp.n == 1].groupby("attack").ssim.nunique()
    assert (one == 1).all()  # one image: every kind's statistic is its own feature, the same reconstruction
    util = P.utility(plan, dsum, dp_summaries=dpsum)
    assert len(util) == 6 and util.epsilon[util.noise == 0].map(math.isinf).all()
    upload = util[(util.defence == P.UPLOAD_DEFENCE) & (util.noise == 1.0)]
    assert upload.epsilon.tolist() == pytest.approx([epsilon(1.0, plan.rounds, 1.0, 1e-5)] * 2)
    dp = util[util.defence == P.DP_SGD].set_index("noise")
    cfg = P.dp_sgd_configs(plan)[("fedavg", 1.0)]
    assert dp.epsilon[1.0] == pytest.approx(P.dp_sgd_epsilon(plan, cfg, 0, 1.0))
    # DP-SGD at sigma 1: the imprint server no longer gets exact images (its undefended SSIM is the noise-0 row)
    assert dp.ssim[1.0] < dp.ssim[0.0] - 0.3
    led = P.ledger(plan, res)
    assert {c.verdict for c in led} <= {claims.INCONCLUSIVE, claims.NOT_TESTED, claims.BY_CONSTRUCTION}
    assert any(c.verdict == claims.INCONCLUSIVE and "MP-FedCL" in c.claim for c in led)


@pytest.mark.slow
def test_the_engine_aggregates_the_defended_uploads():
    # FedAvg, one round, two clients: with the update clipped to 1e-6 and no noise, the server's model stays where
    # it started; undefended it moves; with noise it moves by about sigma x clip per coordinate, not by the update
    from fedlib.algorithms import make_algorithm
    from fedlib.data import FederatedData
    from fedlib.data.partition import label_partition
    from fedlib.engine import LocalClients, Simulator
    from fedlib.privacy.defense import DefendedClients
    from tests.conftest import make_ctx, tiny_image_dataset

    ds = tiny_image_dataset()
    part = label_partition("iid", ds.y_train.numpy(), ds.y_test.numpy(), 4, num_clients=2, seed=0, split="official")
    data, ctx = FederatedData(ds, part), make_ctx(num_clients=2)

    def moved(spec):
        algo = make_algorithm({"name": "fedavg"})
        start = {k: v.clone() for k, v in algo.init_server(ctx)["weights"].items()}
        cohort = LocalClients(algo, ctx, data) if spec is None else DefendedClients(LocalClients(algo, ctx, data),
                                                                                    spec, ctx.seed)
        sim = Simulator(algo, ctx, data, rounds=1, progress=False, clients=cohort)
        sim.run()
        end = sim.server["weights"]
        return max(float((end[k].float() - start[k].float()).abs().max()) for k in start
                   if start[k].is_floating_point())

    assert moved(None) > 1e-3
    assert moved({"clip_update": 1e-6, "clip_features": 1.0, "noise_multiplier": 0.0}) < 1e-6
    noisy = moved({"clip_update": 1e-6, "clip_features": 1.0, "noise_multiplier": 1e4})
    assert 1e-3 < noisy < 0.1   # noise std 1e-2 per coordinate and client, averaged over two



def test_only_classes_the_client_holds_are_scored():
    # FedFA uploads one anchor per class of the task; the target client holds classes 0 and 2 only
    from fedlib.privacy.rounds import held_classes
    from fedlib.privacy import score

    images = torch.rand(4, 1, 8, 8, generator=torch.Generator().manual_seed(0))
    classes = torch.arange(4)
    x = torch.stack([images[0], images[2], images[2] * 0.5])
    y = torch.tensor([0, 2, 2])
    kept, kc = held_classes(images, classes, y)
    assert kc.tolist() == [0, 2]
    assert torch.equal(kept, images[[0, 2]])
    with pytest.raises(ConfigError, match="classes: got 1"):
        score(images, x, y, classes)  # what the study did before: class 1 has no private image
    s = score(kept, x, y, kc)  # each kept row is one of the client's images exactly
    assert s["ssim"] == pytest.approx(1.0) and math.isinf(s["psnr"])
    rec, none = held_classes(images, None, y)  # gradient inversion: no classes, nothing dropped
    assert rec is images and none is None


def test_epsilons_print_with_three_significant_digits():
    assert [P.epsilon_text(e) for e in (16500111.78, 1761.78, 39.83, math.inf, 0.5)] == [
        "1.65e+07", "1.76e+03", "39.8", "inf", "0.5"]


def test_a_methods_batch_inversions_are_one_row_over_seeds_whose_step_counts_differ():
    rows = pd.DataFrame([
        {"method": "fedkd", "attack": "gradient_inversion (B 32, 4 steps)", "seed": 0, "ssim": 0.07},
        {"method": "fedkd", "attack": "gradient_inversion (B 32, 8 steps)", "seed": 1, "ssim": 0.08},
        {"method": "fedkd", "attack": "gradient_inversion (B 32, 7 steps)", "seed": 2, "ssim": 0.09},
        {"method": "fedkd", "attack": "gradient_inversion (batch 1, iDLG label)", "seed": 0, "ssim": 0.06},
        {"method": "fedavg", "attack": "gradient_inversion (B 32, 7 steps)", "seed": 0, "ssim": 0.5},
        {"method": "fedavg", "attack": "gradient_inversion (B 32, 7 steps)", "seed": 1, "ssim": 0.6}])
    merged = P.merge_step_counts(rows)
    assert merged.attack.tolist() == ["gradient_inversion (B 32, 4-8 local steps)"] * 3 + [
        "gradient_inversion (batch 1, iDLG label)"] + ["gradient_inversion (B 32, 7 local steps)"] * 2
    assert merged.drop(columns="attack").equals(rows.drop(columns="attack"))
    assert P.merge_step_counts(rows.iloc[3:4]).equals(rows.iloc[3:4])  # nothing to merge: unchanged


def test_the_statistics_vs_models_claims_rest_on_the_realistic_attacks(tmp_path):
    """Claims 3-4 ("statistics are safer to share than models") rested on the batch-1 iDLG upper bound (SSIM ~1.0
    for every model upload); under the client's real batch the models leak less than the statistics here, so the
    claim is not supported, and the evidence names the attack it rests on and gives the upper bound beside it."""
    import pandas as pd

    from fedlib import claims as C
    from fedlib.privacy import what_server_holds

    plan = P.load_plan("paper", results_dir=str(tmp_path))
    rows = []
    for seed in (0, 1, 2):
        rows += [{"method": "fedavg", "attack": "gradient_inversion (batch 1, iDLG label)", "seed": seed,
                  "ssim": 0.99 + seed / 1000},
                 {"method": "fedavg", "attack": "gradient_inversion (B 32, 6 steps)", "seed": seed,
                  "ssim": 0.20 + seed / 100},
                 {"method": "fedavg", "attack": "imprint (crafted broadcast)", "seed": seed, "ssim": 0.10},
                 {"method": "gfpl", "attack": "decoder:means", "seed": seed, "ssim": 0.45 + seed / 100}]
    res = {"rows": pd.DataFrame(rows), "refs": pd.DataFrame([{"attack": "reference: class average", "seed": s,
                                                              "ssim": 0.4} for s in (0, 1, 2)]),
           "holds": {m: what_server_holds(m) for m in plan.table_methods()}}
    got = {c.claim: c for c in P.ledger(plan, res)}["GFPL: Gaussian mixture components are safer to share than models"]
    assert got.verdict == C.NOT_SUPPORTED
    want = "on FedAvg's model upload 0.210 (gradient_inversion (B 32, 6 steps), the client's real batch)"
    assert want in got.evidence
    assert "decoder:means" in got.evidence
    assert "the batch-1 gradient inversion (iDLG), an upper bound no real round offers, reaches 0.991" in got.note


def _closing(monkeypatch, rows, archive_only: bool) -> str:
    """The closing note of a stub notebook whose leakage table is ``rows`` (method, attack, rank, ssim, psnr, ...)."""
    import types

    from fedlib import results

    leak = pd.DataFrame(rows)
    monkeypatch.setattr(P, "_leakage", lambda nb: ({}, leak))
    written = []
    nb = types.SimpleNamespace(plan=types.SimpleNamespace(rounds=30, seeds=[0, 1, 2]), profile="paper",
                               results={"t_start": 0.0},
                               section=types.SimpleNamespace(text=written.append, write=lambda: "section"))
    if archive_only:
        with results.archive_only():
            P.closing_note(nb)
    else:
        P.closing_note(nb)
    return written[0]


def test_the_closing_note_names_a_reference_below_only_where_there_is_one(monkeypatch):
    row = dict(psnr=10.0, label_acc=0.5)
    attacks = [dict(method="A", attack="imprint", rank=1, ssim=0.7, **row),
               dict(method="B", attack="decoder", rank=2, ssim=0.2, **row)]
    reference = [dict(method="—", attack="reference: class average", rank=3, ssim=0.1, **row)]
    assert "below it" not in _closing(monkeypatch, attacks, True)   # the bottom attack row is the last ranked row
    note = _closing(monkeypatch, attacks + reference, True)
    assert "Bottom attack row: B, decoder: SSIM 0.200" in note and "below it the class average reference, SSIM 0.100" \
        in note


def test_the_closing_note_rendered_from_the_archive_does_not_read_the_clock(monkeypatch):
    rows = [dict(method="A", attack="imprint", rank=1, ssim=0.7, psnr=10.0, label_acc=0.5)]
    assert "Run All took" not in _closing(monkeypatch, rows, True)
    assert "Run All took" in _closing(monkeypatch, rows, False)


def _safer_rows(seeds) -> pd.DataFrame:
    """FedAvg's realistic attack and GFPL's decoder on ``seeds``: GFPL's statistics 0.01 below the model upload on
    every seed, against a seed spread of 0.05 (within it: only the exact test can decide, from 6 seeds on)."""
    rows = []
    for s in seeds:
        model = 0.30 + 0.05 * (s % 3)
        rows += [{"method": "fedavg", "attack": "gradient_inversion (B 32, 6 steps)", "seed": s, "ssim": model},
                 {"method": "gfpl", "attack": "decoder:means", "seed": s, "ssim": model - 0.01}]
    return pd.DataFrame(rows)


def test_the_statistics_vs_models_claims_read_the_seeds_the_evidence_planner_added(tmp_path, monkeypatch):
    """Within the seed spread on the profile's 3 seeds the claim is inconclusive and the planner adds seeds to both
    sides (their attacks made as each seed is kept); with 4 added seeds on which both sides' attacks can be read, the
    paired exact test over all 7 decides it, and the note names the added seeds."""
    from fedlib import claims as C
    from fedlib.ledgers import privacy as L

    plan = P.load_plan("paper", results_dir=str(tmp_path))
    res = {"rows": _safer_rows((0, 1, 2)), "refs": pd.DataFrame([{"attack": "reference: class average", "seed": s,
                                                                  "ssim": 0.4} for s in (0, 1, 2)]),
           "holds": {m: what_server_holds(m) for m in plan.table_methods()}}
    claim = "GFPL: Gaussian mixture components are safer to share than models"
    before = {c.claim: c for c in P.ledger(plan, res)}[claim]
    assert before.verdict == C.INCONCLUSIVE and "within the seed spread" in before.note
    seen = []

    def added(p, sides):
        seen.append(sides)
        return _safer_rows((3, 4, 5, 6)), [3, 4, 5, 6]
    monkeypatch.setattr(L, "added_attacks_rows", added)
    tables = L.tables(plan, res)
    cells = tables["safer_gfpl"].cells
    assert seen[-1] == ["fedavg", "gfpl"] and cells["statistics"]["n"] == cells["model"]["n"] == 7
    assert cells["statistics"]["per_seed"] == pytest.approx([0.29, 0.34, 0.39, 0.29, 0.34, 0.39, 0.29])
    after = {c.claim: c for c in P.ledger(plan, res)}[claim]
    assert after.verdict == C.SUPPORTED, after.note
    assert "paired exact p 0.02" in after.note and "n = 7" in after.note
    assert "the seeds the evidence planner added: FedAvg 3-6; GFPL 3-6" in after.note


def test_added_seeds_are_read_up_to_the_first_whose_attacks_are_not_archived(tmp_path, monkeypatch):
    """Only the seeds both sides hold count, and a seed whose attack scores the archive lacks (its run kept, its
    attacks not yet made) ends the list rather than the report."""
    from fedlib import results
    from fedlib.ledgers import privacy as L

    plan = P.load_plan("paper", results_dir=str(tmp_path))
    held = {"fedavg": [3, 4, 5], "gfpl": [3, 4]}
    monkeypatch.setattr(results, "more_seeds", lambda cfg, seeds, *a, **k: held[cfg["algorithm"]["name"]])

    def attacks(plan_, cfg, method, seed, attacker):
        if seed == 4 and method == "gfpl":
            raise results.NotArchived("gfpl seed 4: privacy-attacks, derived from a trained model, is not archived")
        return [{"method": method, "attack": "decoder:means", "ssim": 0.5}]
    monkeypatch.setattr(L, "attacks", attacks)
    rows, seeds = L.added_attacks_rows(plan, ["fedavg", "gfpl"])
    assert seeds == [3] and rows.seed.tolist() == [3, 3] and rows.method.tolist() == ["fedavg", "gfpl"]
