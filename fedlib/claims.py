"""Claims ledgers: every claim a paper makes, our evidence (a number and the run that made it)
and a verdict, so that a reader sees at once what was supported, what not, what our runs cannot
decide, and what was not tested here and why.

Each paper study builds its ledger from the numbers its notebook computed
(``fedlib.ledgers.<paper>.ledger``). Where a paper's claims are data (``params/<paper>/claims.yaml``: FedIC,
MP-FedCL, ProtoNorm, the benchmark, GFPL, FedMPS, the privacy study), one engine judges them (:func:`evaluate`): each
claim names its kind (:data:`CLAIM_KINDS`: ``best``, ``sweep_best``, ``chain``, ``intermediate``, ``ratio``,
``threshold``, ``construction``, ``untested``, ``degrades``, ``head_to_head``, ``leads``, ``above``, ``family``,
``significant``), the table of named cells it reads (:class:`Cells`, which the study maps from its runs) and the
templates of its evidence and note; the file is validated on reading (:func:`check_book`: one line naming the file,
the claim and the field).
Every verdict comes from one rule, :func:`verdict`, applied to our numbers (never the paper's):

- **supported / not supported** need evidence from the paper protocol or the ``converged`` profile
  (:data:`DECISIVE_PROFILES`) and, for a measured difference, a margin beyond the seed spread (the larger
  sample std over seeds of the two sides, ddof 1) or an exact test below ``alpha``. Each comparison a claim
  rests on is judged on its own (:meth:`Comparison.status`), then combined: one decided against the claim
  makes it not supported, all decided for it supported;
- under the ``converged`` profile a comparison counts only once its curves stand still: the side behind
  must have plateaued (:func:`plateau`), or the margin must stay beyond the spread even after that side gains
  all it could still gain by :data:`CAP` rounds (the early decision, :meth:`Trend.reach`: twice the larger of its
  current rate kept up and its last doubling's gain repeated; docs/runs.md, "Runs to a plateau", says why this
  bound and how it was checked);
- **inconclusive**: short-profile evidence only, one seed, a margin within the seed spread, or a comparison
  still open because a curve is still rising (the note says which, and what the verdict would have been);
- **by construction**: true because of how the method is built (stated, not counted as evidence);
- **not tested**: the note says why.

Exact counts (floats in a message, a formula checked against the messages) depend on neither the seed
nor the training length, and follow from what the method is defined to send: a count claim that holds is
**by construction** (the measurement checks our implementation against the paper's definition; it is not
evidence of the method's merit), and one the messages contradict is **not supported**, under any profile.
Every ledger states its count claims this way (``exact=True``, or ``construction=`` with the reason).

Tests (:func:`compare`): the exact two-sided Mann-Whitney rank-sum test, and where both methods ran on
the same seeds (so on the same partition per seed) the exact paired sign-flip permutation test of the
mean difference. :func:`smallest_p` states what a design can reach at best: 3 vs 3 seeds cannot go
below p = 0.10 unpaired or 0.25 paired, so with 3 seeds only the margin against the spread can decide.
A claim that is a threshold on a measured value (at least 10 times fewer, within 1 point) is a comparison
too: :func:`against_threshold` sets the per-seed values against the threshold, with their own spread.
"""

from __future__ import annotations

import dataclasses
import math
import re
import string
from collections.abc import Sequence

import numpy as np
import pandas as pd

SUPPORTED, NOT_SUPPORTED, INCONCLUSIVE, BY_CONSTRUCTION, NOT_TESTED = (
    "supported", "not supported", "inconclusive", "by construction", "not tested")
VERDICTS = (SUPPORTED, NOT_SUPPORTED, INCONCLUSIVE, BY_CONSTRUCTION, NOT_TESTED)
DECISIVE_PROFILES = ("paper", "converged")
ALPHA = 0.05
#: the chance of the exact test going below ALPHA that :meth:`Comparison.seeds_to_separate` sizes seeds for
POWER = 0.8
# Why a count claim got its verdict. The earlier rule wrote EXACT_COUNTS beside "supported" too: parse_ledger finds
# its tag there to tell a section judged before counts became by construction.
EXACT_TAG = "exact counts:"
EXACT_COUNTS = f"{EXACT_TAG} independent of seed and training length"
NOT_PLATEAUED = "converged profile, but curves still rising, so not yet converged evidence:"
#: the longest a converged-profile run is extended (fedlib.plateau.CAP); a curve still rising is projected to it
CAP = 400
# A comparison's state (Comparison.status): decided for or against the claim, a margin within the seed spread,
# or still open because the side behind is still rising (and the early decision does not settle it).
FOR, AGAINST, WITHIN, OPEN = "for", "against", "within", "open"
EXACT_HOLDS = "exact counts, fixed by what the method sends: true by construction, not counted as evidence"


@dataclasses.dataclass
class Claim:
    """One claim: what the paper says and where, our evidence, the verdict and why, and the profile
    whose runs gave the evidence (``""`` where no run did). ``tests`` are the comparisons it was judged on
    (what :mod:`fedlib.evidence` plans from); they are not part of the ledger's table."""

    claim: str
    source: str
    evidence: str
    verdict: str
    note: str = ""
    profile: str = ""
    tests: tuple = dataclasses.field(default=(), compare=False, repr=False)


# ---------------------------------------------------------------------------------------------- tests

def smallest_p(n_a: int, n_b: int | None = None, paired: bool = False) -> float:
    """The smallest two-sided p an exact test can give with these sample sizes: the rank-sum test of
    ``n_a`` vs ``n_b`` runs reaches at best ``2 / C(n_a + n_b, n_a)`` (3 vs 3: 0.10), the paired sign-flip
    test of ``n_a`` pairs ``2 / 2**n_a`` (3 pairs: 0.25); 1.0 where a side has fewer than one run."""
    if paired:
        return min(1.0, 2.0 / 2 ** n_a) if n_a >= 1 else 1.0
    if n_b is None:
        raise ValueError("smallest_p: n_b is required for the unpaired rank-sum test")
    if n_a < 1 or n_b < 1:
        return 1.0
    return min(1.0, 2.0 / math.comb(n_a + n_b, n_a))


def rank_sum_p(a: Sequence[float], b: Sequence[float]) -> float:
    """Exact two-sided Mann-Whitney rank-sum p of ``a`` against ``b`` (no normal approximation)."""
    from scipy.stats import mannwhitneyu

    return float(mannwhitneyu(a, b, alternative="two-sided", method="exact").pvalue)


def paired_p(a: Sequence[float], b: Sequence[float]) -> float:
    """Exact two-sided sign-flip permutation p of the mean of ``a - b`` (pairs share a seed, hence the
    partition): the share of the ``2**n`` sign patterns whose mean is at least as far from 0 as the observed one
    (ties within scipy's relative tolerance, 100 float epsilons, count; the same p as ``scipy.stats.permutation_test``
    with every resample, which holds all ``2**n`` patterns in memory: gigabytes at 24 seeds). Counted by meeting in
    the middle: the signed sums of each half of the pairs, one half sorted, so memory grows as ``2**(n/2)``."""
    d = np.asarray(a, float) - np.asarray(b, float)
    if not d.any():
        return 1.0
    x = np.abs(d)
    observed = abs(float(d.sum()))
    reach = observed - observed * 100 * np.finfo(float).eps
    half = len(x) // 2
    left, right = _signed_sums(x[:half]), np.sort(_signed_sums(x[half:]))
    far = (len(right) - np.searchsorted(right, reach - left, "left")) + np.searchsorted(right, -reach - left, "right")
    return min(1.0, float(far.sum()) / 2 ** len(x))


def _signed_sums(x: np.ndarray) -> np.ndarray:
    """The ``2**len(x)`` sums of ``x`` under every sign pattern."""
    sums = np.zeros(1)
    for v in x:
        sums = np.concatenate([sums + v, sums - v])
    return sums


# ---------------------------------------------------------------------------------------------- trends

#: points a curve the plateau criterion called plateaued (at 100 rounds or more) can still gain: on the archive's
#: extended runs, cut at 100-300 rounds on the rules the ledgers compare, 10 of the 26 curves it called plateaued went
#: on to gain 0.2 points or more, at most 0.73 (fedlib.plateau.extended_check; docs/runs.md, "Runs to a plateau").
#: A decision whose side behind plateaued with less than this to spare says so (:meth:`Comparison.spare`)
PLATEAU_SLACK = 0.75
#: the factor on a still-rising side's projected gain (:meth:`Trend.reach`): on the archive's benchmark curves still
#: rising at round 25 (88 of 100) or 50 (81), projected to round 100 (the 4x and 2x horizons), the bound with it
#: covered every curve's actual gain (fedlib.plateau.reach_check; docs/runs.md, "Runs to a plateau")
REACH_SAFETY = 2.0


@dataclasses.dataclass(frozen=True)
class Trend:
    """Where one side's seed curves stand, for the early decision: the ``rounds`` they hold, whether the
    seed-mean curve ``plateaued`` (:func:`plateau`) and its ``rise``; and, on the seed-mean of the per-seed
    best-so-far curves (the values a comparison uses), ``gain`` over the last doubling of the rounds (from round
    ``rounds // 2`` to the end) and ``tail`` over the last ``window`` rounds (the last 20%). ``group`` names the runs
    (a :class:`fedlib.plateau.Group`) so that the evidence planner can extend them."""

    label: str
    rounds: int
    plateaued: bool
    rise: float
    gain: float
    tail: float = 0.0
    window: int = 1
    group: object = dataclasses.field(default=None, compare=False, repr=False)
    since: int | None = None   # the round from which the plateau criterion holds (:func:`plateau_from`)
    per_round: bool = False    # a per-round measure (seconds, megabytes): nothing to plateau (:func:`fixed_budget`)

    def reach(self, cap: int = CAP) -> float:
        """How much this side's best-so-far mean could still gain by ``cap`` rounds: 0 once plateaued, else
        :data:`REACH_SAFETY` times the larger of two projections, its last 20%'s rate kept up to the cap and its
        last doubling's gain repeated for every doubling up to the cap (a side already at the cap is projected one
        doubling further). Accuracy curves flatten, so both overshoot a curve past its warm-up; the factor covers
        the curves still in it (docs/runs.md, "Runs to a plateau")."""
        if self.plateaued:
            return 0.0
        horizon = cap - self.rounds if self.rounds < cap else self.rounds
        doublings = max(1, math.ceil(math.log2(cap / self.rounds))) if self.rounds < cap else 1
        linear = max(self.tail, 0.0) / max(self.window, 1) * horizon
        return REACH_SAFETY * max(linear, doublings * max(self.gain, 0.0))

    def plateau_text(self) -> str:
        """:func:`plateau_text` of the seed-mean curve: ``""`` once plateaued."""
        return "" if self.plateaued else (
            "not plateaued" + ("" if math.isnan(self.rise) else f" (+{self.rise:.2f} in the last 20% of rounds)"))

    def text(self) -> str:
        """``FedAvg (dir): 100 rounds, still rising (+1.45 in the last 20%)`` or ``... plateaued``."""
        state = "plateaued" if self.plateaued else f"still rising (+{self.rise:.2f} in the last 20%)"
        return f"{self.label}: {self.rounds} rounds, {state}"


def trend(label: str, curves: Sequence[Sequence[float]], group=None, window: float = 0.2) -> Trend:
    """The :class:`Trend` of per-seed accuracy curves (points, one value per evaluated round; diverged seeds left
    out by the caller), cut to the shortest."""
    if not curves:
        raise ValueError(f"trend({label!r}): no curve")
    n = min(len(c) for c in curves)
    y = np.asarray([c[:n] for c in curves], float)
    done, rise = plateau(y.mean(axis=0), window)
    best = np.fmax.accumulate(np.nan_to_num(y, nan=-np.inf), axis=1).mean(axis=0)
    if n < 2:
        return Trend(label, n, done, rise, math.nan, math.nan, 1, group)
    half, tail = max(0, n // 2 - 1), max(1, math.ceil(window * n))
    return Trend(label, n, done, rise, float(best[-1] - best[half]), float(best[-1] - best[-1 - tail]), tail, group,
                 plateau_from(y.mean(axis=0), window) if done else None)


#: the earliest round a plateau is reported from (the criterion's 20% window is then 4 rounds)
MIN_PLATEAU_ROUND = 20


def plateau_from(curve: Sequence[float], window: float = 0.2, tol: float = 0.2) -> int | None:
    """The earliest round r (at least :data:`MIN_PLATEAU_ROUND`) such that :func:`plateau` holds on the curve cut at
    r and at every later round up to its end: where the report says the curve plateaued; None where it does not hold
    at the end."""
    y = np.asarray(curve, float)
    if not plateau(y, window, tol)[0]:
        return None
    r = len(y)
    while r - 1 >= MIN_PLATEAU_ROUND and plateau(y[:r - 1], window, tol)[0]:
        r -= 1
    return r


@dataclasses.dataclass(frozen=True)
class Comparison:
    """``a`` (the side the claim says is ahead) against ``b``: ``margin = mean(a) - mean(b)`` in
    points, ``spread`` the larger sample std (ddof 1) over seeds of the two sides (NaN with one seed), ``p``
    the exact test's two-sided p (paired when the two sides share their seeds; None with one seed or from
    summaries only), ``p_min`` the smallest p the design can reach and ``n`` the seeds per side.
    ``a_trend`` / ``b_trend`` (:class:`Trend`): where each side's curves stand, for a converged-profile
    comparison of best-so-far values (None: a fixed budget, nothing to project). ``minority`` (paired): the
    differences on the other side of zero from the margin, or zero; however many more seeds agree with the margin,
    they hold the sign-flip test's p at ``2**(minority + 1 - n)`` or above (:func:`seeds_for_test`); unpaired, where
    the sides' cells name their seeds, the same count over the seeds both hold (the pairs a paired test will have
    once the side with fewer seeds is given the other's).
    ``diff_spread`` (paired): the sample std of the per-seed differences, what the paired test's power turns on
    (:meth:`seeds_to_separate`)."""

    label: str
    margin: float
    spread: float
    n: int
    p: float | None = None
    p_min: float | None = None
    paired: bool = False
    a_trend: Trend | None = None
    b_trend: Trend | None = None
    minority: int = 0
    diff_spread: float = math.nan
    sizes: tuple[int, int] | None = None   # the seeds of each side, unpaired (``n`` is the smaller)

    @property
    def decisive(self) -> bool:
        """The margin is beyond the seed spread, or the exact test is below :data:`ALPHA`."""
        if self.n < 2:
            return False
        beyond = not math.isnan(self.spread) and abs(self.margin) > self.spread
        return beyond or (self.p is not None and self.p < ALPHA)

    @property
    def behind(self) -> Trend | None:
        """The trend of the side the margin has behind (``b`` for a positive margin)."""
        return self.b_trend if self.margin > 0 else self.a_trend

    @property
    def ahead(self) -> Trend | None:
        """The trend of the side the margin has ahead (``a`` for a positive margin)."""
        return self.a_trend if self.margin > 0 else self.b_trend

    def status(self, converged: bool = True) -> str:
        """:data:`FOR` or :data:`AGAINST` the claim where decided, :data:`WITHIN` the seed spread, or :data:`OPEN`:
        under the ``converged`` profile, the side behind still rising and its :meth:`Trend.reach` able to close
        the margin to within the spread."""
        if not self.decisive:
            return WITHIN
        behind = self.behind if converged else None
        if behind is not None and not behind.plateaued:
            spread = 0.0 if math.isnan(self.spread) else self.spread
            if abs(self.margin) - behind.reach() <= spread:
                return OPEN
        return FOR if self.margin > 0 else AGAINST

    def spare(self, converged: bool = True) -> float | None:
        """What a decided comparison has to spare against a later gain of its side behind, where that side
        plateaued (under the ``converged`` profile): the margin beyond the seed spread, or, decided by the exact test
        alone, the margin itself (a gain of the side behind shifts every paired difference by about as much); None
        where it is not such a comparison (a per-round measure, :func:`fixed_budget`, has no plateau to doubt)."""
        behind = self.behind if converged else None
        if behind is None or not behind.plateaued or behind.per_round or self.status(converged) not in (FOR, AGAINST):
            return None
        beyond = not math.isnan(self.spread) and abs(self.margin) > self.spread
        return abs(self.margin) - self.spread if beyond else abs(self.margin)

    def spare_text(self, converged: bool = True) -> str:
        """``A - B: B plateaued from round 85 at 100 rounds, 0.01 to spare`` (:meth:`spare`); ``""`` where it is
        None."""
        spare, b = self.spare(converged), self.behind
        if spare is None:
            return ""
        return (f"{self.label}: {b.label} plateaued" + (f" from round {b.since}" if b.since else "")
                + f" at {b.rounds} rounds, {spare:.2f} to spare")

    def seeds_to_separate(self, power: float = POWER) -> float:
        """About how many seeds per side the exact test would need to go below :data:`ALPHA` with probability
        ``power``, were the true margin one standard error larger than measured (a bound in the margin's favour, so
        that three seeds' noisy margin does not call a comparison tied too soon): the normal approximation of the
        paired test on the differences' std (``diff_spread``), or of the two-sample test on the larger side's std,
        with the usual small-sample term; ``inf`` for a zero margin with no spread (identical runs), NaN with one
        seed. :func:`seeds_for_test`'s floor is not included."""
        if self.n < 2:
            return math.nan
        from statistics import NormalDist

        sd = self.diff_spread if self.paired else self.spread
        if math.isnan(sd):
            return math.nan
        se = sd / math.sqrt(self.n) * (1.0 if self.paired else math.sqrt(2.0))
        margin = abs(self.margin) + se
        if margin == 0.0:
            return math.inf
        za, zb = NormalDist().inv_cdf(1 - ALPHA / 2), NormalDist().inv_cdf(power)
        k = 1.0 if self.paired else 2.0
        return k * ((za + zb) * sd / margin) ** 2 + za ** 2 / (2.0 * k)

    def rising_text(self) -> str:
        """The sides of this comparison still rising, with their trends; ``""`` where none is."""
        return "; ".join(t.text() for t in (self.a_trend, self.b_trend) if t is not None and not t.plateaued)

    def text(self) -> str:
        """``A - B +0.46 (seed std 2.90, paired exact p 0.25, smallest possible 0.25, n = 3)``."""
        if self.n < 2:
            return f"{self.label} {self.margin:+.2f} (one seed)"
        test = "" if self.p is None else (f", {'paired ' if self.paired else ''}exact p {p_text(self.p)}"
                                          f" (smallest possible {p_text(self.p_min)})")
        n = f"{self.sizes[0]} and {self.sizes[1]}" if self.sizes and self.sizes[0] != self.sizes[1] else self.n
        return f"{self.label} {self.margin:+.2f} (seed std {self.spread:.2f}{test}, n = {n})"


def p_text(p: float) -> str:
    """A p value as the ledgers print it: two decimals from 0.01 up, two significant digits below (0.0044, not
    0.00, which reads as a certainty no finite test gives)."""
    return f"{p:.2f}" if p >= 0.01 else f"{p:.2g}"


def compare(label: str, a: Sequence[float], b: Sequence[float], paired: bool = True, a_trend: Trend | None = None,
            b_trend: Trend | None = None) -> Comparison:
    """The :class:`Comparison` of per-seed values ``a`` against ``b`` (NaN seeds dropped, pairwise
    when ``paired``). ``paired`` says that entry i of both lists is the same seed, so the same
    partition; the paired test is then used, else the rank-sum test. The trends (:func:`trend`) say where each
    side's curves stand, for a converged-profile comparison of best-so-far values."""
    a, b = np.asarray(a, float), np.asarray(b, float)
    if paired:
        if len(a) != len(b):
            raise ValueError(f"compare({label!r}): paired needs as many values on each side, got {len(a)} and "
                             f"{len(b)}")
        keep = ~(np.isnan(a) | np.isnan(b))
        a, b = a[keep], b[keep]
    else:
        a, b = a[~np.isnan(a)], b[~np.isnan(b)]
    n = int(min(len(a), len(b)))
    if n == 0:
        raise ValueError(f"compare({label!r}): a side has no finite value")
    margin = float(a.mean() - b.mean())
    trends = {"a_trend": a_trend, "b_trend": b_trend}
    if n < 2:
        return Comparison(label, margin, math.nan, n, **trends)
    spread = float(max(sample_std(a), sample_std(b)))
    if paired:
        return Comparison(label, margin, spread, n, paired_p(a, b), smallest_p(n, paired=True), True, **trends,
                          minority=_minority(a - b, margin), diff_spread=sample_std(a - b))
    return Comparison(label, margin, spread, n, rank_sum_p(a, b), smallest_p(len(a), len(b)), **trends,
                      sizes=(len(a), len(b)))


def sample_std(values: Sequence[float]) -> float:
    """The sample std (ddof 1) of per-seed values; NaN with fewer than two. Every seed spread of the suite."""
    v = np.asarray(values, float)
    v = v[~np.isnan(v)]
    return float(v.std(ddof=1)) if len(v) > 1 else math.nan


def against_threshold(label: str, values: Sequence[float], threshold: float, trend_: Trend | None = None) -> Comparison:
    """A claim that a measured value is above ``threshold`` (orient it so: ``values`` are what must exceed it) as a
    :class:`Comparison`: margin ``mean(values) - threshold``, spread the values' sample std, the one-sample
    sign-flip test of the differences; with one seed, no spread (inconclusive)."""
    v = np.asarray(values, float)
    v = v[~np.isnan(v)]
    if not len(v):
        raise ValueError(f"against_threshold({label!r}): no finite value")
    margin = float(v.mean() - threshold)
    if len(v) < 2:
        return Comparison(label, margin, math.nan, len(v), a_trend=trend_)
    return Comparison(label, margin, sample_std(v), len(v), paired_p(v, np.full_like(v, threshold)),
                      smallest_p(len(v), paired=True), True, a_trend=trend_, minority=_minority(v - threshold, margin),
                      diff_spread=sample_std(v))


def _minority(d: np.ndarray, margin: float) -> int:
    """The paired differences ``d`` not on the margin's side of zero (all of them for a zero margin)."""
    return int(np.sum(np.sign(d) != np.sign(margin))) if margin else len(d)


def seeds_for_test(minority: int = 0) -> int:
    """The fewest pairs at which the exact sign-flip test can go below :data:`ALPHA` with ``minority`` of them
    against the margin: its p is at least ``2**(minority + 1 - n)`` (each pattern of the minority's signs, with the
    others as observed, is as far from zero or farther when the minority's values are the smallest), so
    ``minority + 6`` at 0.05 (6 pairs with none against: p = 0.031)."""
    n = minority + 1
    while 2.0 ** (minority + 1 - n) >= ALPHA:
        n += 1
    return n


def from_summary(label: str, a: tuple, b: tuple) -> Comparison:
    """A :class:`Comparison` from ``(mean, std, n)`` of each side, where the per-seed values are not
    at hand: margin against spread only, no test."""
    (ma, sa, na), (mb, sb, nb) = a, b
    n = int(min(na, nb))
    return Comparison(label, float(ma - mb), float(max(sa, sb)) if n > 1 else math.nan, n)


# ---------------------------------------------------------------------------------------------- the rule

def verdict(holds: bool | None, profile: str, seeds: int, tests: Sequence[Comparison] | None = (),
            exact: bool = False, construction: str = "", rising: str = "") -> tuple[str, str]:
    """The verdict of one claim and why, by the rule of this module's docstring.

    ``holds``: the claim's rule on our numbers (``None``: not evaluated). ``tests``: the measured
    differences the claim rests on, each oriented so that a positive margin is what the claim says; each is
    judged on its own (:meth:`Comparison.status`, its trends deciding under the ``converged`` profile), then
    combined: any decided against the claim, not supported; all decided for it, supported; else inconclusive.
    ``None`` for a difference whose per-seed values are not at hand (inconclusive); ``()`` only with ``exact`` or
    ``construction`` (a measured claim with no comparison has nothing to judge its margin by: inconclusive).
    ``exact``: the numbers are counts that depend on neither seed nor training length (by construction where
    they hold, not supported where they do not). ``construction``: why the claim is true by construction (then
    it is stated, not counted as evidence). ``rising``: runs behind the claim, outside ``tests``, whose curves
    have not plateaued (:func:`plateau_text` of each, named); under the ``converged`` profile they cap a decided
    verdict at inconclusive (the paper protocol's fixed rounds are not capped: they are the paper's own budget).
    """
    v, why = _verdict(holds, profile, seeds, tests, exact, construction)
    if rising and profile == "converged" and not (exact or construction) and v in (SUPPORTED, NOT_SUPPORTED):
        return INCONCLUSIVE, f"{NOT_PLATEAUED} {rising} (would be {v}: {why})"
    if rising:
        return v, "; ".join(x for x in (why, f"not plateaued: {rising}") if x)
    return v, why


def _verdict(holds, profile, seeds, tests, exact, construction) -> tuple[str, str]:
    if holds is None:
        return NOT_TESTED, ""
    if construction:
        if holds:
            return BY_CONSTRUCTION, f"true by construction: {construction}"
        return NOT_SUPPORTED, f"expected by construction ({construction}) but not measured so"
    if exact:
        return (BY_CONSTRUCTION, EXACT_HOLDS) if holds else (NOT_SUPPORTED, EXACT_COUNTS)
    if profile not in DECISIVE_PROFILES:
        return INCONCLUSIVE, f"{profile}-profile evidence only (not the paper protocol or a converged run)"
    if seeds < 2:
        return INCONCLUSIVE, "one seed: no seed spread to judge the margin against"
    if tests is None:
        return INCONCLUSIVE, f"{seeds} seeds, but their per-seed values were not at hand to judge the margin"
    if not tests:
        return INCONCLUSIVE, f"{seeds} seeds, but no per-seed comparison to judge the margin against the seed spread"
    return combine(tests, profile == "converged")


def decided_by(tests: Sequence[Comparison]) -> str:
    """How decided comparisons were decided (:attr:`Comparison.decisive`): "beyond the seed spread" where each
    margin exceeds its spread, "by the exact test (p below 0.05)" where none does (the test alone decided), both
    named where they mix, so that a margin smaller than its spread is never said to be beyond it."""
    beyond = [not math.isnan(t.spread) and abs(t.margin) > t.spread for t in tests]
    exact = f"by the exact test (p below {ALPHA:g})"
    if all(beyond):
        return "beyond the seed spread"
    return exact if not any(beyond) else f"beyond the seed spread or {exact}"


def combine(tests: Sequence[Comparison], converged: bool) -> tuple[str, str]:
    """Each comparison judged (:meth:`Comparison.status`), then combined into a verdict and why: any against
    the claim, not supported (the others named too, as open or within the spread); all for it, supported; else
    inconclusive, saying which comparisons are within the spread and which are open, with what the still-rising
    sides gained and what the verdict would be were they plateaued."""
    state = {t: t.status(converged) for t in tests}
    against = [t for t in tests if state[t] == AGAINST]
    early = [t for t in tests if state[t] in (FOR, AGAINST) and t.behind is not None and not t.behind.plateaued]
    note = ("; decided before the curves plateaued (early decision): " + "; ".join(
        f"{t.label}: {t.behind.text()}, at most +{t.behind.reach():.2f} to come" for t in early)
            ) if converged and early else ""
    thin = [t for t in tests if (x := t.spare(converged)) is not None and x < PLATEAU_SLACK]
    if thin:
        note += ("; decided on a plateau with little to spare (curves called plateaued have gone on to gain up to "
                 f"{PLATEAU_SLACK:g} points): " + "; ".join(t.spare_text(converged) for t in thin))
    if against:
        return NOT_SUPPORTED, f"{decided_by(against)} against the claim: " + "; ".join(t.text() for t in against) + note
    within = [t for t in tests if state[t] == WITHIN]
    open_ = [t for t in tests if state[t] == OPEN]
    if not within and not open_:
        return SUPPORTED, f"{decided_by(tests)}: " + "; ".join(t.text() for t in tests) + note
    parts = []
    if within:
        parts.append("margin within the seed spread: " + "; ".join(t.text() for t in within))
    if open_:
        would = SUPPORTED if not within and all(t.margin > 0 for t in open_) else (
            NOT_SUPPORTED if any(t.margin <= 0 for t in open_) else INCONCLUSIVE)
        parts.append(f"{NOT_PLATEAUED} " + "; ".join(
            f"{t.text()}, the side behind could still gain up to {t.behind.reach():.2f} ({t.rising_text()})"
            for t in open_) + (f" (would be {would} were they plateaued)" if would != INCONCLUSIVE else ""))
    return INCONCLUSIVE, "; ".join(parts) + note


def claim(text: str, source: str, evidence: str, holds: bool | None, profile: str, seeds: int,
          tests: Sequence[Comparison] | None = (), note: str = "", exact: bool = False,
          construction: str = "", rising: str = "") -> Claim:
    """A :class:`Claim` judged by :func:`verdict`; the rule's reason follows ``note``."""
    v, why = verdict(holds, profile, seeds, tests, exact, construction, rising)
    return Claim(text, source, evidence, v, "; ".join(x for x in (note, why) if x), profile, tuple(tests or ()))


def untested(claim: str, source: str, why: str) -> Claim:
    """A claim not tested here; ``why`` says why (data not on the machine, not run, ...)."""
    if not why:
        raise ValueError(f"untested({claim!r}): say why it was not tested")
    return Claim(claim, source, "—", NOT_TESTED, why)


# ---------------------------------------------------------------------------------------------- plateau

def plateau(curve: Sequence[float], window: float = 0.2, tol: float = 0.2) -> tuple[bool, float]:
    """Has a run's accuracy curve (points, one value per evaluated round) plateaued? ``(plateaued,
    rise)``: ``rise`` is how much the best-so-far accuracy still gained over the last ``window``
    fraction of the rounds (at least one round), and the run plateaued when ``rise < tol`` points.
    NaN rounds (a diverged run) are skipped; a curve of fewer than two finite values has not."""
    if not 0 < window < 1:
        raise ValueError(f"plateau: window must be in (0, 1), got {window}")
    if tol <= 0:
        raise ValueError(f"plateau: tol must be > 0 points, got {tol}")
    y = np.asarray(curve, float)
    y = y[~np.isnan(y)]
    if len(y) < 2:
        return False, math.nan
    best = np.maximum.accumulate(y)
    tail = max(1, math.ceil(window * len(y)))
    rise = float(best[-1] - best[-1 - tail])
    return rise < tol, rise


def plateau_text(curve: Sequence[float], window: float = 0.2, tol: float = 0.2) -> str:
    """``""`` for a curve that plateaued, else ``not plateaued (+0.85 in the last 20% of rounds)``: the
    label a converged-profile table puts beside a run."""
    done, rise = plateau(curve, window, tol)
    if done:
        return ""
    return "not plateaued" + ("" if math.isnan(rise) else f" (+{rise:.2f} in the last {window:.0%} of rounds)")


def mean_curve(curves: Sequence[Sequence[float]]) -> np.ndarray:
    """The seed-mean of per-seed curves of equal length (a seed's NaN rounds make that round NaN)."""
    lengths = {len(c) for c in curves}
    if len(lengths) != 1:
        raise ValueError(f"mean_curve: curves of different lengths {sorted(lengths)}")
    return np.mean(np.asarray(curves, float), axis=0)


# ---------------------------------------------------------------------------------------------- tables

def table(claims: list[Claim]) -> pd.DataFrame:
    """The ledger as a table (one row per claim, numbered as in the notebook); ``profile`` is the profile
    whose runs gave the evidence."""
    frame = pd.DataFrame([dataclasses.asdict(c) for c in claims],
                         columns=["claim", "source", "evidence", "profile", "verdict", "note"])
    frame.index = range(1, len(frame) + 1)
    frame.index.name = "#"
    return frame


def counts(claims: list[Claim]) -> dict[str, int]:
    """How many claims got each verdict."""
    return {v: sum(c.verdict == v for c in claims) for v in VERDICTS}


def summary_line(claims: list[Claim]) -> str:
    c = counts(claims)
    return (f"{c[SUPPORTED]} supported, {c[NOT_SUPPORTED]} not supported, {c[INCONCLUSIVE]} inconclusive, "
            f"{c[BY_CONSTRUCTION]} by construction, {c[NOT_TESTED]} not tested here")


def protocols(claims: list[Claim]) -> str:
    """The profiles behind the decided verdicts (supported / not supported), e.g. ``paper``."""
    used = dict.fromkeys(c.profile for c in claims if c.verdict in (SUPPORTED, NOT_SUPPORTED) and c.profile)
    return ", ".join(used) or "—"


def summary_table(ledgers: dict[str, list[Claim]]) -> pd.DataFrame:
    """The verdict summary for the top of REPORT.md: one row per paper (``{title: claims}``), its count
    per verdict and the profiles behind its decided verdicts."""
    rows = {title: {**counts(cs), "protocol behind supported / not supported": protocols(cs)}
            for title, cs in ledgers.items()}
    frame = pd.DataFrame.from_dict(rows, orient="index",
                                   columns=[*VERDICTS, "protocol behind supported / not supported"])
    frame.index.name = "paper"
    return frame


def write(section, claims: list[Claim], record: bool = True) -> pd.DataFrame:
    """Add the ledger to a report section (:class:`fedlib.report.ReportSection`): the table under its
    summary line, then, in words, every claim our numbers contradict; returns the table. With ``record``, the
    counts go to report.json (``values.verdicts``) for :func:`summary_table`."""
    from fedlib.report import to_markdown

    frame = table(claims)
    if record:
        section.record(verdicts=counts(claims), verdict_protocols=protocols(claims))
    section.text(f"**Claims ledger ({summary_line(claims)}).**\n\n" + to_markdown(frame))
    against = [c for c in claims if c.verdict == NOT_SUPPORTED]
    if against:
        section.text("**Where ours contradict the paper.**\n\n" + "\n".join(
            f"- {c.claim} ({c.source}): {c.evidence}." + (f" {c.note}." if c.note else "") for c in against))
    return frame


def versus_best(name: str, values: dict[str, Sequence[float]], paired: bool = True,
                trends: dict | None = None) -> Comparison:
    """``name`` against the best other entry of ``values`` (``{label: per-seed values}``, highest mean):
    the comparison a "best of all" claim rests on; paired when ``paired`` and both sides have as many seeds,
    else the rank-sum test. ``trends``: ``{label: Trend}`` where the sides' curves are known."""
    if name not in values or len(values) < 2:
        raise ValueError(f"versus_best: need {name!r} and at least one other among {sorted(values)}")
    mean = {k: float(np.nanmean(v)) for k, v in values.items()}
    rival = max((k for k in values if k != name), key=mean.get)
    same = len(values[name]) == len(values[rival])  # runs of other seeds cannot pair up
    trends = trends or {}
    return compare(f"{name} - {rival}", values[name], values[rival], paired and same, trends.get(name),
                   trends.get(rival))


_CELL = re.compile(r"(?<!\\)\|")
_PROFILE = re.compile(r"_profile `([^`]+)`")


def section_profile(markdown: str) -> str | None:
    """The profile a report section's header line states (``_profile `quick` · ...``)."""
    m = _PROFILE.search(markdown)
    return m.group(1) if m else None


def parse_ledger(markdown: str) -> tuple[list[Claim], bool]:
    """The claims of the ledger table in a report section's markdown (written by :func:`write`) and whether
    it was written under this rule (it has a ``profile`` column, no count claim is "supported" and no converged-profile
    claim decided on a curve still rising: an earlier section's verdicts came from older rules, which counted exact
    counts that hold as support and did not cap a converged verdict on a curve that had not plateaued). Where a row
    has no profile, the section's profile stands in, or ``paper`` for a row whose source says "paper
    protocol"."""
    lines = markdown.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith("**Claims ledger")), None)
    if start is None:
        return [], False
    rows = []
    for line in lines[start + 1:]:
        if not line.strip() and rows:
            break
        if line.startswith("|"):
            rows.append([c.strip().replace("\\|", "|") for c in _CELL.split(line.strip())[1:-1]])
    if len(rows) < 2:
        return [], False
    head = rows[0]
    col = {name: head.index(name) for name in ("claim", "source", "evidence", "verdict", "note", "profile")
           if name in head}
    default = section_profile(markdown) or ""
    out = []
    for r in rows[2:]:
        get = {k: r[i] if i < len(r) else "" for k, i in col.items()}
        prof = get.get("profile") or ("paper" if "paper protocol" in get["source"] else default)
        out.append(Claim(get["claim"], get["source"], get["evidence"], get["verdict"], get.get("note", ""), prof))
    old_counts = any(c.verdict == SUPPORTED and EXACT_TAG in c.note for c in out)
    old_plateau = any(c.verdict in (SUPPORTED, NOT_SUPPORTED) and c.profile == "converged"
                      and "not plateaued" in c.note.lower() for c in out)
    return out, "profile" in col and not (old_counts or old_plateau)


def report_summary(sections: dict[str, str]) -> pd.DataFrame:
    """The verdict summary table at the top of REPORT.md from the papers' section markdowns
    (``{name: markdown}``): :func:`summary_table` of each ledger, titled by the section's heading, with the
    section's profile and whether its ledger was judged by this rule (an older section must be re-rendered)."""
    ledgers, extra = {}, {}
    for name, md in sections.items():
        claims_, current = parse_ledger(md)
        title = next((line[3:].strip() for line in md.splitlines() if line.startswith("## ")), name)
        ledgers[title] = claims_
        extra[title] = (section_profile(md) or "—", "this one" if current else "an earlier one: re-render")
    frame = summary_table(ledgers)
    frame.insert(0, "section profile", [extra[t][0] for t in frame.index])
    frame["verdict rule"] = [extra[t][1] for t in frame.index]
    return frame


# ---------------------------------------------------------------------------------------------- claims as data
# A claims file: ``claims:`` a list of claims, each ``{id, kind, claim, source, note?, untested?}`` and, for every kind
# but ``untested``, ``table`` (the name of a :class:`Cells` the study gives), ``evidence`` (a template), and optionally
# ``item`` / ``join`` (each cell of the table by a template, joined: ``{items}``), ``label`` (a comparison's label),
# ``require`` (cells that must be present), ``exact`` and ``reason`` (true by construction, and why: the claim's rule
# checks the measurement, no comparison is made), ``compare: false`` (no comparison: the claim rests on one model, its
# verdict inconclusive unless exact); then the fields of its kind (:data:`KIND_FIELDS`). Templates
# are Python format strings of the names :meth:`_Judge.names` gives (``{subject[value]:.2f}``,
# ``{cells[fedavg][text]}``, ``{caveat}``, ``{seeds} seed{s}``, the table's ``text``); ``note`` may be a list, its
# non-empty parts joined by "; ".
# ``untested: {claim?, why, when}`` makes a claim whose table is ``absent`` or too ``short`` to judge "not tested".
# A claim of kind ``untested`` is not tested, always, or with ``table`` only where that table is absent or lacks a
# ``require``d cell (its ``why`` may name the table's text).

#: the kinds of claim a ``params/<paper>/claims.yaml`` names, each evaluated by one function of this module:
#: ``best`` (a method beats every other of a table, or of each setting of it), ``sweep_best`` (best at every point of
#: a sweep), ``chain`` (an ordered sequence a < b < c), ``intermediate`` (an interior value of a sweep is best),
#: ``ratio`` (a per-seed ratio against a bound), ``threshold`` (a measured value against a bound), ``construction``
#: (true by how the method is built, with its reason) and ``untested`` (with why); ``degrades`` (larger keys of a
#: sweep fall below the subject or fail) and ``head_to_head`` (a method ahead of its rival on each of some settings,
#: paired on the seeds both finished); ``leads`` (ahead, highest or lowest, at every point of a table, exact counts
#: too), ``above`` (pairs a > b, per point or on the table), ``family`` (every member above every other cell) and
#: ``significant`` (the paper's rank-sum test against every other cell)
CLAIM_KINDS = ("best", "sweep_best", "chain", "intermediate", "ratio", "threshold", "construction", "untested",
               "degrades", "head_to_head", "leads", "above", "family", "significant")
_KEY = (str, int, float)
_NUMBER = (int, float)
#: every field a claim may have: ``(types, what is allowed)``
CLAIM_FIELDS = {
    "id": (str, "a name for the claim, unique in the file"), "kind": (str, "one of " + ", ".join(CLAIM_KINDS)),
    "claim": (str, "the paper's claim (a template)"), "source": (str, "where the paper says it"),
    "note": ((str, list), "a template, or a list of templates joined by '; '"),
    "untested": (dict, "a mapping {claim, why, when: [absent, short]}"), "exact": (bool, "true or false"),
    "table": (str, "the name of a table the study gives"), "evidence": (str, "a template"),
    "item": (str, "a template of one cell's fields"), "join": (str, "a separator"),
    "label": (str, "a template of a comparison's label ({a}, {b}, {point})"),
    "require": (list, "a list of the cells that must be present"),
    "subject": (_KEY, "a cell's key"), "rival": (_KEY, "a cell's key"),
    "direction": (str, "one of highest, lowest"), "among": (list, "a list of cells' keys"),
    "against": (str, "one of strongest, every"), "margin": (_NUMBER, "a number (points added to the subject)"),
    "strict": (bool, "true or false"), "tolerance": (_NUMBER, "a number"), "tie_note": (str, "a text"),
    "per_point": (str, "one of each, first"), "point": (str, "a template of a point's key ({})"),
    "min_points": (int, "a positive integer"), "max_point_above": (_NUMBER, "a number"),
    "order": (list, "a list of at least two cells' keys, lowest first"), "field": (str, "a cell field"),
    "below": (_NUMBER, "a number"), "fewer": (str, "a cell field (an exact count)"),
    "at_most": ((int, float, dict), "a number or {field, plus}"),
    "at_least": ((int, float, dict), "a number or {field, plus}"),
    "reason": (str, "why the claim holds by construction"), "less": (list, "two cells' keys [smaller, larger]"),
    "ratio": (list, "two cells' keys [numerator, denominator]"), "why": (str, "why it is not tested (a template)"),
    "keys_from": (_NUMBER, "a number (the smallest key of the cells judged)"),
    "failed": (str, "a cell field (true where its run failed)"),
    "at": (list, "a list of settings' keys (the table's points)"),
    "outside": (list, "a list of settings' keys (every other setting of the table)"),
    "compare": (bool, "true or false (false: no comparison, the claim rests on one model)"),
    "times": (_NUMBER, "a positive number (how many times above or below)"),
    "line": (str, "a template of one point's line ({lines})"), "behind_note": (str, "a text ({behind})"),
    "lower_bound": (str, "a text ({bound})"), "pairs": (list, "a list of pairs of cells' keys [above, below]"),
    "members": (list, "a list of cells' keys"),
}
_COMMON = ("id", "kind", "claim", "source", "note", "untested")
_DATA = ("table", "evidence", "item", "join", "label", "require", "exact", "reason", "compare")
#: per kind: ``(required fields, optional fields)`` beside :data:`_COMMON` (and :data:`_DATA` for all but untested)
KIND_FIELDS = {
    "best": (("subject",), ("direction", "among", "against", "margin", "strict", "tolerance", "tie_note", "per_point",
                            "point")),
    "sweep_best": (("subject",), ("rival", "margin", "strict", "tolerance", "point", "min_points", "max_point_above")),
    "chain": (("order",), ()),
    "intermediate": ((), ("min_points",)),
    "ratio": (("subject", "rival", "field", "below"), ("fewer", "per_point", "point")),
    "threshold": ((), ("at_most", "at_least", "among", "strict")),
    "construction": (("reason",), ("less", "ratio", "below")),
    "untested": (("why",), ("table", "require")),
    "degrades": (("subject", "keys_from"), ("failed",)),
    "head_to_head": (("subject",), ("rival", "at", "outside", "per_point")),
    "leads": (("subject",), ("direction", "times", "strict", "point", "line", "behind_note", "lower_bound")),
    "above": (("pairs",), ("per_point", "point")),
    "family": (("members",), ()),
    "significant": (("subject",), ("field",)),
}


@dataclasses.dataclass
class Cells:
    """One table a study gives the claims engine (:func:`evaluate`), by name: ``cells`` ``{key: cell}`` (a cell:
    ``{"label", "value", "per_seed", "n", "trend", ...}``: the printed name, the number claims rank by, its per-seed
    values (None where not at hand), seeds, :class:`Trend` (or None), and any further fields a template names), or
    ``{(point, key): cell}`` for a sweep or a table of settings; the ``profile`` whose runs made them, the ``caveat`` a
    note may name, ``seeds`` the verdict counts (default: the fewest of the cells a claim reads), ``points``
    (``{point: label}``; default the claim's ``point`` template), ``text`` (further template fields) and ``rising``
    (:func:`verdict`'s runs outside the comparisons still rising). ``caveat_of``: where a claim's caveat depends on
    the cells it reads (the seeds the evidence planner added to some of them), a function of those cells
    (``{key: cell}``) giving it, in place of ``caveat``."""

    cells: dict
    profile: str
    caveat: str = ""
    seeds: int | None = None
    points: dict = dataclasses.field(default_factory=dict)
    text: dict = dataclasses.field(default_factory=dict)
    rising: str = ""
    caveat_of: object = None


@dataclasses.dataclass
class Book:
    """A paper's claims as read from ``source`` (``params/<paper>/claims.yaml``), validated (:func:`check_book`)."""

    source: str
    claims: list


def load_book(paper: str, path=None) -> Book:
    """The claims of ``paper``: ``params/<paper>/claims.yaml`` (or ``path``) read as every params file is
    (:func:`fedlib.config.read_yaml`: a syntax error or an alias bomb is one line) and validated
    (:func:`check_book`)."""
    from pathlib import Path

    from fedlib.config import read_yaml
    from fedlib.paths import PARAMS

    path = Path(path or PARAMS / paper / "claims.yaml")
    source = f"{path.parent.name}/{path.name}"
    return Book(source, check_book(read_yaml(path, source), source))


def check_book(spec, source: str) -> list[dict]:
    """The claims of a claims file (``{claims: [claim, ...]}``), each checked by :func:`check_claim`; the first bad
    value is one :class:`~fedlib.validation.ConfigError` line naming the file, the claim and the field."""
    from fedlib.validation import ConfigError

    if not isinstance(spec, dict):
        raise ConfigError(source, spec, "a mapping with one section, claims: a list of claims")
    for key in spec:
        if key != "claims":
            raise ConfigError(f"{source}: {key}", "(a section)", "one of claims")
    book = spec.get("claims")
    if not isinstance(book, list) or not book:
        raise ConfigError(f"{source}: claims", book, "a non-empty list of claims")
    seen = set()
    for i, c in enumerate(book):
        check_claim(c, source, i)
        if c["id"] in seen:
            raise ConfigError(f"{source}: {c['id']}.id", c["id"], "a name no other claim of the file has")
        seen.add(c["id"])
    return book


def _type_ok(value, types) -> bool:
    types = types if isinstance(types, tuple) else (types,)
    return isinstance(value, types) and (bool in types or not isinstance(value, bool))


def check_claim(c, source: str, index: int = 0) -> dict:
    """One claim of a claims file: a known ``kind`` (:data:`CLAIM_KINDS`), only the fields of its kind
    (:data:`KIND_FIELDS`), each of its type (:data:`CLAIM_FIELDS`), the required ones present, values in range."""
    from fedlib.validation import ConfigError

    if not isinstance(c, dict):
        raise ConfigError(f"{source}: claims[{index}]", c, "a mapping of a claim's fields")
    name = f"{source}: {c['id']}" if isinstance(c.get("id"), str) else f"{source}: claims[{index}]"
    kind = c.get("kind")
    if kind not in KIND_FIELDS:
        raise ConfigError(f"{name}.kind", kind, CLAIM_FIELDS["kind"][1])
    required, optional = KIND_FIELDS[kind]
    data = () if kind == "untested" else _DATA
    allowed = _COMMON + data + required + optional
    for key, value in c.items():
        if key not in allowed:
            raise ConfigError(f"{name}.{key}", value, "one of " + ", ".join(allowed))
        if not _type_ok(value, CLAIM_FIELDS[key][0]):
            raise ConfigError(f"{name}.{key}", value, CLAIM_FIELDS[key][1])
    for key in ("id", "claim", "source", *required, *(("table", "evidence") if data else ())):
        if key not in c:
            raise ConfigError(f"{name}.{key}", None, f"a value (every {kind} claim names its {key})")
    _check_values(c, name)
    return c


_CHOICES = {"direction": ("highest", "lowest"), "against": ("strongest", "every"), "per_point": ("each", "first")}
_TEMPLATES = ("claim", "evidence", "item", "label", "point", "why", "tie_note", "line", "behind_note", "lower_bound")


def _check_values(c: dict, name: str) -> None:
    """The values of a claim's fields that their type alone does not settle (choices, lengths, templates)."""
    from fedlib.validation import ConfigError

    def bad(key, allowed, value=None):
        raise ConfigError(f"{name}.{key}", c.get(key) if value is None else value, allowed)

    for key, choices in _CHOICES.items():
        if key in c and c[key] not in choices:
            bad(key, "one of " + ", ".join(choices))
    if c.get("min_points", 1) < 1:
        bad("min_points", CLAIM_FIELDS["min_points"][1])
    for key, size in (("order", None), ("less", 2), ("ratio", 2), ("require", None), ("among", None), ("at", None),
                      ("outside", None), ("members", None)):
        value = c.get(key)
        if value is not None and (not value or (size and len(value) != size) or (key == "order" and len(value) < 2)
                                  or not all(_type_ok(v, _KEY) for v in value)):
            bad(key, CLAIM_FIELDS[key][1])
    if c.get("margin") and c.get("direction") == "lowest":
        bad("margin", "no margin with direction lowest")
    if "ratio" in c and "below" not in c:
        bad("below", "a number (a ratio claim's bound)", c.get("below"))
    if c["kind"] == "threshold" and ("at_most" in c) == ("at_least" in c):
        bad("at_most", "exactly one of at_most, at_least")
    if c["kind"] == "head_to_head" and ("at" in c) == ("outside" in c):
        bad("at", "exactly one of at, outside")
    if not all(isinstance(x, list) and len(x) == 2 and all(_type_ok(v, _KEY) for v in x) for x in c.get("pairs", [])):
        bad("pairs", CLAIM_FIELDS["pairs"][1])
    if c.get("times", 1) <= 0:
        bad("times", CLAIM_FIELDS["times"][1])
    for key in ("at_most", "at_least"):
        bound = c.get(key)
        if isinstance(bound, dict) and (set(bound) - {"field", "plus"} or not isinstance(bound.get("field"), str)
                                        or not _type_ok(bound.get("plus", 0), _NUMBER)):
            bad(key, CLAIM_FIELDS[key][1])
    _check_untested(c.get("untested"), name)
    notes = c.get("note", [])
    if not all(isinstance(x, str) for x in (notes if isinstance(notes, list) else [notes])):
        bad("note", CLAIM_FIELDS["note"][1])
    for key in _TEMPLATES + ("note",):
        for text in (c[key] if isinstance(c.get(key), list) else [c[key]]) if key in c else ():
            try:
                list(string.Formatter().parse(text))
            except ValueError as exc:
                bad(key, f"a template ({exc})", text)


def _check_untested(spec, name: str) -> None:
    from fedlib.validation import ConfigError

    if spec is None:
        return
    for key, value in spec.items():
        if key not in ("claim", "why", "when"):
            raise ConfigError(f"{name}.untested.{key}", value, "one of claim, why, when")
    if not isinstance(spec.get("why"), str) or not spec["why"]:
        raise ConfigError(f"{name}.untested.why", spec.get("why"), "why it is not tested (a template)")
    when = spec.get("when", ["absent", "short"])
    if not isinstance(when, list) or not when or not set(when) <= {"absent", "short"}:
        raise ConfigError(f"{name}.untested.when", when, "a list of absent (no table), short (too little to judge)")


_NO_CELL = {"label": "", "value": math.nan, "per_seed": None, "n": 1}


@dataclasses.dataclass
class _Judge:
    """One claim of a book on its table: the templates' names, the comparisons and the :class:`Claim`."""

    book: Book
    spec: dict
    table: Cells

    def fail(self, key: str, value, allowed: str):
        from fedlib.validation import ConfigError

        return ConfigError(f"{self.book.source}: {self.spec['id']}.{key}", value, allowed)

    def fmt(self, key: str, ns: dict, text: str | None = None, *args) -> str:
        """``text`` (default the claim's field ``key``) filled from ``ns``; a name it lacks is one line naming the
        file, the claim and the field."""
        text = self.spec[key] if text is None else text
        try:
            return text.format(*args, **ns)
        except (KeyError, IndexError, AttributeError, ValueError, TypeError) as exc:
            raise self.fail(key, text, "a template of the fields " + ", ".join(sorted(ns))
                            + f" ({type(exc).__name__}: {exc})") from None

    def seeds(self, cells: dict) -> int:
        """The seeds a verdict counts: the table's, else the fewest of ``cells``."""
        if self.table.seeds is not None:
            return self.table.seeds
        return min((int(c.get("n", 1)) for c in cells.values()), default=1)

    def names(self, cells: dict, read: dict | None = None, **more) -> dict:
        """What the claim's templates may name: the table's ``text``, ``caveat`` (the table's ``caveat_of`` the cells
        the claim reads: ``read``, default ``cells``), ``profile``, ``cells`` (these), ``seeds``, ``s`` (the plural's
        s), ``items`` (each cell by the ``item`` template), then ``more``."""
        seeds = more.pop("seeds") if "seeds" in more else self.seeds(cells)
        caveat = self.table.caveat if self.table.caveat_of is None else self.table.caveat_of(
            cells if read is None else read)
        return {**self.table.text, "caveat": caveat, "profile": self.table.profile, "cells": cells,
                "items": self.items(cells), "seeds": seeds, "s": "s" if seeds > 1 else "", **more}

    def items(self, cells: dict) -> str:
        if "item" not in self.spec:
            return ""
        sep = ", " if self.spec["kind"] == "sweep_best" else self.spec.get("join", ", ")   # a sweep joins its points
        return sep.join(self.fmt("item", {**c, "key": k}) for k, c in cells.items())

    def note(self, ns: dict) -> str:
        notes = self.spec.get("note", [])
        return "; ".join(x for x in (self.fmt("note", ns, n) for n in (notes if isinstance(notes, list) else [notes]))
                         if x)

    def rows(self) -> dict:
        """``{point: {key: cell}}`` of a table of ``(point, key)`` cells, points in the table's order."""
        rows: dict = {}
        for key, cell in self.table.cells.items():
            if not isinstance(key, tuple) or len(key) != 2:
                raise self.fail("table", self.spec["table"], "a table of (point, key) cells for a claim per point "
                                f"or over a sweep; got the key {key!r}")
            rows.setdefault(key[0], {})[key[1]] = cell
        return rows

    def point(self, p) -> str:
        if p in self.table.points:
            return self.table.points[p]
        return self.fmt("point", {}, None, p) if "point" in self.spec else str(p)

    def versus(self, a: dict, b: dict, ns: dict, shift: float = 0.0, a_label: str | None = None):
        """``a`` (shifted by ``shift`` points) against ``b`` per seed (:func:`compare`, paired where they hold as
        many seeds), with their trends; None where a side's per-seed values are not at hand."""
        va, vb = a.get("per_seed"), b.get("per_seed")
        if va is None or vb is None:
            return None
        va = [x + shift for x in va] if shift else va
        label = self.fmt("label", {**ns, "a": a_label or a["label"], "b": b["label"]},
                         self.spec.get("label", "{a} - {b}"))
        got = compare(label, va, vb, len(va) == len(vb), a.get("trend"), b.get("trend"))
        sa, sb = a.get("seeds"), b.get("seeds")
        if got.paired or not sa or not sb or len(sa) != len(va) or len(sb) != len(vb):
            return got
        # sides on different seeds (seeds added to one): the seeds both hold pair up once the other gets them too,
        # and their differences against the margin bound that paired test (Comparison.minority)
        other = dict(zip(sb, vb, strict=True))
        shared = [x - other[k] for k, x in zip(sa, va, strict=True) if k in other]
        return dataclasses.replace(got, minority=_minority(np.array(shared), got.margin)) if shared else got

    def claim(self, ns: dict, holds, tests=(), evidence: str | None = None, construction: str = "") -> Claim:
        construction = construction or self.spec.get("reason", "")   # stated, not counted: no comparison
        tests = () if construction or self.spec.get("compare") is False else (
            None if tests is None or any(t is None for t in tests) else tests)
        return claim(self.fmt("claim", ns), self.spec["source"],
                     self.fmt("evidence", ns) if evidence is None else evidence, holds, self.table.profile,
                     ns["seeds"], tests, self.note(ns), exact=self.spec.get("exact", False), construction=construction,
                     rising=self.table.rising)


    def untested(self, ns: dict) -> list[Claim]:
        """A kind's own "too short to judge": the claim's ``untested`` (where its ``when`` holds ``short``) filled from
        ``ns``, its ``claim`` (default the claim's) and ``why``; [] without one."""
        spec = self.spec.get("untested")
        if spec is None or "short" not in spec.get("when", ("absent", "short")):
            return []
        return [untested(self.fmt("untested", ns, spec.get("claim", self.spec["claim"])), self.spec["source"],
                         self.fmt("untested", ns, spec["why"]))]


def _ahead(spec: dict, s: float, r: float) -> bool:
    """The subject's ``s`` ahead of the rival's ``r`` as the claim says: by ``margin`` points more (``strict``) or at
    least (less ``tolerance``), or, with ``direction: lowest``, below it."""
    strict, tol = spec.get("strict", True), spec.get("tolerance", 0.0)
    if spec.get("direction") == "lowest":
        return s < r if strict else s <= r + tol
    m = spec.get("margin", 0.0)
    return s > r - m if strict else s >= r - m - tol


def _margin_text(m: float) -> str:
    return f" + {m:g}" if m > 0 else f" - {-m:g}" if m < 0 else ""


def _per_point(j: _Judge, one) -> list | None:
    """``one(cells, names)`` on the table, or, with ``per_point``, on each point's cells (``first``: the first that
    gives a claim); None (too little to judge) where the subject is in no point."""
    if "per_point" not in j.spec:
        got = one(j.table.cells, {})
        return None if got is None else [got]
    rows, out = j.rows(), []
    for p, row in rows.items():
        got = one(row, {"point": j.point(p)})
        if got is not None:
            out.append(got)
            if j.spec["per_point"] == "first":
                break
    return out if out or any(j.spec["subject"] in r for r in rows.values()) else None


def _best(j: _Judge) -> list | None:
    """``best``: the subject ahead of every other cell (``among`` them), judged against the strongest rival (or,
    ``against: every``, each), per seed."""
    return _per_point(j, lambda cells, extra: _best_of(j, cells, extra))


def _best_of(j: _Judge, cells: dict, extra: dict) -> Claim | None:
    s, subj = j.spec, j.spec["subject"]
    if subj not in cells:
        return None
    value = {k: c["value"] for k, c in cells.items()}
    rivals = [k for k in s.get("among", list(cells)) if k != subj and k in cells and not math.isnan(value[k])]
    if not rivals:
        return None
    low, tol = s.get("direction") == "lowest", s.get("tolerance", 0.0)
    pick = min if low else max
    rival, leader = pick(rivals, key=value.get), pick(cells, key=value.get)
    top = value[leader]
    tied = sum((v <= top + tol) if low else (v >= top - tol) for v in value.values())
    tie = s.get("tie_note", "") if tied > 1 else ""
    ns = j.names(cells, subject=cells[subj], rival=cells[rival], leader=cells[leader], tie=tie, **extra)
    m = s.get("margin", 0.0)
    against = rivals if s.get("against") == "every" else [rival]
    if math.isnan(value[subj]):
        tests = []
    elif low:
        tests = [j.versus(cells[k], cells[subj], ns) for k in against]
    else:
        tests = [j.versus(cells[subj], cells[k], ns, m, cells[subj]["label"] + _margin_text(m)) for k in against]
    return j.claim(ns, _ahead(s, value[subj], value[rival]), tests)


def _enough(spec: dict, keys: list) -> bool:
    return len(keys) >= spec.get("min_points", 1) and (
        "max_point_above" not in spec or max(keys) > spec["max_point_above"])


def _sweep_best(j: _Judge) -> list | None:
    """``sweep_best``: the subject ahead of the strongest other (or of ``rival``) at every point of a sweep of
    ``(point, key)`` cells, one comparison per point; the evidence is the ``evidence`` template per point, joined."""
    s, subj, fixed = j.spec, j.spec["subject"], j.spec.get("rival")
    rows = j.rows()
    judged = {p: r for p, r in rows.items() if subj in r and (fixed in r if fixed is not None else len(r) > 1)}
    if not judged or not _enough(s, list(rows)):
        return None
    m = s.get("margin", 0.0)
    holds, tests, lines = True, [], []
    for p, row in rows.items():
        ns = j.names(row, point=j.point(p), subject=_NO_CELL, rival=_NO_CELL, gap=math.nan)
        if p in judged:
            rival = fixed if fixed is not None else max((k for k in row if k != subj), key=lambda k: row[k]["value"])
            a, b = row[subj], row[rival]
            ns.update(subject=a, rival=b, gap=a["value"] - b["value"])
            holds = _ahead(s, a["value"], b["value"]) and holds
            tests.append(j.versus(a, b, ns, m, a["label"] + _margin_text(m)))
        lines.append(j.fmt("evidence", ns))
    read = {(p, k): c for p, r in judged.items() for k, c in r.items()}   # what a table's caveat_of names
    ns = j.names({}, read, seeds=min(j.seeds(r) for r in judged.values()))
    return [j.claim(ns, holds, tests, s.get("join", "; ").join(lines))]


def _chain(j: _Judge) -> list | None:
    """``chain``: the cells of ``order`` ascending, each step judged per seed."""
    order, cells = j.spec["order"], j.table.cells
    if any(k not in cells for k in order):
        return None
    read = {k: cells[k] for k in order}
    ns = j.names(cells, read, seeds=j.seeds(read))
    steps = list(zip(order, order[1:], strict=False))
    tests = [j.versus(cells[hi], cells[lo], ns) for lo, hi in steps]
    return [j.claim(ns, all(cells[lo]["value"] < cells[hi]["value"] for lo, hi in steps), tests)]


def _intermediate(j: _Judge) -> list | None:
    """``intermediate``: the best of a sweep (cells keyed by the swept value) at an interior value, judged as the best
    interior value against the better end."""
    cells = j.table.cells
    if len(cells) < j.spec.get("min_points", 3):
        return None
    value = {k: c["value"] for k, c in cells.items()}
    lo, hi = min(cells), max(cells)
    best = max(value, key=value.get)
    inner = max((k for k in cells if lo < k < hi), key=value.get)
    outer = max((lo, hi), key=value.get)
    ns = j.names(cells)
    return [j.claim(ns, lo < best < hi, [j.versus(cells[inner], cells[outer], ns)])]


def _ratio(j: _Judge) -> list | None:
    """``ratio``: the subject's per-seed ``field`` over the rival's below ``below`` (and, with ``fewer``, the subject's
    exact count smaller), judged as ``below`` x rival - subject per seed."""
    return _per_point(j, lambda cells, extra: _ratio_of(j, cells, extra))


def _ratio_of(j: _Judge, cells: dict, extra: dict) -> Claim | None:
    s, f = j.spec, j.spec["field"]
    a, b = cells.get(s["subject"]), cells.get(s["rival"])
    if a is None or b is None or f not in a or f not in b:
        return None
    k = min(len(a[f]), len(b[f]))
    sa, sb, bound = a[f][:k], b[f][:k], s["below"]
    ratio = [x / y for x, y in zip(sa, sb, strict=True)]
    holds = np.mean(ratio) < bound
    if "fewer" in s:
        holds = a[s["fewer"]] < b[s["fewer"]] and holds
    ns = j.names(cells, subject=a, rival=b, subject_mean=np.mean(sa), rival_mean=np.mean(sb), ratio=np.mean(ratio),
                 seeds=k, **extra)
    label = j.fmt("label", {**ns, "a": a["label"], "b": b["label"], "bound": bound},
                  s.get("label", "{bound:g} x {b} - {a}"))
    return j.claim(ns, holds, [compare(label, [bound * y for y in sb], sa, True, fixed_budget(b.get("trend")),
                                       fixed_budget(a.get("trend")))])


def fixed_budget(trend: Trend | None) -> Trend | None:
    """``trend`` for a per-round measure (seconds, megabytes of a round): no best-so-far curve to project, so it
    counts as plateaued; it still names its runs, so that the evidence planner can cost more seeds of them."""
    return None if trend is None else dataclasses.replace(trend, plateaued=True, rise=0.0, gain=0.0, tail=0.0,
                                                          per_round=True)


def _threshold(j: _Judge) -> list | None:
    """``threshold``: every cell's value (of ``among``, default every cell) ``at_most`` (or ``at_least``) a bound (a
    number, or a field of the cell plus ``plus``; ``strict``: below it, or above), each cell a comparison of its
    per-seed values against the bound (cells with a NaN left out): ``at_most``, bound - value against 0;
    ``at_least``, the values against the bound."""
    s, cells = j.spec, j.table.cells
    most, strict = "at_most" in s, s.get("strict", False)
    spec = s["at_most"] if most else s["at_least"]
    ns = j.names(cells)
    holds, tests = True, []
    for c in (cells[k] for k in s.get("among", cells) if k in cells):
        bound, v = (c[spec["field"]] + spec.get("plus", 0.0)) if isinstance(spec, dict) else spec, c["value"]
        holds = holds and ((v < bound if strict else v <= bound) if most else (v > bound if strict else v >= bound))
        if math.isnan(v) or math.isnan(bound):
            continue
        values = c.get("per_seed") or [v]
        label = j.fmt("label", {**ns, "a": c["label"]}, s.get("label", "{a}"))
        tests.append(dataclasses.replace(against_threshold(label, [bound - x for x in values], 0.0, c.get("trend"))
                                         if most else against_threshold(label, values, bound, c.get("trend")),
                                         b_trend=c.get("b_trend")))   # a second group of runs behind the value
    return [j.claim(ns, holds, tests)]


def _construction(j: _Judge) -> list | None:
    """``construction``: true by how the method is built (``reason``), its measurement checked: ``less: [a, b]``
    (a's value below b's) or ``ratio: [a, b]`` below ``below``."""
    s, cells = j.spec, j.table.cells
    if any(k not in cells for k in s.get("less", []) + s.get("ratio", [])):
        return None
    extra, holds = {}, True
    if "less" in s:
        holds = cells[s["less"][0]]["value"] < cells[s["less"][1]]["value"]
    elif "ratio" in s:
        extra["ratio"] = cells[s["ratio"][0]]["value"] / cells[s["ratio"][1]]["value"]
        holds = extra["ratio"] < s["below"]
    return [j.claim(j.names(cells, **extra), holds, construction=s["reason"])]


def _degrades(j: _Judge) -> list | None:
    """``degrades``: every other cell whose key is at least ``keys_from`` below the subject's value, or failed (its
    ``failed`` field true: counted as below, not compared), each compared per seed against the subject. No claim
    without the subject and another cell; where no key is that large, not tested (``untested``: ``why`` may name
    ``items``)."""
    s, cells = j.spec, j.table.cells
    subj = cells.get(s["subject"])
    if subj is None or len(cells) < 2:
        return []
    ns = j.names(cells, subject=subj)
    large = [k for k in cells if k != s["subject"] and k >= s["keys_from"]]
    if not large:
        return j.untested(ns)
    ran = [k for k in large if not cells[k].get(s.get("failed", ""), False)]
    holds = all(cells[k]["value"] < subj["value"] for k in ran)
    return [j.claim(ns, holds, [j.versus(subj, cells[k], ns) for k in ran])]


def _head_to_head(j: _Judge) -> list | None:
    """``head_to_head``: on a table of ``(setting, key)`` cells, the subject ahead of a rival (``rival``, else the
    strongest other cell there: :func:`_rival_of`) on each setting of ``at`` the table has (its ``points``, else its
    cells'), or on every setting ``outside`` those where the subject and a rival ran; judged per seed on the seeds both
    finished (a cell's ``by_seed``: ``{seed: value}``), paired (:func:`_head_to_head_of`). One claim over the settings,
    or with ``per_point`` one per setting; none where no setting of ``at`` (or of ``outside``) is in the table. No
    setting outside where it ran: not tested (``untested``)."""
    s, rows = j.spec, j.rows()
    known = list(j.table.points) or list(rows)
    if "at" in s:
        settings = [p for p in s["at"] if p in known]
    elif not any(p in known for p in s["outside"]):   # the subject's own settings absent: nothing to set it against
        return []
    else:
        settings = [p for p in known if p not in s["outside"] and s["subject"] in rows.get(p, {})
                    and _rival_of(s, rows[p]) is not None]
        if not settings:
            return j.untested(j.names({}, settings="", setting="", point=""))
    groups = [[p] for p in settings] if "per_point" in s else [settings] if settings else []
    out = [c for g in groups for c in _head_to_head_of(j, rows, g)]
    return out[:1] if s.get("per_point") == "first" else out


def _rival_of(spec: dict, row: dict):
    """The rival's key among one setting's cells: ``rival`` where it ran, else the other cell of the highest value (the
    first of equals; NaN left out); None where there is none."""
    if "rival" in spec:
        return spec["rival"] if spec["rival"] in row else None
    others = [k for k in row if k != spec["subject"] and not math.isnan(row[k]["value"])]
    return max(others, key=lambda k: row[k]["value"]) if others else None


def _head_to_head_of(j: _Judge, rows: dict, settings: list) -> list[Claim]:
    """One ``head_to_head`` claim over ``settings``: its templates may name ``settings`` (joined), ``rivals`` (``on dir:
    FedProto, on pat: FedAvg``), and per setting (``evidence``, joined by ``join``, and ``label``) ``setting``,
    ``point`` (its label), ``subject``, ``rival``, ``subject_mean`` and ``rival_mean`` (over the seeds both finished).
    The subject or its rival not run on one of them: not tested (``untested``, named by that setting); a pair with no
    seed in common: not tested, saying so."""
    s, pairs, named = j.spec, [], ", ".join(map(str, settings))
    for p in settings:
        row, rival = rows.get(p, {}), _rival_of(s, rows.get(p, {}))
        if s["subject"] not in row or rival is None:
            return j.untested(j.names({}, settings=named, setting=p, point=j.point(p)))
        pairs.append((p, row[s["subject"]], row[rival]))
    common = [sorted(set(a["by_seed"]) & set(b["by_seed"])) for _, a, b in pairs]
    read = {(p, k): row for p, a, b in pairs for k, row in ((s["subject"], a), ("rival", b))}
    ns = j.names({}, read, seeds=min(map(len, common)), settings=named, setting=settings[0],
                 point=j.point(settings[0]), rivals=", ".join(f"on {p}: {b['label']}" for p, _, b in pairs))
    for (p, a, b), seeds in zip(pairs, common, strict=True):
        if not seeds:
            return [untested(j.fmt("claim", ns), s["source"], f"{a['label']} and {b['label']} share no finished seed "
                             f"on {p}")]
    holds, tests, lines = True, [], []
    for (p, a, b), seeds in zip(pairs, common, strict=True):
        va, vb = [a["by_seed"][k] for k in seeds], [b["by_seed"][k] for k in seeds]
        pns = {**ns, "setting": p, "point": j.point(p), "subject": a, "rival": b, "subject_mean": np.mean(va),
               "rival_mean": np.mean(vb)}
        label = j.fmt("label", {**pns, "a": a["label"], "b": b["label"]}, s.get("label", "{a} - {b}"))
        tests.append(compare(label, va, vb, True, a.get("trend"), b.get("trend")))
        lines.append(j.fmt("evidence", pns))
        holds = holds and np.mean(va) > np.mean(vb)
    return [j.claim(ns, holds, tests, s.get("join", "; ").join(lines))]


def _leads(j: _Judge) -> list | None:
    """``leads``: the subject's value ahead at every point of a table of ``(point, key)`` cells (a table of cells: one
    point), highest or, with ``direction: lowest``, lowest (``times``: that many times above or below; ``strict``),
    against the other cell ahead there, per seed (:func:`_lead_of`). A point is judged where the subject and another
    cell are and some cell there ``reached`` (a cell field, default true); none judged: not tested (holds None). The
    templates may name ``subject``, ``rival``, ``leader`` (ahead of all), ``behind`` (``behind_note`` where the subject
    is not the leader) and ``point`` per point (``line``: each point's line, joined by ``join`` as ``{lines}``), and
    ``bound`` (``lower_bound`` where a compared cell is ``censored``: counted at a cap). No claim where the subject is
    in no point; the verdict counts the seeds the comparisons hold (else the table's)."""
    s, cells = j.spec, j.table.cells
    flat = not all(isinstance(k, tuple) and len(k) == 2 for k in cells)
    rows = {None: cells} if flat else j.rows()
    if not any(s["subject"] in row for row in rows.values()):
        return []
    holds, tests, lines, censored, last = None, [], [], False, {}
    for p, row in rows.items():
        ns = j.names(row, point="" if flat else j.point(p), subject=row.get(s["subject"], _NO_CELL), rival=_NO_CELL)
        got = _lead_of(j, row, ns)
        if got is not None:
            ahead, test = got
            holds, last = (holds is not False) and ahead, {"subject": ns["subject"], "rival": ns["rival"]}
            tests.append(test)
            censored = censored or any(c.get("censored") for c in (ns["subject"], ns["rival"]))
        leader = (min if s.get("direction") == "lowest" else max)(row, key=lambda k: row[k]["value"])
        ns.update(leader=row[leader], behind="" if leader == s["subject"] else j.fmt("behind_note", ns, s.get(
            "behind_note", "")))
        lines.append(j.fmt("line", ns) if "line" in s else "")
    seeds = min((t.n for t in tests if t is not None), default=j.seeds(cells))
    names = {"subject": _NO_CELL, "rival": _NO_CELL, **last, "lines": s.get("join", "; ").join(lines),
             "bound": j.fmt("lower_bound", dict(j.table.text)) if censored and "lower_bound" in s else ""}
    return [j.claim(j.names(cells, seeds=seeds, **names), holds, tests)]


def _lead_of(j: _Judge, row: dict, ns: dict) -> tuple | None:
    """One point of :func:`_leads`: ``(ahead, comparison)`` of the subject against the other cell ahead there (the
    first of equals), or None where the point is not judged; sets ``ns``'s ``rival``. The comparison is the leading
    side - the other, per seed (None without per-seed values), paired where both hold as many seeds and share a finite
    one, labelled by ``label`` (default ``{a} - {b}``)."""
    s, subj = j.spec, j.spec["subject"]
    others = [k for k in row if k != subj]
    if subj not in row or not others or not any(c.get("reached", True) for c in row.values()):
        return None
    low, times = s.get("direction") == "lowest", s.get("times", 1)
    a, b = row[subj], row[(min if low else max)(others, key=lambda k: row[k]["value"])]
    ns["rival"] = b
    sv, rv = a["value"], b["value"]
    if low:
        ahead = sv < rv / times if s.get("strict", True) else sv <= rv / times
        a, b = b, a
    else:
        ahead = sv > rv * times if s.get("strict", True) else sv >= rv * times
    va, vb = a.get("per_seed"), b.get("per_seed")
    if va is None or vb is None:
        return ahead, None
    paired = len(va) == len(vb) and any(not (math.isnan(x) or math.isnan(y)) for x, y in zip(va, vb, strict=True))
    label = j.fmt("label", {**ns, "a": a["label"], "b": b["label"]}, s.get("label", "{a} - {b}"))
    return ahead, compare(label, va, vb, paired, a.get("trend"), b.get("trend"))


def _above(j: _Judge) -> list | None:
    """``above``: each of ``pairs`` (``[a, b]``: a's value above b's), per seed, one comparison a - b per pair; on the
    table, or with ``per_point`` on each point of a table of ``(point, key)`` cells (one claim per point, ``first``: the
    first); a table or point without every cell the pairs name is not judged (None where none is)."""
    s = j.spec
    keys = list(dict.fromkeys(k for pair in s["pairs"] for k in pair))
    groups = j.rows() if "per_point" in s else {None: j.table.cells}
    out = []
    for p, cells in groups.items():
        if any(k not in cells for k in keys):
            continue
        read = {k: cells[k] for k in keys}
        ns = j.names(cells, read, seeds=j.seeds(read), **({} if p is None else {"point": j.point(p)}))
        tests = [j.versus(cells[a], cells[b], ns) for a, b in s["pairs"]]
        out.append(j.claim(ns, all(cells[a]["value"] > cells[b]["value"] for a, b in s["pairs"]), tests))
        if s.get("per_point") == "first":
            break
    return out or None


def _family(j: _Judge) -> list | None:
    """``family``: every cell of ``members`` above every other cell, judged as the weakest member (``weakest``) against
    the strongest other (``strongest``), per seed; None without a member or another cell."""
    cells, members = j.table.cells, j.spec["members"]
    inside = [k for k in members if k in cells]
    outside = [k for k in cells if k not in members]
    if not inside or not outside:
        return None
    lo = min(inside, key=lambda k: cells[k]["value"])
    hi = max(outside, key=lambda k: cells[k]["value"])
    ns = j.names(cells, weakest=cells[lo], strongest=cells[hi])
    return [j.claim(ns, cells[lo]["value"] > cells[hi]["value"], [j.versus(cells[lo], cells[hi], ns)])]


def _significant(j: _Judge) -> list | None:
    """``significant``: the subject significantly better than every other cell by the paper's test, the exact
    two-sided rank-sum test at :data:`ALPHA` (a cell's ``field``, default ``p``: its p against the subject), each a
    rank-sum comparison subject - cell (unpaired). A design whose smallest p (:func:`smallest_p`) cannot go below ALPHA
    is inconclusive, saying so; one beyond the spread everywhere but not below ALPHA against every cell is inconclusive,
    naming those. Templates may name ``significant`` (how many), ``total``, ``p_low`` and ``p_high``. Fewer than two
    seeds (the table's) or a p missing: not tested (``untested``); no claim without the subject."""
    s, cells = j.spec, j.table.cells
    subj = cells.get(s["subject"])
    if subj is None:
        return []
    others = {k: c for k, c in cells.items() if k != s["subject"]}
    ps = {k: c.get(s.get("field", "p")) for k, c in others.items()}
    n = j.seeds(cells)
    if n < 2 or any(p is None for p in ps.values()):
        return j.untested(j.names(cells))
    sig = [k for k in others if others[k]["value"] < subj["value"] and ps[k] < ALPHA]
    ns = j.names(cells, subject=subj, significant=len(sig), total=len(ps), p_low=min(ps.values()),
                 p_high=max(ps.values()))
    tests = [compare(j.fmt("label", {**ns, "a": subj["label"], "b": c["label"]}, s.get("label", "{a} - {b}")),
                     subj["per_seed"], c["per_seed"], False, subj.get("trend"), c.get("trend"))
             for c in others.values()]
    # the design's floor: the comparison whose seeds (the subject's against that cell's) allow the largest smallest p
    worst = max(((len(subj["per_seed"] or ()) or n, len(c["per_seed"] or ()) or n) for c in others.values()),
                key=lambda ab: smallest_p(*ab))
    floor = smallest_p(*worst)
    if floor >= ALPHA:
        note = "; ".join(x for x in (j.note(ns), f"{worst[0]} vs {worst[1]} runs: the exact two-sided rank-sum test "
                                     "cannot go below "
                                     f"p = {floor:.2f}, so this design cannot show p < {ALPHA:g}") if x)
        return [Claim(j.fmt("claim", ns), s["source"], j.fmt("evidence", ns), INCONCLUSIVE, note, j.table.profile,
                      tuple(tests))]
    got = j.claim(ns, len(sig) == len(ps), tests)
    if got.verdict == SUPPORTED and len(sig) < len(ps):   # beyond the spread, but not below ALPHA everywhere
        got = dataclasses.replace(got, verdict=INCONCLUSIVE, note=f"{got.note}; but exact p >= {ALPHA:g} against "
                                  + ", ".join(c["label"] for k, c in others.items() if k not in sig))
    return [got]


_KINDS = {"best": _best, "sweep_best": _sweep_best, "chain": _chain, "intermediate": _intermediate, "ratio": _ratio,
          "threshold": _threshold, "construction": _construction, "degrades": _degrades,
          "head_to_head": _head_to_head, "leads": _leads, "above": _above, "family": _family,
          "significant": _significant}


def evaluate(book: Book, tables: dict) -> list[Claim]:
    """Every claim of ``book`` (:func:`load_book`) judged on the study's ``tables`` (``{name: Cells or None}``, every
    name a claim reads; None where the study has no such numbers), in the file's order, by :func:`claim`. A claim
    whose table is absent (None, no cells) or too short to judge (its ``require``d cells missing, its subject in no
    cell, too few points) is left out, or, with ``untested`` (``when`` absent and/or short), not tested and why."""
    out = []
    for spec in book.claims:
        if spec["kind"] == "untested":
            out.extend(_standing(book, spec, tables))
            continue
        table = _table_of(book, spec, tables)
        state, got = "absent", None
        if _present(table):
            state = "short"
            if all(k in table.cells for k in spec.get("require", ())):
                got = _KINDS[spec["kind"]](_Judge(book, spec, table))
        if got is not None:
            out.extend(got)
        elif spec.get("untested") and state in spec["untested"].get("when", ("absent", "short")):
            out.append(_untested(_Judge(book, spec, table or Cells({}, ""))))
    return out


def _table_of(book: Book, spec: dict, tables: dict) -> Cells | None:
    if spec["table"] not in tables:
        raise _Judge(book, spec, Cells({}, "")).fail("table", spec["table"],
                                                     "one of the study's tables: " + ", ".join(tables))
    return tables[spec["table"]]


def _present(table: Cells | None) -> bool:
    """A table is present where it has cells, or points (the settings a study ran, none finished: too short)."""
    return table is not None and bool(table.cells or table.points)


def _standing(book: Book, spec: dict, tables: dict) -> list[Claim]:
    """An ``untested`` claim: not tested, and why; with ``table``, only where that table is absent or lacks a
    ``require``d cell (its ``why`` may name the table's text), else nothing."""
    if "table" not in spec:
        return [untested(spec["claim"], spec["source"], spec["why"])]
    table = _table_of(book, spec, tables)
    if _present(table) and all(k in table.cells for k in spec.get("require", ())):
        return []
    j = _Judge(book, spec, table or Cells({}, ""))
    return [untested(spec["claim"], spec["source"], j.fmt("why", dict(j.table.text)))]


def _untested(j: _Judge) -> Claim:
    """The ``untested`` claim of a claim too short to judge: ``why`` may name ``keys`` (the table's keys, sorted) and
    ``points`` (its points' labels, for a table of ``(point, key)`` cells) and the table's ``text``."""
    cells = j.table.cells
    keys = list(cells)
    try:
        keys = sorted(keys)
    except TypeError:
        pass
    points = ", ".join(j.point(p) for p in dict.fromkeys(k[0] for k in keys)) if keys and all(
        isinstance(k, tuple) for k in keys) else ""
    spec = j.spec["untested"]
    return untested(spec.get("claim", j.spec["claim"]), j.spec["source"],
                    j.fmt("untested", {**j.table.text, "keys": keys, "points": points}, spec["why"]))


def ledger(paper: str, tables: dict) -> list[Claim]:
    """``paper``'s claims (``params/<paper>/claims.yaml``) judged on its tables: :func:`evaluate`."""
    return evaluate(load_book(paper), tables)
