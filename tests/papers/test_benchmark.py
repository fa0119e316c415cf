"""The cross-paper benchmark (fedlib/papers/benchmark.py, params/benchmark/): its settings are the papers' where
they coincide (so their runs are shared, not trained again), the metric, the ranked table and the ledger."""

import numpy as np
import pandas as pd
import pytest

from fedlib.config import run_id
from fedlib.papers import benchmark as B
from fedlib.papers import fedic, fedmps, protonorm


@pytest.fixture(scope="module")
def converged():
    return B.load_plan("converged")


def test_pat_and_dir_are_fedics_settings_and_share_its_converged_runs(converged):
    bc, fi = B.configs(converged), fedic.load_plan("converged")
    for (part, method), cfg in fedic.table1_configs(fi).items():
        mine = bc[({"pat": "pat", "pra": "dir"}[part], method)]
        assert mine["partition"] == cfg["partition"] and mine["dataset"] == cfg["dataset"]
        assert run_id(mine, 0) == run_id(cfg, 0), (part, method)


def test_nway_is_fedmps_table_ii_and_shares_its_paper_runs_at_one_budget(converged):
    bc, fm = B.configs(converged), fedmps.load_plan("paper")
    shared = {m for m, c in fedmps.table3_configs(fm).items() if run_id(c, 1234) == run_id(bc[("nway", m)], 1234)}
    # FedNTD (5 local epochs) and FedGKD (lr 0.05) get FedMPS's per-method budget there, the common one here
    assert shared == set(fedmps.table3_configs(fm)) - {"fedntd", "fedgkd"}
    assert converged.setting_seeds("nway") == fm.seeds == [1234, 1235, 1236]
    assert bc[("nway", "fedmps")]["partition"] == fedmps.config(fm, "fedmps")["partition"]


def test_hetero_is_protonorms_table_1_practical_setting(converged):
    bc, pn = B.configs(converged), protonorm.load_plan("converged")
    pairs = [(m, c) for (m, p), c in protonorm.table1_configs(pn).items() if p == "practical" and ("hetero", m) in bc]
    assert {m for m, _ in pairs} == {"lgfedavg", "fml", "fedkd", "feddistill", "fedproto", "fedtgp", "protonorm"}
    assert all(run_id(c, 0) == run_id(bc[("hetero", m)], 0) for m, c in pairs)


def test_every_registered_method_runs_on_the_shared_settings_and_the_rest_say_why():
    from fedlib.algorithms import ALGORITHMS

    plan = B.load_plan("quick")
    assert set(plan.methods) == set(ALGORITHMS)
    cfgs = B.configs(plan)
    assert all((s, m) in cfgs for s in ("pat", "dir", "nway") for m in ALGORITHMS if m != "fedmps")
    assert ("nway", "fedmps") in cfgs and ("dir", "fedmps") not in cfgs
    why = B.missing(plan)["why not"]
    assert "low-level feature" in why[("Heterogeneous models (ht0_lite)", "FedMPS")]
    assert "4-layer CNN" in why[("PFLlib Pat", "FedMPS")] and "whole model" in why[("Heterogeneous models (ht0_lite)",
                                                                                    "FedAvg")]
    assert len(cfgs) + len(why) == 4 * len(ALGORITHMS)


def summary(best, last, floats=100.0, seconds=0.5, metric="acc_head"):
    return {"metrics": {metric: {"best_weighted": best, "last_weighted": last}},
            "comm_per_round": {"up_params": floats / 2, "down_params": floats / 2}, "seconds_per_round_median": seconds}


def test_scores_use_each_methods_own_rule_sample_weighted_best_and_last_round():
    plan = B.load_plan("smoke")
    t = B.scores(plan, {("dir", "fedavg", 0): summary(0.5, 0.25, 300.0, 1.5),
                        ("dir", "fedproto", 0): summary(0.75, 0.5, metric="acc_proto")})
    assert t.set_index("method").loc["fedavg", ["best", "last", "rule", "floats", "seconds"]].tolist() == \
        [50.0, 25.0, "head", 300.0, 1.5]
    assert t.set_index("method").loc["fedproto", "rule"] == "proto"


def test_ranked_table_on_a_hand_example():
    """Two settings x two seeds, three methods: A wins three blocks, B one; mean ranks by hand."""
    plan = B.load_plan("smoke", methods=["local", "fedavg", "fedproto"])
    acc = {("dir", 0): (80, 70, 60), ("dir", 1): (82, 71, 61), ("hetero", 0): (50, 55, 40), ("hetero", 1): (52, 51, 41)}
    names = ("fedproto", "fedavg", "local")
    rows = [{"setting": s, "seed": seed, "method": m, "best": a, "last": a - 1, "rule": "head", "floats": 1.0,
             "seconds": 1.0} for (s, seed), accs in acc.items() for m, a in zip(names, accs, strict=True)]
    ranked = B.ranked(plan, pd.DataFrame(rows))
    assert ranked.loc["FedProto", "mean rank"] == 1.25 and ranked.loc["FedAvg", "mean rank"] == 1.75
    assert ranked.loc["Local", "mean rank"] == 3.0
    assert ranked.loc["FedProto", "hetero rank"] == 1.5 and ranked.loc["FedProto", "dir best"] == "81.00 ± 1.41"
    assert list(ranked.index) == ["FedProto", "FedAvg", "Local"]
    # hetero: one win each, so equal mean ranks; FedAvg's mean accuracy (53) is the higher
    assert B.top(plan, pd.DataFrame(rows), n=2) == {"dir": ["FedProto", "FedAvg"], "hetero": ["FedAvg", "FedProto"]}


def test_the_second_cd_diagram_ranks_every_method_of_the_one_model_settings():
    """FedAvg runs on dir only (it uploads a whole model, so not on hetero): the diagram over every setting leaves it
    out, the one over the settings with one model for all (dir here) ranks it."""
    import matplotlib.pyplot as plt

    plan = B.load_plan("smoke", methods=["local", "fedavg", "fedproto"])
    assert B.homogeneous_settings(plan) == ["dir"]
    acc = {("dir", 0): {"fedproto": 80, "fedavg": 70, "local": 60}, ("dir", 1): {"fedproto": 82, "fedavg": 71,
                                                                                "local": 61},
           ("hetero", 0): {"fedproto": 50, "local": 40}, ("hetero", 1): {"fedproto": 52, "local": 41}}
    rows = [{"setting": s, "seed": seed, "method": m, "best": a, "last": a, "rule": "head", "floats": 1.0,
             "seconds": 1.0} for (s, seed), accs in acc.items() for m, a in accs.items()]
    every, same = B.cd_figure(plan, pd.DataFrame(rows)), B.cd_figure(plan, pd.DataFrame(rows), ["dir"])
    assert every.axes[0].get_title().startswith("2 methods, mean rank over 4 (setting, seed) blocks (dir, hetero);")
    assert same.axes[0].get_title().startswith("3 methods, mean rank over 2 (setting, seed) blocks (dir);")
    def methods(fig):   # the labels read "FedProto (1.00)": method and mean rank
        return {t.get_text().split(" (")[0] for t in fig.axes[0].texts if " (" in t.get_text()}

    assert methods(every) == {"FedProto", "Local"} and methods(same) == {"FedProto", "FedAvg", "Local"}
    plt.close("all")


def test_short_profile_claims_are_at_most_inconclusive():
    from fedlib import claims

    plan = B.load_plan("smoke", methods=["fedavg", "fedproto", "protonorm"])
    rows = [{"setting": s, "seed": 0, "method": m, "best": a, "last": a, "rule": "head", "floats": 1.0, "seconds": 1.0}
            for s in ("dir", "hetero") for m, a in (("fedavg", 60.0), ("fedproto", 90.0), ("protonorm", 95.0))]
    verdicts = {c.claim: c.verdict for c in B.ledger(plan, pd.DataFrame(rows))}
    assert set(verdicts.values()) <= {claims.INCONCLUSIVE, claims.NOT_TESTED}
    assert any("Normalised prototypes" in c for c in verdicts)


def test_converged_claims_on_rising_curves_are_inconclusive_and_the_table_says_which(converged, monkeypatch):
    from fedlib import claims, results

    rows = [{"setting": "dir", "seed": seed, "method": m, "best": a + seed / 10, "last": a, "rule": "head",
             "floats": 1.0, "seconds": 1.0} for seed in (0, 1, 2) for m, a in (("fedavg", 60.0), ("fedproto", 90.0))]
    table = pd.DataFrame(rows)
    text = "Prototype sharing (FedProto) beats parameter sharing (FedAvg) on dir"
    plain = {c.claim: c for c in B.ledger(converged, table)}[text]
    assert plain.verdict == claims.SUPPORTED   # +30 points against a seed std of 0.08
    # FedProto ahead and still rising, FedAvg plateaued: the margin can only grow, so it is decided; FedAvg behind
    # and still rising with a reach larger than the margin leaves it open
    rising, flat = claims.trend("up", [list(np.linspace(50, 90, 100))] * 3), claims.trend("flat", [[60.0] * 100] * 3)
    ahead = {c.claim: c for c in B.ledger(converged, table, {("dir", "fedproto"): rising, ("dir", "fedavg"): flat})}
    assert ahead[text].verdict == claims.SUPPORTED
    far = claims.trend("up", [list(np.linspace(0, 60, 100))] * 3)          # +30.3 over its last doubling: 60 to come
    behind = {c.claim: c for c in B.ledger(converged, table, {("dir", "fedproto"): flat, ("dir", "fedavg"): far})}
    assert behind[text].verdict == claims.INCONCLUSIVE
    assert behind[text].note.startswith(f"{claims.NOT_PLATEAUED} FedProto vs FedAvg (dir) +30.00")
    assert "(would be supported were they plateaued)" in behind[text].note

    # trends: the seed curves of each (setting, method)'s seeds in the table, under its rule
    cfgs = B.configs(converged)
    rise = {run_id(cfgs[("dir", "fedproto")], 0)}

    def rounds(cfg, seed):
        curve = [50.0 + 2 * r for r in range(20)] if run_id(cfg, seed) in rise else [50.0] * 5 + [80.0] * 15
        metric = converged.metric(cfg["algorithm"]["name"])
        return [{"round": r + 1, "acc": {metric: {"weighted": a / 100}}} for r, a in enumerate(curve)]

    monkeypatch.setattr(results, "rounds", rounds)
    got = B.trends(converged, table)
    assert {k: t.plateau_text() for k, t in got.items()} == {
        ("dir", "fedavg"): "", ("dir", "fedproto"): "not plateaued (+2.67 in the last 20% of rounds)"}
    assert run_id(got[("dir", "fedproto")].group.cfg, 0) == run_id(cfgs[("dir", "fedproto")], 0)
    ranked = B.ranked(converged, table, got)
    # FedAvg's curve (50 for 5 rounds, then 80) holds the criterion from its round 20 on (the earliest reported)
    assert ranked.loc["FedProto", "plateaued"] == "0 of 1 (dir +2.67 at 20)"
    assert ranked.loc["FedAvg", "plateaued"] == "1 of 1 (dir from 20)"
    assert "plateaued" not in B.ranked(converged, table).columns


def table(acc: dict) -> list[dict]:
    """Score rows from ``{setting: {method: accuracy}}``: seeds 0-2, seed s adding s / 10 (a seed std of 0.08)."""
    return [{"setting": s, "seed": seed, "method": m, "best": a + seed / 10, "last": a, "rule": "head", "floats": 1.0,
             "seconds": 1.0} for s, accs in acc.items() for seed in (0, 1, 2) for m, a in accs.items()]


def test_each_papers_method_is_judged_at_home_and_away(converged):
    """MP-FedCL (home: dir) wins at home by 10 points and loses on pat to FedProto by 15, seed std 0.08: supported
    at home, not supported away; FedMPS runs on nway only, so its away claim is not tested and says why."""
    from fedlib import claims

    acc = {"dir": {"mpfedcl": 90.0, "fedproto": 80.0, "fedavg": 60.0},
           "pat": {"mpfedcl": 70.0, "fedproto": 85.0, "fedavg": 50.0}}
    rows = table(acc)
    got = {c.claim: c for c in B.ledger(converged, pd.DataFrame(rows))}
    home = got["MP-FedCL beats every other method in its paper's kind of setting (strongest rival on dir: FedProto)"]
    away = got["MP-FedCL also beats every other method outside its paper's kind of setting (strongest rival on pat: "
               "FedProto)"]
    assert home.verdict == claims.SUPPORTED and away.verdict == claims.NOT_SUPPORTED
    assert away.evidence == "MP-FedCL 70.10 vs FedProto 85.10 on PFLlib Pat"
    fedmps_away = got["FedMPS also beats every other method outside its paper's kind of setting"]
    assert fedmps_away.verdict == claims.NOT_TESTED and "low-level feature map" in fedmps_away.note

    # a seed one side has not finished is left out of the pair (the other seeds still compare, paired)
    part = pd.DataFrame([r for r in rows if not (r["setting"] == "pat" and r["method"] == "fedproto"
                                                  and r["seed"] == 2)])
    away = {c.claim: c for c in B.ledger(converged, part)}[
        "MP-FedCL also beats every other method outside its paper's kind of setting (strongest rival on pat: FedProto)"]
    assert away.evidence == "MP-FedCL 70.05 vs FedProto 85.05 on PFLlib Pat"

    # winning on both away settings by 5 points (ProtoNorm at home on hetero, here away on dir and pat)
    for s in acc:
        acc[s]["protonorm"] = max(acc[s].values()) + 5
    rows = table(acc)
    got = {c.claim: c for c in B.ledger(converged, pd.DataFrame(rows))}
    away = got["ProtoNorm also beats every other method outside its paper's kind of setting (strongest rival on pat: "
               "FedProto, on dir: MP-FedCL)"]
    assert away.verdict == claims.SUPPORTED
    # FedIC's Table 1 is Pat and Pra: both are its own ground, and it must win on both (here it loses on pat)
    acc["dir"]["fedic"], acc["pat"]["fedic"] = 99.0, 80.0
    rows = table(acc)
    got = {c.claim: c for c in B.ledger(converged, pd.DataFrame(rows))}
    fedic_home = got["FedIC beats every other method in its paper's kind of setting (strongest rival on pat: "
                     "ProtoNorm, on dir: ProtoNorm)"]
    assert fedic_home.verdict == claims.NOT_SUPPORTED
    assert fedic_home.evidence == ("FedIC 80.10 vs ProtoNorm 90.10 on PFLlib Pat; FedIC 99.10 vs ProtoNorm 95.10 on "
                                   "PFLlib Dir(0.1)")
    fedic_away = got["FedIC also beats every other method outside its paper's kind of setting"]
    assert fedic_away.verdict == claims.NOT_TESTED and "hetero: uploads a whole model" in fedic_away.note


def test_a_bad_setting_is_one_line():
    from fedlib.validation import ConfigError

    with pytest.raises(ConfigError, match=r"^setting: got 'iid'; allowed: one of pat, dir, nway, hetero$"):
        B.config(B.load_plan("smoke"), "fedavg", "iid")


def test_a_failed_run_is_named_and_the_other_settings_still_run(monkeypatch, capsys):
    from fedlib import results
    from fedlib.runner import RunsFailed

    plan = B.load_plan("smoke")
    done = {"dir": summary(0.5, 0.5), "hetero": summary(0.6, 0.6)}

    def run_or_read(configs, seeds, workers=None, desc=""):
        if desc.endswith("dir"):
            raise RunsFailed("1 of 4 runs failed: benchmark/dir/fedavg seed 0: KeyError")
        return {m: [done["hetero"] for _ in seeds] for m in configs}

    found = {"benchmark/dir/local": done["dir"]}
    monkeypatch.setattr(results, "run_or_read", run_or_read)
    monkeypatch.setattr(results, "find", lambda cfg, seed: (cfg, found.get(cfg["name"])))
    got = B.obtain(plan)
    assert "benchmark dir: 1 of 4 runs failed: benchmark/dir/fedavg" in capsys.readouterr().out
    assert set(got) == {("dir", "local", 0)} | {("hetero", m, 0) for m in ("local", "fedproto", "protonorm")}


def test_the_headless_command_trains_what_is_missing_anchor_included_in_one_pool(monkeypatch, capsys):
    """``python -m fedlib.papers.benchmark --profile converged``: one pool over every missing run, the anchor's too (the
    notebook's anchor cell trains it; the command used to leave it out), then the tables from what finished."""
    from fedlib import grid, results
    from fedlib.runner import RunsFailed

    plan = B.load_plan("converged")
    everything = B.jobs(plan)
    missing = [(c["name"], s) for c, s in everything if c["name"].startswith("benchmark/anchor/")] + [
        (c["name"], s) for c, s in everything if c["name"] == "benchmark/hetero/gfpl"]   # 2 + 3 runs
    done = {"metrics": {rule: {"best_weighted": 0.5, "last_weighted": 0.5} for rule in ("acc_head", "acc_proto")}}
    pools = []

    def run_many(jobs, workers=None, desc="", **_):
        pools.append([(c["name"], s) for c, s in jobs])
        raise RunsFailed(f"1 of {len(jobs)} runs failed: {jobs[0][0]['name']} seed {jobs[0][1]}: KeyError")

    monkeypatch.setattr(grid, "run_many", run_many)
    monkeypatch.setattr(results, "find", lambda cfg, seed: (cfg, None if (cfg["name"], seed) in missing else done))
    monkeypatch.setattr(results, "rounds", lambda cfg, seed: [])
    assert B.main(["--profile", "converged"]) == 1
    assert len(pools) == 1 and sorted(pools[0]) == sorted(missing)   # one pool, the anchor's runs in it
    out = capsys.readouterr().out
    finished = f"{len(everything) - 5} of {len(everything)} runs finished"
    assert f"{finished} (results folder or run archive); training 5" in out
    assert "benchmark: 1 of 5 runs failed" in out and "| FedAvg |" in out


def test_the_anchor_is_fedavg_and_fedproto_on_pat_with_all_of_the_data(converged):
    anchors = B.anchor_configs(converged)
    pat = B.configs(converged)
    assert set(anchors) == {"fedavg", "fedproto"}
    for m, cfg in anchors.items():
        # the benchmark's own Pat run of the method, but all of Fashion-MNIST and the anchor's rounds
        assert "fraction" not in cfg["dataset"] and pat[("pat", m)]["dataset"]["fraction"] == 0.05
        assert cfg["partition"] == pat[("pat", m)]["partition"] and cfg["algorithm"] == pat[("pat", m)]["algorithm"]
        assert cfg["train"] == {**pat[("pat", m)]["train"], "rounds": 20}
    assert {run_id(c, 0) for c in anchors.values()} <= {run_id(c, s) for c, s in B.jobs(converged)}
    assert B.archived_tables()[-1][1] == anchors and B.archived_tables()[-1][2] == [0]
    assert B.anchor_configs(B.load_plan("quick")) == {} and B.anchor_curves(B.load_plan("quick")).empty


def test_anchor_curves_and_figure_from_the_round_records(converged, monkeypatch):
    from fedlib import results

    def rounds(cfg, seed):   # the anchor (seed 0): 10, 20, 30; the 5% pat runs: seed / 10 + 1, 2, ..., 5 (FedAvg)
        rule = "acc_proto" if cfg["algorithm"]["name"] == "fedproto" else "acc_head"
        if cfg["name"].startswith("benchmark/anchor/"):
            assert seed == 0
            return [{"round": r, "acc": {rule: {"weighted": r / 10, "mean": 0.0}, "acc_x": {"weighted": 1.0}}}
                    for r in (1, 2, 3)]
        assert cfg["name"].startswith("benchmark/pat/") and seed in (0, 1, 2)
        if cfg["algorithm"]["name"] == "fedproto" and seed == 2:
            return []   # not finished: the mean is over the other two seeds
        return [{"round": r, "acc": {rule: {"weighted": (r + seed / 10) / 100}}} for r in range(1, 6)]

    monkeypatch.setattr(results, "rounds", rounds)
    curves = B.anchor_curves(converged, train=False)
    assert curves.groupby("method").accuracy.apply(list).to_dict() == {"fedavg": [10.0, 20.0, 30.0],
                                                                       "fedproto": [10.0, 20.0, 30.0]}
    reduced = B.reduced_curves(converged)
    assert reduced[reduced.method == "fedavg"].accuracy.round(6).tolist() == [1.1, 2.1, 3.1, 4.1, 5.1]
    assert reduced[reduced.method == "fedproto"].accuracy.round(6).tolist() == [1.05, 2.05, 3.05, 4.05, 5.05]
    assert reduced.groupby("method").seeds.max().to_dict() == {"fedavg": 3, "fedproto": 2}
    fig = B.anchor_figure(converged, curves, reduced)
    labels = fig.axes[0].get_legend_handles_labels()[1]
    assert labels == ["FedAvg (ours, all of the data)", "FedAvg (ours, 5% of the data, mean of 3 seeds)",
                      "FedAvg: PFLlib, 2,000 rounds (80.41)", "FedProto (ours, all of the data)",
                      "FedProto (ours, 5% of the data, mean of 2 seeds)", "FedProto: PFLlib, 2,000 rounds (99.49)"]


def test_the_section_header_names_the_seeds_of_every_setting(converged):
    """The header said "seeds 0, 1, 2" where the nway setting keeps FedMPS's 1234-1236."""
    from fedlib import report

    assert converged.section_seeds() == "seeds 0, 1, 2 (n=3; nway: 1234, 1235, 1236)"
    section = report.ReportSection("benchmark", "converged", seeds=converged.section_seeds(), rounds="100")
    assert section.provenance().endswith("· rounds 100 · seeds 0, 1, 2 (n=3; nway: 1234, 1235, 1236)_")


def test_the_claims_read_added_seeds_as_long_as_the_profiles_and_name_them(monkeypatch):
    """Under the converged profile a (setting, method) cell reads the seeds the evidence planner added after the
    profile's, up to the first shorter than the profile's runs (another study's fixed protocol), its trend names them
    (``more``: the planner may add more), and a claim that reads the cell names them; the ranked table does not."""
    from fedlib import results
    from fedlib.ledgers import benchmark as L
    from fedlib.plans.benchmark import configs, load_plan

    plan = load_plan("converged")
    (setting, method) = next(k for k in configs(plan) if k[1] == "mpfedcl" and k[0] == "dir")
    lengths = {0: 300, 1: 300, 2: 300, 3: 300, 4: 300, 5: 100, 6: 300}
    monkeypatch.setattr(results, "more_seeds", lambda cfg, seeds, *a, **k: [3, 4, 5, 6] if cfg["algorithm"]["name"]
                        == "mpfedcl" else [])
    monkeypatch.setattr(results, "find", lambda cfg, seed, *a, **k: (cfg, {"rounds": lengths[seed], "metrics": {
        plan.metric(method): {"best_weighted": 0.9 + seed / 1000}}}))
    assert L.added_seeds(plan, setting, method, [0, 1, 2]) == pytest.approx({3: 90.3, 4: 90.4})
    assert L.added_seeds(load_plan("quick"), setting, method, [0]) == {}     # a short profile reads its own seeds


def test_a_claim_compares_on_the_added_seeds_both_sides_hold_and_names_them(monkeypatch):
    from fedlib import study
    from fedlib.ledgers import benchmark as L
    from fedlib.plans.benchmark import load_plan

    plan = load_plan("converged")
    rows = [{"setting": "dir", "seed": s, "method": m, "best": b + s / 10, "last": b, "rule": "head", "floats": 1.0,
             "seconds": 1.0} for s in (0, 1, 2) for m, b in (("mpfedcl", 92.0), ("feddistill", 91.0))]
    extra = {"mpfedcl": {3: 92.5, 4: 92.6, 5: 92.7, 6: 92.8}, "feddistill": {3: 91.5, 4: 91.6, 5: 91.7, 6: 91.8}}
    monkeypatch.setattr(L, "added_seeds", lambda p, s, m, seeds, cfg=None: extra[m])
    monkeypatch.setattr(study, "trend", lambda *a, **k: None)
    cells = L.tables(plan, pd.DataFrame(rows))["runs"].cells
    assert cells[("dir", "mpfedcl")]["value"] == pytest.approx(92.1)      # the ranked value: the profile's seeds
    assert sorted(cells[("dir", "mpfedcl")]["by_seed"]) == [0, 1, 2, 3, 4, 5, 6]
    home = next(c for c in L.ledger(plan, pd.DataFrame(rows)) if c.claim.startswith("MP-FedCL beats every other"))
    (t,) = home.tests
    assert (t.n, round(t.margin, 2), t.paired) == (7, 1.0, True) and home.verdict == "supported"
    assert home.note.startswith("the seeds the evidence planner added: MP-FedCL (dir) 3-6; FedDistill (dir) 3-6")
