"""REPORT.md is the render of the run archive (python -m fedlib report): re-rendered here and compared byte for
byte, so that a number in it that differs from its archived run, or has none behind it, fails the suite. The
render reads the archive alone: the results folder is not looked at and nothing trains."""

import pytest

from fedlib import archive, paths, render, results
from fedlib.config import load_config, run_id
from fedlib.runner import cached_summary, run_one
from tests.conftest import DATA, ROOT


@pytest.fixture
def real_archive(monkeypatch):
    monkeypatch.setattr(archive, "ARCHIVE", paths.ARCHIVE)


@pytest.mark.slow
def test_report_md_is_the_render_of_the_archive(real_archive):
    text, sections = render.render()
    committed = (ROOT / "REPORT.md").read_text()
    if committed != text:
        first = next(i for i, (a, b) in enumerate(zip(committed.splitlines(), text.splitlines(), strict=False))
                     if a != b) if committed.splitlines()[:1] == text.splitlines()[:1] else 0
        pytest.fail(f"REPORT.md differs from the render of archive/ from line {first + 1}: "
                    f"{committed.splitlines()[first:first + 1]} vs {text.splitlines()[first:first + 1]}; "
                    "run `python -m fedlib report`")
    assert {s.name for s in sections} == set(render.SECTIONS)
    assert not unlisted_claims(sections), unlisted_claims(sections)


def unlisted_claims(sections) -> list[str]:
    """The claims of a paper's claims.yaml that its section's ledger leaves out: each claim (its ``_paper`` twin the
    same claim at the paper protocol) has a row, judged, or not tested and why; a table the archive lacks once made
    the FedMPS and MP-FedCL sections drop their sweep claims without a word. A kind ``untested`` bound to a table
    shows only where that table is absent, by design."""
    from fedlib import claims

    def stem(text: str) -> str:
        return text.split("{")[0].strip()[:30]

    out = []
    for s in sections:
        shown = {stem(c.claim) for c in s.claims}
        groups: dict = {}
        for spec in claims.load_book(s.name).claims:
            if spec["kind"] == "untested" and "table" in spec:
                continue
            texts = {stem(spec["claim"]), stem((spec.get("untested") or {}).get("claim", spec["claim"]))}
            groups.setdefault(spec["id"].removesuffix("_paper"), set()).update(texts)
        out += [f"{s.name}: {key}" for key, texts in groups.items() if not texts & shown]
    return out


def test_reading_the_archive_alone_trains_nothing_and_ignores_the_results_folder(tmp_path):
    cfg = load_config(DATA / "spiral_fedproto.yaml", {"results_dir": str(tmp_path / "r"), "train.rounds": 2})
    run_one(cfg, 1, progress=False)
    root = tmp_path / "archive"
    with results.archive_only():
        assert results.find(cfg, 1) == (None, None)          # finished in results/, but not in the archive
        assert cached_summary(cfg, 1) is None
        with pytest.raises(results.NotArchived, match="1 run not in the run archive: spiral_test seed 2"):
            run_one(cfg, 2, progress=False)
        with pytest.raises(results.NotArchived, match="a trained model, which the run archive does not keep"):
            results.state(cfg, 1)
    assert not (tmp_path / "r" / run_id(cfg, 2)).exists()   # nothing written for the refused run
    assert archive.add(cfg, 1, root)
    import fedlib.archive as A

    before, A.ARCHIVE = A.ARCHIVE, root
    try:
        with results.archive_only():
            found, summary = results.find(cfg, 1)
            assert summary["archived"] and summary["rounds"] == 2 and len(results.rounds(cfg, 1)) == 2
    finally:
        A.ARCHIVE = before


def test_the_render_reads_a_run_another_placement_archived(tmp_path, monkeypatch):
    """A study that trains its grids on its own placement (results.train) reads, in the render, a seed that only
    another placement archived (a GPU's stacked seeds beside a CPU's); before, it was refused as not archived."""
    cfg = load_config(DATA / "spiral_fedproto.yaml", {"results_dir": str(tmp_path / "r"), "train.rounds": 2})
    other = {**cfg, "executor": "batched"}
    assert other["executor"] != cfg.get("executor", "sequential")
    run_one(other, 1, progress=False)
    monkeypatch.setattr(archive, "ARCHIVE", tmp_path / "archive")
    assert archive.add(other, 1)
    with results.archive_only():
        got = results.train({"k": cfg}, seeds=[1], progress=False)
        assert got["k"][0]["archived"] and got["k"][0]["executor"] == "batched" and got["k"][0]["rounds"] == 2
        with pytest.raises(results.NotArchived, match="1 run not in the run archive: spiral_test seed 2"):
            results.train({"k": cfg}, seeds=[2], progress=False)
    run_one(cfg, 1, progress=False)   # the run's own placement archived too: its record is read, as training would
    assert archive.add(cfg, 1)
    with results.archive_only():
        assert results.train({"k": cfg}, seeds=[1], progress=False)["k"][0]["executor"] == "sequential"


def test_a_section_leaves_out_what_the_archive_lacks_and_says_so(real_archive, monkeypatch):
    """A cell that needs a run the archive lacks is left out of the section (the render lists it), never trained."""
    calls = []

    def no_archive(cfg, seed, root=None):
        calls.append(seed)
        return None

    monkeypatch.setattr(archive, "summary", no_archive)
    sec = render.render_section("benchmark", "converged")
    assert calls and sec.skipped and "not in the run archive" in sec.skipped[0][1]
    assert "**Ranked table" not in sec.markdown and "read from the run archive (archive/)" in sec.markdown


def test_the_report_plans_the_evidence_from_the_archive_alone(monkeypatch):
    """The summary line's costs count the rounds a run must train, less those a results folder's checkpoint holds:
    in the report that folder is not read (a checkpoint of a run under way changed the line on one machine only)."""
    from fedlib import archive, evidence

    seen = []
    monkeypatch.setattr(evidence, "plan", lambda ledgers: seen.append(archive.reading_only()) or [])
    line = render.evidence_line([])
    assert seen == [True] and line.startswith("**Evidence.** claims decided: 0 of 0 testable")


def test_every_open_privacy_claim_names_the_runs_that_would_decide_it(real_archive):
    """The leakage study's "safer to share" claims name each side's runs, so the evidence planner lists their cost
    (it once said "the ledger does not name the runs of every side") and adds seeds to those runs (it once asked the
    profile's seeds to grow), unless the margin is a near-tie no affordable number of seeds decides."""
    from fedlib import claims, evidence

    items = [it for it in evidence.plan(render.ledgers(["privacy"])) if it.claim.verdict == claims.INCONCLUSIVE]
    assert items, "the privacy ledger has no open claim: this test needs a new open one"
    for it in items:
        assert it.actions or it.need == evidence.NEAR_TIE_NEED, (it.number, it.need)
        assert all(a.kind == "seeds" and a.group.label.endswith("(leakage study)") and a.group.derive
                   for a in it.actions)
