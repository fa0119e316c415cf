"""Claims ledgers: every claim a paper makes, our evidence (a number and the run that made it)
and a verdict, so that a reader sees at once what was supported, what not, and what was not
tested here and why.

Each paper study builds its ledger from the numbers its notebook computed
(``fedlib.papers.<paper>.ledger``); the verdict of each claim comes from an explicit rule on
our numbers, written next to the claim, never from the paper's numbers.
"""

from __future__ import annotations

import dataclasses

import pandas as pd

SUPPORTED, NOT_SUPPORTED, NOT_TESTED = "supported", "not supported", "not tested"


@dataclasses.dataclass
class Claim:
    """One claim: what the paper says and where, our evidence, the verdict and why."""

    claim: str
    source: str
    evidence: str
    verdict: str
    note: str = ""


def judge(ok: bool | None) -> str:
    """The verdict of a rule: ``None`` when it could not be evaluated here."""
    return NOT_TESTED if ok is None else SUPPORTED if ok else NOT_SUPPORTED


def untested(claim: str, source: str, why: str) -> Claim:
    return Claim(claim, source, "—", NOT_TESTED, why)


def table(claims: list[Claim]) -> pd.DataFrame:
    """The ledger as a table (one row per claim, numbered as in the notebook)."""
    frame = pd.DataFrame([dataclasses.asdict(c) for c in claims],
                         columns=["claim", "source", "evidence", "verdict", "note"])
    frame.index = range(1, len(frame) + 1)
    frame.index.name = "#"
    return frame


def counts(claims: list[Claim]) -> dict[str, int]:
    """How many claims got each verdict."""
    return {v: sum(c.verdict == v for c in claims) for v in (SUPPORTED, NOT_SUPPORTED, NOT_TESTED)}


def summary_line(claims: list[Claim]) -> str:
    c = counts(claims)
    return f"{c[SUPPORTED]} supported, {c[NOT_SUPPORTED]} not supported, {c[NOT_TESTED]} not tested here"


def write(section, claims: list[Claim]) -> pd.DataFrame:
    """Add the ledger to a report section (:class:`fedlib.report.ReportSection`): the table under its
    summary line, then, in words, every claim our numbers contradict; returns the table."""
    from fedlib.report import to_markdown

    frame = table(claims)
    section.text(f"**Claims ledger ({summary_line(claims)}).**\n\n" + to_markdown(frame))
    against = [c for c in claims if c.verdict == NOT_SUPPORTED]
    if against:
        section.text("**Where ours contradict the paper.**\n\n" + "\n".join(
            f"- {c.claim} ({c.source}): {c.evidence}." + (f" {c.note}." if c.note else "") for c in against))
    return frame
