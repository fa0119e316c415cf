import json
import math

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

from fedlib import report  # noqa: E402

PAPER = {"caption": "Accuracy (%)", "row_name": "method", "column_name": "dataset",
         "columns": ["cifar10", "fmnist"],
         "rows": {"fedavg": {"cifar10": [60.91, 1.99], "fmnist": [84.21, 3.39]},
                  "fedproto": {"cifar10": [75.10, 0.94], "fmnist": [93.07, 0.56]}}}


@pytest.fixture
def root(tmp_path, monkeypatch):
    monkeypatch.setenv("FEDLIB_ROOT", str(tmp_path))
    return tmp_path


def test_compare_numbers_diff_and_missing_rows():
    ours = {"fedavg": {"fmnist": [85.0, 1.0]}, "local": {"fmnist": 70.0}}
    nums = report.compare_numbers(PAPER, ours)
    assert list(nums.index) == [("fedavg", "fmnist"), ("fedproto", "fmnist"), ("local", "fmnist")]  # no cifar10
    fedavg = nums.loc[("fedavg", "fmnist")]
    assert fedavg.paper_mean == 84.21 and fedavg.paper_std == 3.39 and fedavg.ours_std == 1.0
    assert fedavg["diff"] == pytest.approx(0.79)
    assert math.isnan(nums.loc[("fedproto", "fmnist")].ours_mean)      # paper only
    assert math.isnan(nums.loc[("local", "fmnist")].paper_mean)         # ours only
    assert math.isnan(nums.loc[("local", "fmnist")]["diff"])


def test_compare_renders_mean_std_dash_and_signed_diff():
    ours = {"fedavg": {"fmnist": [85.0, 1.0]}, "fedproto": {"fmnist": 0.9206}, "local": {"fmnist": 0.7}}
    df = report.compare(PAPER, ours, scale=100)
    assert list(df.columns) == ["paper", "ours", "diff"] and df.index.name == "method"  # one column: rows only
    assert df.loc["fedavg"].tolist() == ["84.21 ± 3.39", "8,500.00 ± 100.00", "+8,415.79"]  # scale hits all of ours
    assert df.loc["fedproto"].tolist() == ["93.07 ± 0.56", "92.06", "-1.01"]
    assert df.loc["local"].tolist() == ["—", "70.00", "—"]
    two = report.compare(PAPER, {"fedavg": {"fmnist": 85, "cifar10": (61.0, 2.0)}})
    assert two.index.names == ["method", "dataset"]
    assert two.loc[("fedavg", "cifar10")].tolist() == ["60.91 ± 1.99", "61.00 ± 2.00", "+0.09"]
    assert report.compare({"rows": {"fedmps": {"params": 30780}}}, {"fedmps": {"params": 30780.0}},
                          digits=0).loc["fedmps"].tolist() == ["30,780", "30,780", "+0"]


def test_to_markdown_table():
    md = report.to_markdown(report.compare(PAPER, {"fedavg": {"fmnist": [85.0, 1.0]}}))
    lines = md.splitlines()
    assert lines[0] == "| method | paper | ours | diff |"
    assert lines[1] == "|---|---:|---:|---:|"
    assert lines[2] == "| fedavg | 84.21 ± 3.39 | 85.00 ± 1.00 | +0.79 |"
    assert lines[3] == "| fedproto | 93.07 ± 0.56 | not run | — |"  # never a paper number beside an empty cell


def test_to_markdown_prints_a_missing_number_as_a_dash():
    df = pd.DataFrame({"round to 85%": [2.0, float("nan"), np.float32("nan")], "label": ["a", "nan", None]},
                      index=["fedmps", "fedavg", "fedprox"])
    lines = report.to_markdown(df).splitlines()
    # the text "nan" stays text; a missing label (NaN in a string column) is missing too
    assert lines[2:] == ["| fedmps | 2.0 | a |", "| fedavg | — | nan |", "| fedprox | — | — |"]


def test_load_paper_fedmps_reference_numbers():
    p = report.load_paper("fedmps")
    t = p["tables"]
    methods = ["fedavg", "fedprox", "moon", "fedntd", "fedgkd", "fedproc", "fedproto", "fedmps"]
    assert list(t["table3"]["rows"]) == methods and len(t["table3"]["columns"]) == 6
    assert t["table3"]["rows"]["fedproto"]["fmnist"] == [93.07, 0.56]
    assert t["table3"]["rows"]["fedavg"]["fmnist"] == [84.21, 3.39]
    assert t["table5"]["rows"]["fedmps"]["params"] == 30780
    assert t["table5"]["rows"]["fedgkd"]["params"] == 2 * t["table5"]["rows"]["fedavg"]["params"] == 2480240
    assert t["table5"]["setting"] == {"dataset": "cifar10", "n": 3, "N": 20, "direction": "one", "per": "round"}
    assert t["table6_block1"]["rows"]["fedmps"]["cifar10"] == t["table7"]["rows"]["full"]["acc"] == [80.31, 8.91]
    assert t["table6_block2"]["n_certain"] is False
    assert t["table7"]["components"]["con_high"] == {"number": 3, "con_low": 0, "con_high": 1, "soft": 0}
    assert t["tau1_sensitivity"]["rows"]["fedmps"]["flowers"] == 1.29
    assert t["tau2_sensitivity"]["rows"]["fedmps"]["fmnist"] == 0.13
    for name, table in t.items():
        assert table["source"] and table["caption"], name
        for row in table["rows"].values():
            assert set(row) <= set(table["columns"]), name
    with pytest.raises(FileNotFoundError, match="nope"):
        report.load_paper("nope")


def test_figure_dir_smoke_is_scratch(root):
    assert report.figure_dir("fedmps", "smoke") == root / "results" / "smoke" / "figures" / "fedmps"
    assert report.figure_dir("fedmps", "quick") == root / "figures" / "fedmps"
    assert report.figure_dir("fedmps", "paper").is_dir()
    assert report.results_dir() == root / "results"


def test_report_section_writes_markdown_json_and_figure(root):
    section = report.ReportSection("toy", "smoke", title="Toy paper")
    section.text("Some text.")
    section.table(PAPER, {"fedavg": {"fmnist": [85.0, 1.0]}}, key="table3")
    fig, ax = plt.subplots(figsize=(2, 2))
    ax.plot([0, 1], [1, 0])
    png = section.figure(fig, "A curve", name="curve")
    plt.close(fig)
    section.record(rounds=2)
    md_path = section.write()
    assert png == root / "results" / "smoke" / "figures" / "toy" / "curve.png" and png.stat().st_size > 0
    md = md_path.read_text()
    assert md.startswith("## Toy paper\n") and "_profile `smoke` · commit " in md and "Some text." in md
    # the section says what made its numbers: commit, date, machine
    assert f"torch {torch.__version__}" in md and torch.backends.cpu.get_cpu_capability() in md
    assert "**Accuracy (%)**" in md and "| fedavg | 84.21 ± 3.39 | 85.00 ± 1.00 | +0.79 |" in md
    assert "![A curve](results/smoke/figures/toy/curve.png)" in md  # relative to the output root
    data = json.loads((md_path.parent / "report.json").read_text())
    row = data["tables"]["table3"]["rows"][0]
    assert row["row"] == "fedavg" and row["diff"] == pytest.approx(0.79)
    assert data["tables"]["table3"]["rows"][1]["ours_mean"] is None  # NaN -> null
    assert data["values"] == {"rounds": 2} and data["profile"] == "smoke"
    assert data["figures"] == [{"caption": "A curve", "path": "results/smoke/figures/toy/curve.png"}]


def test_captions_say_n_and_a_missing_ours_says_not_run():
    assert report.with_n("Table III", [3.0, 3.0, float("nan")]) == "Table III (ours: n = 3 seeds)"
    assert report.with_n("Table VI", [1.0]) == "Table VI (ours: one seed)"
    assert report.with_n("Sweep", [1.0, 3.0]) == "Sweep (ours: n = 1-3 seeds)"
    assert report.with_n("Table 1 (n = 3)", [3.0]) == "Table 1 (n = 3)"  # already says it
    assert report.with_n("No n", [float("nan")]) == "No n" and report.with_n(None, [3.0]) is None
    df = report.compare(PAPER, {"fedavg": {"fmnist": [85.0, 1.0, 3]}})
    assert df.loc["fedproto"].tolist() == ["93.07 ± 0.56", "not run", "—"]
    assert df.loc["fedavg", "ours"] == "85.00 ± 1.00"
    nan = report.compare(PAPER, {"fedavg": {"fmnist": float("nan")}, "local": {"fmnist": 70.0}})  # fedavg diverged
    assert nan.loc["fedavg", "ours"] == "—" and nan.loc["fedproto", "ours"] == "not run"


def test_reference_column_sits_after_paper_and_leaves_other_tables_alone():
    ref = {"authors_code": {"label": "authors' code (seed 1234)", "beside": ["t"],
                            "rows": {"fedavg": {"fmnist": 76.59}, "fedproto": {"fmnist": [91.8, 0.5]}}}}
    ours = {"fedavg": {"fmnist": 74.29}, "local": {"fmnist": 70.0}}
    df = report.compare(PAPER, ours)
    out = report.reference_column(df, ref, "t", "fmnist")
    assert list(out.columns) == ["paper", "authors' code (seed 1234)", "ours", "diff"]
    assert out["authors' code (seed 1234)"].tolist() == ["76.59", "91.80 ± 0.50", "—"]  # fedavg, fedproto, local
    assert out[["paper", "ours", "diff"]].equals(df)            # the other columns as compare made them
    two = report.compare(PAPER, {"fedavg": {"fmnist": 85, "cifar10": 61.0}})
    assert report.reference_column(two, ref, "t")["authors' code (seed 1234)"].tolist() == \
        ["—", "76.59", "—", "91.80 ± 0.50"]
    # no block, or a block beside other tables: the same frame, untouched
    assert report.reference_column(df, {}, "t", "fmnist") is df
    assert report.reference_column(df, ref, "table6_block1", "fmnist") is df
    with pytest.raises(ValueError, match="give column= for the one-column table 't'"):
        report.reference_column(df, ref, "t")


def test_fedmps_authors_code_numbers_beside_tables_iii_and_vi():
    from fedlib.papers import fedmps

    p = report.load_paper("fedmps")
    code = p["authors_code"]
    assert code["rows"] == {"fedavg": {"fmnist": 76.59}, "fedproto": {"fmnist": 91.83}}
    assert code["commit"] == "c7ad02efe62853b8e2bedd5ffa709484328203f7" and set(code["runs"]) == set(code["rows"])
    assert "--rounds 100" in code["command"] and "--dataset fashion" in code["command"]
    ours = {"fedavg": {"fmnist": 74.29}, "fedproto": {"fmnist": 90.29}}
    t3 = fedmps.paper_vs_ours(p, "table3", ours)
    assert t3.loc["fedavg"].tolist() == ["84.21 ± 3.39", "76.59", "74.29", "-9.92"]
    assert t3.loc["fedmps"].tolist() == ["93.58 ± 0.89", "—", "not run", "—"]
    t6 = fedmps.paper_vs_ours(p, fedmps.TABLE6_BLOCKS[3], ours)
    assert t6.loc["fedproto"].tolist() == ["93.42 ± 4.96", "91.83", "90.29", "-3.13"]
    # n = 4 (no reference runs) and n = 5 (no paper block) print as before
    assert list(fedmps.paper_vs_ours(p, fedmps.TABLE6_BLOCKS[4], ours).columns) == ["paper", "ours", "diff"]
    assert fedmps.paper_vs_ours(p, None, ours).loc["fedavg"].tolist() == ["—", "74.29", "—"]
    without = {k: v for k, v in p.items() if k != "authors_code"}
    assert fedmps.paper_vs_ours(without, "table3", ours).equals(report.compare(p["tables"]["table3"], ours))
