"""fedlib/ranking.py against hand computations and Demšar's (JMLR 2006) tables."""

import math

import matplotlib
import numpy as np
import pandas as pd
import pytest

from fedlib import ranking

matplotlib.use("Agg")


def blocks(rows):
    index = pd.MultiIndex.from_tuples([r[0] for r in rows], names=["setting", "seed"])
    return pd.DataFrame([r[1] for r in rows], index=index, columns=["A", "B", "C"])


def test_ranks_best_first_ties_share_the_mean_nan_stays_out():
    s = blocks([(("x", 0), [90, 80, 70]), (("x", 1), [80, 80, 70]), (("y", 0), [60, np.nan, 70])])
    r = ranks = ranking.ranks(s)
    assert r.loc[("x", 0)].tolist() == [1, 2, 3]
    assert r.loc[("x", 1)].tolist() == [1.5, 1.5, 3]
    assert r.loc[("y", 0)].tolist()[0] == 2 and math.isnan(ranks.loc[("y", 0), "B"]) and r.loc[("y", 0), "C"] == 1


def test_mean_ranks_per_group_and_overall_by_hand():
    s = blocks([(("x", 0), [90, 80, 70]), (("x", 1), [80, 80, 70]), (("y", 0), [60, np.nan, 70])])
    m = ranking.mean_ranks(s, by="setting")
    assert m.loc["A"].tolist() == [1.25, 2.0, (1 + 1.5 + 2) / 3]
    assert m.loc["B", "x"] == 1.75 and math.isnan(m.loc["B", "y"]) and m.loc["B", "overall"] == 1.75
    assert m.loc["C", "overall"] == pytest.approx(7 / 3)


def test_friedman_by_hand_and_as_scipy():
    from scipy.stats import friedmanchisquare

    s = pd.DataFrame([[3, 2, 1], [3, 1, 2], [2, 3, 1], [3, 2, 1]], columns=list("ABC"), dtype=float)
    stat, p, n, k = ranking.friedman(s)
    r = np.array([1.25, 2.0, 2.75])   # mean ranks of A, B, C by hand (higher score, better rank)
    assert (n, k) == (4, 3)
    assert stat == pytest.approx(12 * 4 / (3 * 4) * ((r ** 2).sum() - 3 * 16 / 4))
    assert (stat, p) == pytest.approx(tuple(friedmanchisquare(*s.to_numpy().T)))


def test_friedman_uses_the_complete_blocks_only():
    s = pd.DataFrame([[3, 2, 1], [3, 1, 2], [np.nan, 3, 1], [3, 2, 1]], columns=list("ABC"))
    assert ranking.friedman(s)[2] == 3
    with pytest.raises(ValueError, match="at least 2 complete blocks"):
        ranking.friedman(s.iloc[2:3])


def test_nemenyi_q_is_demsars_table_and_cd_by_hand():
    table = [1.960, 2.343, 2.569, 2.728, 2.850, 2.949, 3.031, 3.102, 3.164]   # Demšar Table 5(a), alpha 0.05
    assert [ranking.nemenyi_q(k) for k in range(2, 11)] == pytest.approx(table, abs=1e-3)   # table: 3 decimals
    assert ranking.nemenyi_cd(4, 10) == pytest.approx(ranking.nemenyi_q(4) * math.sqrt(20 / 60))


def test_iman_davenport_is_the_f_form():
    stat, _, n, k = ranking.friedman(pd.DataFrame([[3, 2, 1], [3, 1, 2], [2, 3, 1], [3, 2, 1]], dtype=float))
    f, _ = ranking.iman_davenport(stat, n, k)
    assert f == pytest.approx((n - 1) * stat / (n * (k - 1) - stat))


def test_rank_intervals_deterministic_and_a_method_best_everywhere_is_rank_one():
    rng = np.random.default_rng(1)
    s = pd.DataFrame(rng.normal(size=(12, 4)), columns=list("ABCD"))
    s["A"] = 10.0
    a, b = ranking.rank_intervals(s, n_boot=200, seed=3), ranking.rank_intervals(s, n_boot=200, seed=3)
    pd.testing.assert_frame_equal(a, b)
    assert a.loc["A"].tolist() == [1.0, 1.0, 1.0] and a.index[0] == "A"
    assert (a["low"] <= a["mean_rank"]).all() and (a["mean_rank"] <= a["high"]).all()


def test_pareto_front_on_a_toy_set():
    pts = pd.DataFrame({"cost": [1, 2, 2, 3, 5, 4, 1], "acc": [50, 70, 70, 60, 90, 80, 40]},
                       index=["a", "b", "b2", "dominated", "e", "f", "worse_a"])
    # b and b2 are identical: both on the front; "dominated" loses to b; worse_a to a
    assert ranking.pareto_front(pts, "cost", "acc") == ["a", "b", "b2", "f", "e"]
    assert ranking.pareto_front(pts, "cost", "acc", minimize_x=False) == ["e"]


def test_cliques_join_consecutive_methods_within_the_cd():
    r = pd.Series({"A": 1.0, "B": 1.5, "C": 2.4, "D": 4.0})
    assert ranking.cliques(r, 1.0) == [(0, 1), (1, 2)]
    assert ranking.cliques(r, 0.1) == []


@pytest.mark.parametrize("k", [2, 31])
def test_plots_label_every_method(k):
    import matplotlib.pyplot as plt

    r = pd.Series(np.linspace(1, k, k), index=[f"method {i}" for i in range(k)])
    fig = ranking.cd_diagram(r, cd=2.0, title="t")
    labels = [t.get_text() for t in fig.axes[0].texts if t.get_text().startswith("method ")]
    assert len(labels) == k
    pts = pd.DataFrame({"floats": np.arange(1, k + 1) * 10.0, "acc": np.linspace(50, 90, k)}, index=r.index)
    fig2 = ranking.pareto_scatter(pts, "floats", "acc", logx=True)
    assert len([t for t in fig2.axes[0].texts if t.get_text().startswith("method ")]) == k
    plt.close("all")
