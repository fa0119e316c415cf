"""The evidence planner (fedlib.evidence): for each open claim, what would decide it and at what cost, the
cheapest first; the budget pays an action shared by several claims once; bad budgets are one-line errors."""

import dataclasses

import numpy as np
import pytest

from fedlib import claims as C
from fedlib import evidence as E
from fedlib import plateau
from fedlib.config import load_config
from fedlib.validation import ConfigError
from tests.conftest import DATA


@pytest.fixture
def groups(tmp_path):
    cfgs = {k: load_config(DATA / "spiral_fedproto.yaml", {"results_dir": str(tmp_path), "train.rounds": 100,
                                                           "algorithm.lam": lam, "name": k})
            for k, lam in (("A", 1.0), ("B", 0.5), ("C", 0.25))}
    return {k: plateau.Group(k, cfg, (0, 1, 2), "acc_proto") for k, cfg in cfgs.items()}


def trend(group, curve):
    return C.trend(group.label, [curve] * 3, group)


def test_an_open_comparison_asks_to_extend_the_side_behind(groups, monkeypatch):
    monkeypatch.setattr(E, "seconds_per_round", lambda g: 2.0)
    monkeypatch.setattr(E, "checkpointed_rounds", lambda cfg, seed: 0)     # archive only: from round 1
    rising = trend(groups["B"], list(np.linspace(50, 90, 100)))
    flat = trend(groups["A"], [90.0] * 100)
    t = C.compare("A - B", [95.0, 95.5, 96.0], [90.0, 90.5, 91.0], a_trend=flat, b_trend=rising)
    c = C.claim("A beats B", "T1", "x", True, "converged", 3, [t])
    assert c.verdict == C.INCONCLUSIVE
    it = E.plan_claim("S", 1, c)
    (a,) = it.actions
    assert (a.kind, a.group, a.rounds) == ("extend", groups["B"], 200)     # the next doubling
    assert a.cost == pytest.approx(3 * 200 * 2.0)                          # 3 seeds from round 1
    assert "A - B: open" in it.why and "extend B (seeds 0, 1, 2) towards its plateau, 200+ rounds" in a.text()
    monkeypatch.setattr(E, "checkpointed_rounds", lambda cfg, seed: 100)   # checkpoints kept: only the new rounds
    assert E.plan_claim("S", 1, c).actions[0].cost == pytest.approx(3 * 100 * 2.0)


def test_a_side_still_rising_at_the_cap_is_listed_past_it_and_never_run(groups, monkeypatch):
    monkeypatch.setattr(E, "seconds_per_round", lambda g: 2.0)
    monkeypatch.setattr(E, "checkpointed_rounds", lambda cfg, seed: plateau.CAP)
    rising = trend(groups["B"], list(np.linspace(50, 90, plateau.CAP)))
    flat = trend(groups["A"], [90.0] * 100)
    c = C.claim("A beats B", "T1", "x", True, "converged", 3,
                [C.compare("A - B", [95.0, 95.5, 96.0], [90.0, 90.5, 91.0], a_trend=flat, b_trend=rising)])
    it = E.plan_claim("S", 1, c)
    (a,) = it.actions
    assert (a.kind, a.rounds) == (E.PAST_CAP, 2 * plateau.CAP)
    assert a.cost == pytest.approx(3 * plateau.CAP * 2.0)                  # the rounds past the cap, from checkpoints
    assert f"still rising at the {plateau.CAP}-round cap" in a.text()
    assert E.within_budget([it], 1e9) == ([], [], 0.0)                     # --run does not take it
    assert f"1 wait on a curve still rising at the {plateau.CAP}-round cap" in E.summary({"S": [c]}, [it])


def test_a_margin_within_the_spread_asks_for_six_seeds_and_one_seed_for_three(groups, monkeypatch):
    monkeypatch.setattr(E, "seconds_per_round", lambda g: 1.0)
    flat_a, flat_b = trend(groups["A"], [90.0] * 100), trend(groups["B"], [89.0] * 100)
    within = C.compare("A - B", [90.0, 92.0, 88.0], [89.5, 91.5, 87.5], a_trend=flat_a, b_trend=flat_b)
    it = E.plan_claim("S", 2, C.claim("A beats B", "T1", "x", True, "paper", 3, [within]))
    # cells that read only the profile's seeds: the profile's seeds would have to grow (listed, not run)
    assert [(a.kind, a.group.label, a.seeds) for a in it.actions] == [(E.PROFILE_SEEDS, "A", 6),
                                                                       (E.PROFILE_SEEDS, "B", 6)]
    assert it.cost == pytest.approx(2 * 3 * 100) and E.within_budget([it], 1e9) == ([], [], 0.0)
    assert "A: 6 seeds (has 3; the profile's seeds would have to grow)" == it.actions[0].text()
    one = C.compare("A - B", [90.0], [89.0],
                    a_trend=C.trend("A", [[90.0] * 100], plateau.Group("A", groups["A"].cfg, (0,), "acc_proto")),
                    b_trend=C.trend("B", [[89.0] * 100], plateau.Group("B", groups["B"].cfg, (0,), "acc_proto")))
    it = E.plan_claim("S", 3, C.claim("A beats B", "T1", "x", True, "paper", 1, [one]))
    assert "one seed" in it.why and [a.seeds for a in it.actions] == [3, 3]
    assert it.actions[1].cost == pytest.approx(2 * 100)                     # B has 1 seed: 2 more of 100 rounds
    short = E.plan_claim("S", 4, C.claim("A beats B", "T1", "x", True, "quick", 3, [within]))
    assert short.actions == [] and short.cost == float("inf") and "quick-profile evidence only" in short.why
    decided = C.claim("A beats B", "T1", "x", True, "paper", 3,
                      [C.compare("A - B", [95.0, 95.5, 96.0], [80.0, 80.5, 81.0])])
    assert E.plan_claim("S", 5, decided) is None


def test_paired_differences_against_the_margin_raise_the_seeds_asked_for(groups, monkeypatch):
    """One of three paired differences against the margin holds the exact test at p >= 2**(1 + 1 - n) however many
    seeds agree: 6 seeds (p >= 0.0625) cannot decide it, so the plan asks for 7 (p >= 0.031), and says why."""
    monkeypatch.setattr(E, "seconds_per_round", lambda g: 1.0)
    assert [C.seeds_for_test(m) for m in range(4)] == [6, 7, 8, 9]
    for n in range(3, 9):      # the floor is reached when the differences against the margin are the smallest
        for m in range(3):
            d = [1.0] * (n - m) + [-1e-6] * m
            assert C.paired_p(d, [0.0] * n) == pytest.approx(min(1.0, 2.0 ** (m + 1 - n)))
    flat = {k: trend(groups[k], [90.0] * 100) for k in ("A", "B")}
    one = C.compare("A - B", [90.0, 92.0, 88.0], [89.0, 91.5, 88.5], a_trend=flat["A"], b_trend=flat["B"])
    assert one.minority == 1 and one.p == 0.75
    it = E.plan_claim("S", 2, C.claim("A beats B", "T1", "x", True, "paper", 3, [one]))
    assert [a.seeds for a in it.actions] == [7, 7]
    assert "1 of 3 paired differences against the margin: the exact test needs 7 seeds or more" in it.why
    two = C.compare("A - B", [90.0, 92.0, 88.0, 90.0], [89.0, 92.5, 88.5, 89.0], a_trend=flat["A"], b_trend=flat["B"])
    assert two.minority == 2 and [a.seeds for a in E.plan_claim("S", 2, C.claim(
        "A beats B", "T1", "x", True, "paper", 4, [two])).actions] == [8, 8]
    tie = C.against_threshold("A above 1", [1.0, 1.0, 1.2], 1.0)          # two differences of zero count
    assert tie.minority == 2


def test_within_the_spread_and_still_rising_asks_for_seeds_and_the_extension_together(groups, monkeypatch):
    """Under the converged profile, more seeds alone would take the margin beyond the spread only to leave it open
    (the side behind still rising): the plan asks for both, and its cost counts both."""
    monkeypatch.setattr(E, "seconds_per_round", lambda g: 1.0)
    monkeypatch.setattr(E, "checkpointed_rounds", lambda cfg, seed: 0)
    rising = trend(groups["B"], list(np.linspace(85, 89, 100)))
    t = C.compare("A - B", [90.0, 92.0, 88.0], [89.5, 91.5, 87.5], a_trend=trend(groups["A"], [90.0] * 100),
                  b_trend=rising)
    c = C.claim("A beats B", "T1", "x", True, "converged", 3, [t])
    it = E.plan_claim("S", 1, c)
    assert it.why == "A - B: within, and B still rising"
    assert [(a.kind, a.group.label, a.seeds) for a in it.actions] == [
        (E.PROFILE_SEEDS, "A", 6), (E.PROFILE_SEEDS, "B", 6), ("extend", "B", 3)]
    assert it.actions[2].rounds == 200 and it.cost == pytest.approx(2 * 3 * 100 + 3 * 200)
    paper = E.plan_claim("S", 1, C.claim("A beats B", "T1", "x", True, "paper", 3, [t]))
    assert [a.kind for a in paper.actions] == [E.PROFILE_SEEDS, E.PROFILE_SEEDS]   # a fixed protocol: no extension


def test_six_seeds_still_within_the_spread_ask_for_twice_as_many(groups, monkeypatch):
    """A side that already has the 6 seeds the plan asks for must not be asked for 6 again at no cost."""
    monkeypatch.setattr(E, "seconds_per_round", lambda g: 1.0)
    six = {k: plateau.Group(k, groups[k].cfg, tuple(range(6)), "acc_proto") for k in ("A", "B")}
    a, b = [90.0, 92.0, 88.0, 91.0, 87.0, 90.5], [89.0, 91.5, 88.5, 90.0, 88.0, 89.0]
    within = C.compare("A - B", a, b, a_trend=C.trend("A", [[90.0] * 100] * 6, six["A"]),
                       b_trend=C.trend("B", [[89.0] * 100] * 6, six["B"]))
    c = C.claim("A beats B", "T1", "x", True, "paper", 6, [within])
    assert c.verdict == C.INCONCLUSIVE
    it = E.plan_claim("S", 6, c)
    assert [(x.group.label, x.seeds) for x in it.actions] == [("A", 12), ("B", 12)]
    assert it.cost == pytest.approx(2 * 6 * 100) and "A: 12 seeds (has 6;" in it.actions[0].text()


def test_a_side_that_has_the_seeds_asked_for_is_not_asked_again(groups, monkeypatch):
    """6 seeds against 4, within the spread: only the side with 4 gets seeds (2 more), never "add seeds  to A"."""
    monkeypatch.setattr(E, "seconds_per_round", lambda g: 1.0)
    a6 = plateau.Group("A", groups["A"].cfg, tuple(range(6)), "acc_proto", more=True)
    b4 = plateau.Group("B", groups["B"].cfg, tuple(range(4)), "acc_proto", more=True)
    t = C.compare("A - B", [91.0, 93.0, 89.0, 92.0, 88.0, 91.5], [89.0, 91.5, 88.5, 90.0], paired=False,
                  a_trend=C.trend("A", [[90.0] * 100] * 6, a6), b_trend=C.trend("B", [[89.0] * 100] * 4, b4))
    it = E.plan_claim("S", 4, C.claim("A beats B", "T1", "x", True, "paper", 4, [t]))
    assert [(x.kind, x.group.label, x.added) for x in it.actions] == [("seeds", "B", (4, 5))]
    assert it.cost == pytest.approx(2 * 100) and it.actions[0].text() == "add seeds 4, 5 to B (6 in all, 100 rounds)"


def test_a_claim_that_needs_an_exact_p_asks_for_seeds_where_its_p_is_not_below_alpha(groups, monkeypatch):
    """Every comparison beyond the spread, but the claim (a paper's significance test) needs p < 0.05 against each:
    the plan names the comparison whose p is not and asks for its seeds; it is never an empty row."""
    monkeypatch.setattr(E, "seconds_per_round", lambda g: 1.0)
    a6 = plateau.Group("A", groups["A"].cfg, tuple(range(6)), "acc_proto", more=True)
    b4 = plateau.Group("B", groups["B"].cfg, tuple(range(4)), "acc_proto", more=True)
    t = C.compare("A - B", [92.0, 90.0, 91.0, 88.0, 93.0, 91.5], [88.5, 90.5, 87.5, 88.0], paired=False,
                  a_trend=C.trend("A", [[90.0] * 100] * 6, a6), b_trend=C.trend("B", [[89.0] * 100] * 4, b4))
    assert t.status() == C.FOR and t.p >= C.ALPHA
    c = C.Claim("A is significantly better than B", "T1", "x", C.INCONCLUSIVE, "but exact p >= 0.05 against B",
                "paper", (t,))
    it = E.plan_claim("S", 2, c)
    assert it.why == f"A - B: exact p {t.p:.2f} >= 0.05" and it.need == ""
    assert [(x.group.label, x.added) for x in it.actions] == [("B", (4, 5))]
    bare = E.plan_claim("S", 2, C.Claim("A beats B", "T1", "x", C.INCONCLUSIVE, "why not", "paper", ()))
    assert bare.why and bare.need                                          # says something, even with no test
    decided = C.compare("A - B", [95.0, 95.5, 96.0, 95.2, 95.7, 96.1], [80.0, 80.5, 81.0, 80.2, 80.7, 81.1])
    odd = E.plan_claim("S", 3, C.Claim("A beats B", "T1", "x", C.INCONCLUSIVE, "a reason", "paper", (decided,)))
    assert (odd.why, odd.actions, odd.need) == ("see the ledger's note", [], "a reason")


def test_the_budget_takes_the_cheapest_claims_and_pays_a_shared_action_once(groups):
    g = groups
    share = E.Action("extend", g["A"], 200, 3, 100.0)
    items = [E.Item("S", 1, None, "", [share]),
             E.Item("S", 2, None, "", [share, E.Action("extend", g["B"], 200, 3, 50.0)]),
             E.Item("S", 3, None, "", [E.Action("extend", g["C"], 200, 3, 500.0)]),
             E.Item("S", 4, None, "", [E.Action(E.PROFILE_SEEDS, g["C"], 100, 6, 10.0)])]
    chosen, actions, spent = E.within_budget(items, 200.0)
    assert [it.number for it in chosen] == [1, 2] and spent == 150.0 and len(actions) == 2
    assert E.within_budget(items, 1000.0)[2] == 650.0                       # a profile's seeds: listed, not run
    items.append(E.Item("S", 5, None, "", [E.Action("seeds", g["B"], 100, 6, 20.0)]))
    assert E.within_budget(items, 1000.0)[2] == 670.0                       # seeds added to a group: run


def test_a_budget_too_small_for_every_claim_says_so_and_what_would_do(groups, monkeypatch, capsys):
    """`--run --budget 60m --workers 2 --claim benchmark:14` on a 2.4 CPU-hour claim trained nothing and said only
    "verdicts changed: 0": the run says why and which budget would do."""
    items = [E.Item("S", 1, None, "", [E.Action("seeds", groups["A"], 100, 6, 2.4 * 3600)]),
             E.Item("S", 2, None, "", [E.Action(E.PAST_CAP, groups["B"], 800, 3, 1.0)])]
    monkeypatch.setattr(plateau, "fill", lambda *a, **k: pytest.fail("nothing fits: nothing trains"))
    assert E.run(items, 3600.0, workers=2, progress=False) == []
    assert capsys.readouterr().out == ("evidence: nothing to run: the cheapest claim chosen needs 2.4 CPU-hours, more "
                                       "than --budget 60m buys on 2 workers (2.0); give --budget 72m or more\n")
    assert E.too_small(items[1:], 3600.0, 2) == ""   # past the cap only: nothing --run would ever take


def test_budgets_parse_and_bad_ones_are_one_line_errors():
    assert E.parse_budget("3h") == 10800 and E.parse_budget("90m") == 5400 and E.parse_budget("45s") == 45
    assert E.parse_budget("1.5") == 5400
    for bad in ("0h", "-1h", "three hours", "2d"):
        with pytest.raises(ConfigError, match="--budget: got .*; allowed: a positive duration such as 3h, 90m or 45s"):
            E.parse_budget(bad)


def test_the_summary_line_counts_decided_of_testable():
    up = C.compare("A - B", [90.0, 91.0, 92.0], [80.0, 81.0, 82.0])
    books = {"S": [C.claim("a", "T", "x", True, "paper", 3, [up]), C.claim("b", "T", "x", True, "quick", 1),
                   C.untested("c", "T", "no data")]}
    assert E.counts(books) == (1, 2)
    assert E.summary(books, E.plan(books)).startswith("claims decided: 1 of 2 testable; the next 10 CPU-hours")


def test_a_gpu_takes_the_plan_from_its_costliest_end_and_a_saved_plan_reads_back(groups, tmp_path):
    items = [E.Item("s", i, None, "open", [E.Action("extend", g, 200, 3, cost)])
             for i, (g, cost) in enumerate(((groups["A"], 10.0), (groups["C"], 20.0), (groups["B"], 30.0)), 1)]
    # (in the cheapest-first order of E.plan)
    gpu = E.gpu_groups(items, plan_hours=1)
    assert [g.label for g in gpu] == ["B", "C", "A"]
    assert [g.label for g in E.gpu_groups(items, plan_hours=30 / 3600)] == ["C", "A"]   # 10 + 20 fit, 30 more not
    path = tmp_path / "plan.json"
    E.save_plan(path, gpu)
    back = E.load_plan(path)
    assert [(g.label, g.seeds, g.metric, g.stat) for g in back] == [(g.label, g.seeds, g.metric, g.stat) for g in gpu]
    from fedlib.config import run_id

    assert [run_id(g.cfg, 0) for g in back] == [run_id(g.cfg, 0) for g in gpu]
    placed = E.on_device(back[0], "cuda")
    assert (placed.cfg["device"], placed.cfg["executor"]) == ("cuda", "batched") and placed.label == "B [cuda]"
    assert run_id(placed.cfg, 0) != run_id(back[0].cfg, 0)      # a GPU's runs are runs of their own
    path.write_text('[{"label": "x"}]')
    with pytest.raises(ConfigError, match=r"^--plan: .*plan\.json is not an evidence plan \(KeyError"):
        E.load_plan(path)


def test_a_gpu_plan_adds_seeds_too_except_where_the_cells_derive_values_from_the_models(groups, tmp_path):
    """Seeds actions go to the GPU as groups to fill (the added seeds, to their rounds; stacked there), after the
    plan's extensions are taken costliest first; a group whose cells read attacks on its trained models stays on a
    CPU. The saved plan reads back both kinds, and a plan written before fills existed reads as extensions only."""
    more = {k: dataclasses.replace(groups[k], more=True) for k in ("A", "B")}
    derives = dataclasses.replace(more["B"], label="B attacked", derive=("m:f", "paper"))
    items = [E.Item("s", 1, None, "open", [E.Action("extend", groups["C"], 200, 3, 30.0)]),
             E.Item("s", 2, None, "within", [E.Action("seeds", more["A"], 100, 6, 20.0),
                                              E.Action("seeds", derives, 30, 6, 5.0)])]
    extend, fills = E.gpu_work(items, plan_hours=1)
    assert [g.label for g in extend] == ["C"] and E.gpu_groups(items, plan_hours=1) == extend
    assert [(g.label, g.seeds, r) for g, r in fills] == [("A", (0, 1, 2, 3, 4, 5), 100)]
    path = tmp_path / "plan.json"
    E.save_plan(path, extend, fills)
    assert [g.label for g in E.load_plan(path)] == ["C"]
    assert [(g.label, g.seeds, r) for g, r in E.load_fills(path)] == [("A", (0, 1, 2, 3, 4, 5), 100)]
    E.save_plan(path, extend)
    assert E.load_fills(path) == [] and [g.label for g in E.load_plan(path)] == ["C"]


def test_on_a_gpu_a_groups_added_seeds_train_as_one_batch(tmp_path, monkeypatch):
    """plateau.fill hands a CUDA group's missing seeds to the runner at once (stacked there: one stacked group), and
    a CPU group's to one queue of ``workers``; the seeds a group holds on another placement are not trained again."""
    from fedlib import grid
    from fedlib.runner import run_one

    cfg = load_config(DATA / "spiral_fedproto.yaml", {"results_dir": str(tmp_path), "train.rounds": 2})
    run_one(cfg, 1, progress=False)
    calls = []
    monkeypatch.setattr(grid, "run_many", lambda jobs, **k: calls.append([(c["device"], s) for c, s in jobs]))
    group = plateau.Group("spiral", cfg, (1, 2, 3), "acc_proto", more=True)
    plateau.fill([group], workers=1, progress=False)
    assert calls == [[("cpu", 2), ("cpu", 3)]]
    calls.clear()
    plateau.fill([E.on_device(group, "cuda")], workers=1, progress=False)
    assert calls == [[("cuda", 2), ("cuda", 3)]]                # seed 1, finished on the CPU, is read there


def test_on_the_cpu_the_groups_added_seeds_train_in_turn(tmp_path, monkeypatch):
    """Two groups' added seeds alternate in the one queue (the first of each, then the second of each), so a fill
    stopped after any run has grown both sides of their comparison alike (within one run); a group with fewer missing
    seeds drops out when done. One queue, not batches of ``workers``: a worker whose run ends takes the next at once
    (in batches, FedMPS Table VI's seeds left one of 2 cores idle for half of each batch behind a slower rival's
    run)."""
    from fedlib import grid

    cfg = load_config(DATA / "spiral_fedproto.yaml", {"results_dir": str(tmp_path), "train.rounds": 2})
    other = load_config(DATA / "spiral_fedproto.yaml", {"results_dir": str(tmp_path), "train.rounds": 2,
                                                        "algorithm.lam": 0.5})
    calls = []
    monkeypatch.setattr(grid, "run_many", lambda jobs, **k: calls.append(
        [("a" if c["algorithm"] == cfg["algorithm"] else "b", s) for c, s in jobs]))
    plateau.fill([plateau.Group("a", cfg, (1, 2, 3), "acc_proto", more=True),
                  plateau.Group("b", other, (1, 2), "acc_proto", more=True)], workers=2, progress=False)
    assert calls == [[("a", 1), ("b", 1), ("a", 2), ("b", 2), ("a", 3)]]


def test_a_per_round_cost_on_rising_curves_is_judged_now_and_its_seeds_are_costed(groups, monkeypatch):
    # FedIC's round-time claim (a `ratio` of seconds per round): the accuracy curves of its runs may still rise, but
    # a round's seconds are no best-so-far curve: never "open"; within the spread, the planner asks for more seeds of
    # both sides' runs (it once said "the ledger does not name the runs of every side")
    monkeypatch.setattr(E, "seconds_per_round", lambda g: 1.0)
    rising = {k: trend(groups[k], list(np.linspace(50, 90, 100))) for k in ("A", "B")}
    spec = {"id": "c", "claim": "A costs at most 1.5x B", "source": "T1", "table": "t", "kind": "ratio",
            "subject": "a", "rival": "b", "field": "secs", "below": 1.5, "evidence": "{ratio:.2f}x"}
    book = C.Book("x/claims.yaml", C.check_book({"claims": [spec]}, "x/claims.yaml"))

    def cells(secs_a):
        return {"a": {"label": "A", "value": 0.0, "secs": secs_a, "trend": rising["A"]},
                "b": {"label": "B", "value": 0.0, "secs": [1.0, 1.0, 1.0], "trend": rising["B"]}}

    (fast,) = C.evaluate(book, {"t": C.Cells(cells([1.0, 1.1, 0.9]), "converged")})
    assert fast.verdict == C.SUPPORTED                       # decided although both accuracy curves still rise
    (near,) = C.evaluate(book, {"t": C.Cells(cells([1.4, 0.5, 1.45]), "converged")})
    assert near.verdict == C.INCONCLUSIVE and near.tests[0].status(True) == C.WITHIN
    it = E.plan_claim("S", 3, near)
    assert it.need == "" and {(a.kind, a.group.label, a.seeds) for a in it.actions} == {
        (E.PROFILE_SEEDS, "A", 6), (E.PROFILE_SEEDS, "B", 6)}
    assert sum(a.cost for a in it.actions) == pytest.approx(2 * 3 * 100 * 1.0)   # 3 more seeds each, 100 rounds


def within_added(groups, rounds_a: int = 100) -> C.Comparison:
    """A margin within the spread between A and B, whose cells read the seeds added to their run groups."""
    more = {k: plateau.Group(k, groups[k].cfg, (0, 1, 2), "acc_proto", more=True) for k in ("A", "B")}
    return C.compare("A - B", [90.0, 92.0, 88.0], [89.5, 91.5, 87.5],
                     a_trend=C.trend("A", [[90.0] * rounds_a] * 3, more["A"]),
                     b_trend=C.trend("B", [[89.0] * 100] * 3, more["B"]))


def test_cells_that_read_added_seeds_plan_the_next_seeds_of_that_group_alone(groups, monkeypatch):
    monkeypatch.setattr(E, "seconds_per_round", lambda g: 1.0)
    it = E.plan_claim("S", 2, C.claim("A beats B", "T1", "x", True, "converged", 3, [within_added(groups)]))
    a, b = it.actions
    assert (a.kind, a.seeds, a.added, a.grown.seeds, a.grown.more) == ("seeds", 6, (3, 4, 5), (0, 1, 2, 3, 4, 5), True)
    assert a.text() == "add seeds 3, 4, 5 to A (6 in all, 100 rounds)" and it.cost == pytest.approx(2 * 3 * 100)
    assert E.within_budget([it], 600.0)[1] == [a, b] and E.within_budget([it], 599.0)[1] == []
    assert "1 more to where the rule can decide them" in E.summary({"S": [it.claim]}, [it])


def test_seeds_for_a_claim_at_a_fixed_protocol_train_its_configs_own_rounds(groups, monkeypatch):
    """A run shared with a table that extends it (FedMPS's Table III and the benchmark) holds more rounds than
    the protocol reads: the seeds a paper-profile claim needs train to the config's own 100 rounds, not to 400."""
    monkeypatch.setattr(E, "seconds_per_round", lambda g: 1.0)
    within = within_added(groups, rounds_a=400)
    paper = E.plan_claim("S", 1, C.claim("A beats B", "T1", "x", True, "paper", 3, [within]))
    assert [(a.rounds, a.cost) for a in paper.actions] == [(100, 300.0), (100, 300.0)]
    converged = E.plan_claim("S", 1, C.claim("A beats B", "T1", "x", True, "converged", 3, [within]))
    assert [a.rounds for a in converged.actions] == [400, 100]      # a converged claim reads the runs as extended


def test_seeds_to_separate_is_the_normal_approximation_at_a_margin_one_standard_error_larger():
    za, zb = 1.959963984540054, 0.8416212335729143                       # 0.975 and 0.8 normal quantiles
    d = np.array([1.0, -0.5, 0.7, 0.2])                                  # paired differences: mean 0.35
    t = C.compare("A - B", list(90.0 + d), [90.0] * 4)
    sd = float(np.std(d, ddof=1))
    assert t.diff_spread == pytest.approx(sd)
    assert t.seeds_to_separate() == pytest.approx(((za + zb) * sd / (0.35 + sd / 2)) ** 2 + za ** 2 / 2)
    u = C.compare("A - B", [91.0, 93.0, 89.0], [90.0, 90.5, 89.5], paired=False)
    s, se = 2.0, 2.0 * np.sqrt(2 / 3)                                    # the larger side's std; two-sample error
    assert u.seeds_to_separate() == pytest.approx(2 * ((za + zb) * s / (1.0 + se)) ** 2 + za ** 2 / 4)
    assert C.compare("A - B", [90.0, 91.0, 92.0], [90.0, 91.0, 92.0]).seeds_to_separate() == float("inf")
    assert np.isnan(C.compare("A - B", [90.0], [89.0]).seeds_to_separate())


def test_a_near_tie_asks_for_no_seeds_and_says_so(groups, monkeypatch):
    """MP-FedCL's Table VI: +0.18 against differences of std ~5 over 24 seeds. The m + 6 floor asked for 48 seeds,
    which at that margin would decide nothing: a near-tie is named, with the seeds it would take, and left alone."""
    monkeypatch.setattr(E, "seconds_per_round", lambda g: 1.0)
    rng = np.random.default_rng(0)
    d = rng.normal(0.0, 5.0, 24)
    d += 0.18 - d.mean()
    g24 = {k: plateau.Group(k, groups[k].cfg, tuple(range(24)), "acc_proto", more=True) for k in ("A", "B")}
    tr = {k: C.trend(k, [[90.0] * 100] * 24, g24[k]) for k in ("A", "B")}
    tie = C.compare("A - B", list(90.0 + d), [90.0] * 24, a_trend=tr["A"], b_trend=tr["B"])
    assert tie.status(False) == C.WITHIN and tie.seeds_to_separate() > E.NEAR_TIE_SEEDS
    c = C.claim("A beats B", "T1", "x", True, "paper", 24, [tie])
    it = E.plan_claim("S", 1, c)
    assert it.actions == [] and it.need == E.NEAR_TIE_NEED and it.cost == float("inf")
    assert it.why.startswith("A - B: a near-tie (+0.18 against a seed std of") and "more than 30)" in it.why
    assert f"seeds per side, more than {E.NEAR_TIE_SEEDS}" in it.why
    assert "; 1 is a near-tie that no affordable number of seeds would decide" in E.summary({"S": [c]}, [it])
    same = C.compare("A - B", [90.0, 91.0, 92.0], [90.0, 91.0, 92.0], a_trend=tr["A"], b_trend=tr["B"])
    it = E.plan_claim("S", 2, C.claim("A beats B", "T1", "x", True, "paper", 3, [same]))
    assert it.why == "A - B: identical on every seed: no number of seeds separates them" and it.actions == []


def test_beside_a_near_tie_only_a_comparison_against_the_claim_is_still_worth_seeds(groups, monkeypatch):
    """A claim with a near-tie cannot become supported; a comparison going against it can still make it not
    supported, so its seeds are asked for, and a comparison for it (which could only agree) gets none."""
    monkeypatch.setattr(E, "seconds_per_round", lambda g: 1.0)
    g = {k: plateau.Group(k, groups[k].cfg, (0, 1, 2), "acc_proto", more=True) for k in ("A", "B", "C")}
    tr = {k: C.trend(k, [[90.0] * 100] * 3, g[k]) for k in g}
    same = C.compare("A - B", [90.0, 91.0, 92.0], [90.0, 91.0, 92.0], a_trend=tr["A"], b_trend=tr["B"])
    ahead = C.compare("A - C", [90.0, 92.0, 88.0], [89.5, 91.5, 87.5], a_trend=tr["A"], b_trend=tr["C"])
    behind = C.compare("A - C", [89.5, 91.5, 87.5], [90.0, 92.0, 88.0], a_trend=tr["A"], b_trend=tr["C"])
    assert ahead.status(False) == behind.status(False) == C.WITHIN
    up = E.plan_claim("S", 1, C.claim("A beats B and C", "T1", "x", True, "paper", 3, [same, ahead]))
    assert up.actions == [] and up.need == E.NEAR_TIE_NEED and "A - C: within" in up.why
    down = E.plan_claim("S", 2, C.claim("A beats B and C", "T1", "x", False, "paper", 3, [same, behind]))
    assert [(a.group.label, a.seeds) for a in down.actions] == [("A", 6), ("C", 6)] and down.need == ""


def test_a_group_both_given_seeds_and_extended_is_extended_with_its_added_seeds(groups, monkeypatch):
    """ProtoNorm's practical claim asks for FedDistill's seeds 3-6 and for FedDistill's extension: filling the seeds
    to 100 rounds and extending seeds 0-2 alone would leave the group's shortest seeds at 100 rounds, its trend
    there, still rising. The extension takes the grown group; only a group with seeds alone is filled first."""
    monkeypatch.setattr(E, "seconds_per_round", lambda g: 1.0)
    monkeypatch.setattr(E, "checkpointed_rounds", lambda cfg, seed: 0)
    more = {k: plateau.Group(k, groups[k].cfg, (0, 1, 2), "acc_proto", more=True) for k in ("A", "B")}
    rising = C.trend("B", [list(np.linspace(85, 89, 100))] * 3, more["B"])
    t = C.compare("A - B", [90.0, 92.0, 88.0], [89.5, 91.5, 87.5], a_trend=C.trend("A", [[90.0] * 100] * 3, more["A"]),
                  b_trend=rising)
    it = E.plan_claim("S", 1, C.claim("A beats B", "T1", "x", True, "converged", 3, [t]))
    assert [(a.kind, a.group.label) for a in it.actions] == [("seeds", "A"), ("seeds", "B"), ("extend", "B")]
    extend, fill = E.extensions_and_seeds(it.actions)
    assert [(g.label, g.seeds) for g in extend] == [("B", (0, 1, 2, 3, 4, 5))]
    assert [(a.group.label, a.added) for a in fill] == [("A", (3, 4, 5))]
    calls = {}
    monkeypatch.setattr(plateau, "fill", lambda gs, **kw: calls.setdefault("fill", [g.seeds for g in gs]))
    monkeypatch.setattr(plateau, "run", lambda gs, **kw: calls.setdefault("run", [(g.label, g.seeds) for g in gs]))
    E.run([it], 1e6, workers=1, progress=False)
    assert calls == {"fill": [(0, 1, 2, 3, 4, 5)], "run": [("B", (0, 1, 2, 3, 4, 5))]}


def _item(section, number):
    return E.Item(section, number, C.Claim("c", "s", "e", C.INCONCLUSIVE), "why", [])


def test_claims_are_chosen_by_a_word_of_their_section_and_their_number():
    items = [_item("FedIC (Zheng et al., AAAI 2026)", 2), _item("FedIC (Zheng et al., AAAI 2026)", 5),
             _item("One benchmark across the five papers", 11), _item("MP-FedCL (Qiao et al.)", 1),
             _item("FedMPS (Yang et al.)", 1)]
    assert E.select(items, ["fedic:5", "Benchmark:11"]) == [items[1], items[2]]
    # the section's name as `--only` spells it: hyphens and spaces of the title ignored
    assert E.select(items, ["mpfedcl:1", "MP-FedCL:1", "mp-fedcl:1"]) == [items[3]] * 3
    assert E.parse_claim(" fedic :2") == ("fedic", 2)
    for bad, words in (("fedic", "SECTION:N"), ("fedic:x", "SECTION:N"), (":3", "SECTION:N"),
                       ("fed:1", "several sections match"), ("gfpl:1", "no section with an open claim matches"),
                       ("fedic:3", "an open claim of FedIC (Zheng et al., AAAI 2026) (open there: 2, 5)")):
        with pytest.raises(ConfigError, match="--claim") as exc:
            E.select(items, [bad])
        assert words in str(exc.value) and "\n" not in str(exc.value)


def test_a_bad_claim_option_is_one_line_before_any_ledger_renders(monkeypatch, capsys):
    from fedlib import render

    monkeypatch.setattr(render, "ledgers", lambda: pytest.fail("rendered the ledgers for a bad --claim"))
    assert render.evidence_main(["--claim", "fedic"]) == 2
    out = capsys.readouterr().out.strip()
    assert len(out.splitlines()) == 1 and "--claim" in out and "SECTION:N" in out


def test_sides_on_different_seeds_count_the_shared_seeds_against_the_margin():
    """Row 6 holds seeds 0-5, row 5 seeds 0-2 (seeds added to one side): the comparison is unpaired, but the seeds
    both hold pair up once row 5 is given the others, and two of those three differences go against the margin, so
    the paired test will need 8 seeds; the plan says so and asks 8 of each side."""
    book = C.Book("x/claims.yaml", C.check_book({"claims": [{
        "id": "c", "kind": "chain", "claim": "6 above 5", "source": "T", "table": "t", "order": [5, 6],
        "evidence": "x"}]}, "x/claims.yaml"))
    six = {"label": "6", "value": 0.0, "per_seed": [90.0, 89.0, 89.5, 93.0, 94.0, 95.0], "seeds": [0, 1, 2, 3, 4, 5]}
    five = {"label": "5", "value": 0.0, "per_seed": [89.0, 90.0, 90.0], "seeds": [0, 1, 2]}
    (claim,) = C.evaluate(book, {"t": C.Cells({5: five, 6: six}, "paper")})
    (t,) = claim.tests
    assert (t.paired, t.minority) == (False, 2) and claim.verdict == C.INCONCLUSIVE
    assert "2 of 3 shared-seed paired differences against the margin: the exact test needs 8 seeds" in \
        E.plan_claim("S", 1, claim).why


def test_the_plan_command_lists_and_adds_a_saved_plans_seeds(tmp_path, monkeypatch, capsys):
    """``evidence --plan FILE`` lists a saved plan's seeds to add, and with ``--run`` trains them (here on the CPU:
    the same path a GPU takes, each group's seeds at once) and archives each run."""
    from fedlib import archive, render
    from fedlib.runner import run_one

    monkeypatch.setenv("FEDLIB_ROOT", str(tmp_path))   # the plan's runs go to this results folder
    cfg = load_config(DATA / "spiral_fedproto.yaml", {"results_dir": str(tmp_path / "results"), "train.rounds": 2})
    run_one(cfg, 0, progress=False)
    path = tmp_path / "plan.json"
    E.save_plan(path, [], [(plateau.Group("spiral", cfg, (0, 1), "acc_proto", more=True), 2)])
    assert render.evidence_main(["--plan", str(path)]) == 0
    assert capsys.readouterr().out.strip() == "spiral: seeds 0, 1 to 2 rounds"
    assert archive.summary(cfg, 1) is None
    assert render.evidence_main(["--run", "--plan", str(path), "--budget", "5m", "--workers", "1"]) == 0
    assert archive.summary(cfg, 1)["rounds"] == 2 and archive.summary(cfg, 0) is None   # only the added seed


def test_a_claim_not_tested_here_is_listed_with_its_reason_and_nothing_to_run():
    """The planner lists every claim not tested here (the issue: "for every inconclusive or not-tested claim"), with
    the ledger's reason and no action; the summary counts it apart, and ``--claim`` refuses it (nothing to run)."""
    from fedlib.validation import ConfigError

    gone = C.untested("Columns of a dataset not here", "T9", "the data are not on this machine")
    it = E.plan_claim("S", 3, gone)
    assert it.why == "not tested: the data are not on this machine" and it.need == E.NOT_TESTED_NEED
    assert it.actions == [] and it.cost == float("inf")
    assert E.table([it]).loc[0, "what would decide it"] == E.NOT_TESTED_NEED
    by_construction = C.claim("A is built so", "T1", "x", True, "paper", 3, construction="how it is built")
    assert E.plan_claim("S", 4, by_construction) is None
    ledgers = {"S": [gone, by_construction]}
    assert E.counts(ledgers) == (0, 0)                       # neither is testable
    assert E.summary(ledgers, E.plan(ledgers)).endswith(
        "; 1 is not tested here (each listed with what is missing: data, weights or archived runs)")
    with pytest.raises(ConfigError, match=r"--claim.*no section with an open claim matches"):
        E.select(E.plan(ledgers), ["S:3"])


def test_within_the_spread_with_the_side_ahead_still_rising_extends_it_before_any_seeds(groups, monkeypatch):
    """Under the converged profile a margin whose side ahead is still rising is not the plateau-against-plateau
    margin (and can only grow: best-so-far values): the plan extends that side and asks for no seeds, nor calls the
    margin a near-tie; at the cap, or at a fixed protocol, it asks for seeds as before."""
    monkeypatch.setattr(E, "seconds_per_round", lambda g: 1.0)
    monkeypatch.setattr(E, "checkpointed_rounds", lambda cfg, seed: 100)
    rising = trend(groups["A"], list(np.linspace(85, 90, 100)))
    flat = trend(groups["B"], [89.0] * 100)
    t = C.compare("A - B", [90.0, 92.0, 88.0], [89.5, 91.5, 87.5], a_trend=rising, b_trend=flat)
    assert t.ahead is rising and t.behind is flat and t.status(True) == C.WITHIN
    it = E.plan_claim("S", 1, C.claim("A beats B", "T1", "x", True, "converged", 3, [t]))
    assert it.why == "A - B: within, and A (ahead) still rising"
    assert [(a.kind, a.group.label, a.rounds) for a in it.actions] == [("extend", "A", 200)]
    assert it.cost == pytest.approx(3 * 100 * 1.0)                          # from the checkpoints at round 100
    a6 = [90.0, 92.0, 88.0, 91.0, 87.0, 90.0]
    d6 = [-1.0, 1.1, -0.9, 1.0, -1.1, 1.0]                                 # a mean of +0.02 against a std of 1.1
    tie = C.compare("A - B", a6, [x - d for x, d in zip(a6, d6, strict=True)], a_trend=rising, b_trend=flat)
    assert E.near_tie(tie)                                                  # would be a near-tie, were A settled
    it = E.plan_claim("S", 1, C.claim("A beats B", "T1", "x", True, "converged", 3, [tie]))
    assert [(a.kind, a.group.label) for a in it.actions] == [("extend", "A")] and "near-tie" not in it.why
    twins = C.compare("A - B", [90.0, 92.0, 88.0], [90.0, 92.0, 88.0], a_trend=flat, b_trend=rising)
    assert twins.ahead is rising                                            # a zero margin: b counts as ahead
    it = E.plan_claim("S", 1, C.claim("A beats B", "T1", "x", True, "converged", 3, [twins]))
    assert "identical on every seed" in it.why and it.actions == []        # no extension separates twins
    paper = E.plan_claim("S", 1, C.claim("A beats B", "T1", "x", True, "paper", 3, [t]))
    assert [a.kind for a in paper.actions] == [E.PROFILE_SEEDS, E.PROFILE_SEEDS]
    capped = trend(groups["A"], list(np.linspace(85, 90, plateau.CAP)))
    at_cap = C.compare("A - B", [90.0, 92.0, 88.0], [89.5, 91.5, 87.5], a_trend=capped, b_trend=flat)
    it = E.plan_claim("S", 1, C.claim("A beats B", "T1", "x", True, "converged", 3, [at_cap]))
    assert [a.kind for a in it.actions] == [E.PROFILE_SEEDS, E.PROFILE_SEEDS] and "(ahead)" not in it.why


def test_a_decision_on_a_young_plateau_with_little_to_spare_asks_for_one_step_to_confirm_it(groups, monkeypatch,
                                                                                             capsys):
    """FedIC vs FedDistill on pat was decided with 0.01 beyond the spread on a side plateaued from round 85 of 100:
    the planner lists such a decision with the step that shows the plateau hold (--confirm), counts it in the summary,
    and once the plateau has held a step (from round 83 at 150 rounds) or the margin spares more, asks nothing."""
    monkeypatch.setattr(E, "seconds_per_round", lambda g: 2.0)
    monkeypatch.setattr(E, "checkpointed_rounds", lambda cfg, seed: 0)
    young = trend(groups["B"], [50.0] * 65 + [90.0] * 35)          # plateaued from round 83, at 100 rounds
    held = trend(groups["B"], [50.0] * 65 + [90.0] * 85)           # the same plateau a step later
    flat = trend(groups["A"], [95.0] * 100)
    assert young.plateaued and young.since == 83 and held.plateaued and held.since == 83
    thin = C.claim("A beats B", "T1", "x", True, "converged", 3,
                   [C.compare("A - B", [90.4, 91.4, 92.4], [89.0, 90.0, 91.0], a_trend=flat, b_trend=young)])
    wide = C.claim("A beats B", "T2", "x", True, "converged", 3,
                   [C.compare("A - B", [93.0, 94.0, 95.0], [89.0, 90.0, 91.0], a_trend=flat, b_trend=young)])
    again = C.claim("A beats B", "T3", "x", True, "converged", 3,
                    [C.compare("A - B", [90.4, 91.4, 92.4], [89.0, 90.0, 91.0], a_trend=flat, b_trend=held)])
    assert thin.verdict == wide.verdict == again.verdict == C.SUPPORTED and "little to spare" in thin.note
    books = {"S": [thin, wide, again]}
    (it,) = E.confirmations(books)
    (a,) = it.actions
    assert (it.number, a.kind, a.group, a.rounds) == (1, E.CONFIRM, groups["B"], 150)
    assert a.cost == pytest.approx(3 * 150 * 2.0)                              # from round 1: no checkpoint
    assert it.why == "A - B: B plateaued from round 83 at 100 rounds, 0.40 to spare"
    assert a.text() == "extend B (seeds 0, 1, 2) one step, to 150 rounds, to see its plateau hold"
    assert E.plan(books) == []                                                 # decided: not in the open plan
    assert E.summary(books, []).endswith("of the decided, 1 rests on a plateau held for fewer than 50 rounds with "
                                         "less than 0.75 points to spare (one step further would show it hold: 0.2 "
                                         "CPU-hours, `python -m fedlib evidence --confirm`)")
    # --run --confirm takes the step and archives each run as it is kept
    ran, kept = [], []
    monkeypatch.setattr("fedlib.grid.run_many", lambda jobs, **kw: ran.extend(jobs))
    monkeypatch.setattr(E, "keep", lambda cfg, s: kept.append((cfg["train"]["extend_to"], s)))
    assert E.confirm([it], budget=3600, workers=2, progress=False) == [groups["B"]]
    assert kept == [(150, 0), (150, 1), (150, 2)] and len(ran) == 3
    # the command lists them; with --run it takes the steps, then says which verdicts changed
    from fedlib import render

    monkeypatch.setattr(render, "ledgers", lambda: books)
    assert render.evidence_main(["--confirm"]) == 0
    out = capsys.readouterr().out
    assert "B plateaued from round 83 at 100 rounds, 0.40 to spare" in out and "one step, to 150 rounds" in out
    kept.clear()
    assert render.evidence_main(["--confirm", "--run", "--budget", "1h", "--workers", "1"]) == 0
    assert kept == [(150, 0), (150, 1), (150, 2)] and "verdicts changed: 0" in capsys.readouterr().out
