"""The evidence planner: what would decide each claim the report cannot yet decide, and what it costs.

``python -m fedlib evidence`` (:func:`fedlib.render.evidence_main`) reads every section's claims ledger from the
archive (training nothing: :func:`fedlib.render.ledgers`), lists every claim not tested here with the ledger's reason
(the data, weights or runs that are missing: nothing it can run), and for every inconclusive claim says why it is
open and what would decide it (:func:`plan`):

- a comparison **open** because, under the ``converged`` profile, the side behind is still rising
  (:meth:`fedlib.claims.Comparison.status`): extend that side's runs towards their plateau (:mod:`fedlib.plateau`,
  up to :data:`fedlib.plateau.CAP` rounds);
- a margin **within the seed spread** (or one seed): more seeds for both sides (and, under the ``converged`` profile,
  extending the side behind where it is still rising: more seeds alone would leave the comparison open); with 3 seeds
  the margin is judged against the sample std, which more seeds do not shrink, but 6 paired seeds let the exact
  sign-flip test reach p = 0.031 < 0.05 (:func:`fedlib.claims.smallest_p`), so the plan asks for 6 (3 with one seed;
  twice the seeds a side has where 6 or more still leave the margin within the spread; ``m + 6`` at least where m
  paired differences already go against the margin, :func:`fedlib.claims.seeds_for_test`). Where the side's cells read
  the seeds added after the profile's (:attr:`fedlib.plateau.Group.more`: :func:`fedlib.results.cached` with
  ``more``), the seeds are added to that run group alone (``seeds``: the next seeds after its last,
  :func:`fedlib.plateau.fill`); where they do not, the profile's seeds must grow (:data:`PROFILE_SEEDS`, listed, not
  run);
- a margin within the spread whose side **ahead** is still rising below the cap (``converged`` profile): that side
  is extended, and no seeds are asked yet. The margin is not yet the plateau-against-plateau one the profile
  compares, it can only grow (best-so-far values), and seeds trained to a length the side has not settled at would
  have to be extended after it; nor is such a margin called a near-tie;
- a margin within the spread that is a **near-tie** (:func:`near_tie`: more than :data:`NEAR_TIE_SEEDS` seeds per
  side even at a margin one standard error larger, or sides identical on every seed): named, with the seeds it would
  take, and no seeds asked; beside it only comparisons against the claim keep their actions (a near-tie keeps the
  claim from "supported");
- a claim judged on a short profile only, or on runs the ledger does not name: the profile or command that makes
  its runs.

``--confirm`` lists the decided claims (converged profile) that rest on a plateau with little to spare
(:func:`confirmations`: less than :data:`fedlib.claims.PLATEAU_SLACK` beyond the spread, on a side behind whose
plateau has held for fewer than :data:`fedlib.plateau.STEP` rounds) with the step that would show the plateau hold,
and ``--confirm --run`` takes those steps (:func:`confirm`).

Costs are CPU-hours on this kind of machine, estimated from the archive's own measured median seconds per round
of each run group (one torch thread per run), counting the rounds a run must train: an archived run keeps no
checkpoint, so extending it trains its first rounds again, unless the results folder holds its checkpoint. The
leakage study's attacks on a new seed come on top of its training (:data:`DERIVE_SECONDS`), and ``--run`` makes
and archives them as it keeps the seed (:attr:`fedlib.plateau.Group.derive`).
``--run --budget 3h`` spends the budget on the cheapest extensions and added seeds first (a seeds action that needs
the profile's seeds to grow is listed, not run), in the background if wanted (``nohup nice -n 19 ...``), resumable after
any interruption (each run resumes from its checkpoint, each extension step archives what it finished), and then
prints which verdicts changed. ``--save-plan FILE`` writes the groups a GPU takes (:func:`gpu_groups`), and
``--run --device cuda --plan FILE`` trains them there, each group's seeds stacked (scripts/gpu_evidence.sh).
"""

from __future__ import annotations

import dataclasses
import math
import re
import time
from pathlib import Path

from fedlib import claims as C

#: seeds the plan asks for where a margin is within the seed spread: 6 paired seeds let the exact sign-flip test
#: reach p = 2 / 2**6 = 0.031, below :data:`fedlib.claims.ALPHA`
SEEDS_FOR_TEST = 6
#: seeds the plan asks for where a claim has one seed: enough for a sample std
SEEDS_FOR_SPREAD = 3
#: the kind of :class:`Action` that would take a group past :data:`fedlib.plateau.CAP` (listed, not run)
PAST_CAP = "past the cap"
#: the kind of :class:`Action` whose seeds only a larger profile would read (its cells do not read added seeds:
#: listed, not run)
PROFILE_SEEDS = "profile seeds"
#: seeds per side beyond which a comparison within the spread is a near-tie the plan asks no seeds for
#: (:func:`near_tie`): three to eight times what a study's profile runs
NEAR_TIE_SEEDS = 30
#: what an :class:`Item` whose open comparisons are near-ties needs
NEAR_TIE_NEED = ("nothing this planner would run: a near-tie no affordable number of seeds decides (the claim stays "
                 "inconclusive; on this evidence its sides are as good as tied)")
#: CPU-seconds of what a new seed's cells derive from its trained model on top of its training, where its group
#: names such values (:attr:`fedlib.plateau.Group.derive`: the leakage study's attacks under its paper profile,
#: about 5 h for its 165 runs on 2 cores)
DERIVE_SECONDS = 110.0
#: the kinds ``--run`` does
RUNNABLE = ("extend", "seeds")
#: the kind of :class:`Action` that takes a plateaued side behind one step further to see its plateau hold, where a
#: decided comparison has less than :data:`fedlib.claims.PLATEAU_SLACK` to spare (:func:`confirmations`;
#: ``--confirm``)
CONFIRM = "confirm"
#: what an :class:`Item` of a claim not tested here needs: its "open because" is the ledger's reason
NOT_TESTED_NEED = "what the reason names (outside this planner, which adds rounds or seeds to archived run groups)"


@dataclasses.dataclass(frozen=True)
class Action:
    """One piece of work: ``extend`` a run group to ``rounds`` (at least; on towards its plateau), take a group
    already at the cap and still rising ``past the cap`` (to ``rounds``: beyond the converged profile's stated
    budget, so listed, never run by ``--run``), or give it ``seeds`` seeds in all (``seeds``: the next seeds after
    its last, each to the group's ``rounds``; :data:`PROFILE_SEEDS` where only a larger profile would read them).
    ``cost`` is the CPU-seconds it would take."""

    kind: str
    group: object
    rounds: int
    seeds: int
    cost: float

    @property
    def key(self) -> tuple:
        from fedlib.config import run_id

        return (self.kind, run_id(self.group.cfg, self.group.seeds[0]), self.group.seeds)

    def text(self) -> str:
        g = self.group
        if self.kind == "extend":
            return f"extend {g.label} (seeds {', '.join(map(str, g.seeds))}) towards its plateau, {self.rounds}+ rounds"
        if self.kind == CONFIRM:
            return (f"extend {g.label} (seeds {', '.join(map(str, g.seeds))}) one step, to {self.rounds} rounds, to "
                    "see its plateau hold")
        if self.kind == PAST_CAP:
            return (f"{g.label} is still rising at the {self.rounds // 2}-round cap: only runs past it "
                    f"({self.rounds} rounds, a longer budget than the converged profile's) could decide")
        if self.kind == "seeds":
            return (f"add seeds {', '.join(map(str, self.added))} to {g.label} ({self.seeds} in all, "
                    f"{self.rounds} rounds)")
        return f"{g.label}: {self.seeds} seeds (has {len(g.seeds)}; the profile's seeds would have to grow)"

    @property
    def added(self) -> tuple[int, ...]:
        """The seeds a ``seeds`` action adds: the next ones after the group's last."""
        last = max(self.group.seeds)
        return tuple(range(last + 1, last + 1 + max(0, self.seeds - len(self.group.seeds))))

    @property
    def grown(self):
        """The run group with the added seeds (:func:`fedlib.plateau.fill` trains those it lacks)."""
        return dataclasses.replace(self.group, seeds=(*self.group.seeds, *self.added))


@dataclasses.dataclass
class Item:
    """What would decide one open claim: its ``section`` and number, why it is open, the actions and their cost
    (CPU-seconds, actions shared with other claims counted in each), or ``need`` where no action can be planned."""

    section: str
    number: int
    claim: C.Claim
    why: str
    actions: list
    need: str = ""

    @property
    def cost(self) -> float:
        return sum(a.cost for a in self.actions) if self.actions else math.inf


def seconds_per_round(group) -> float:
    """The median of the group's finished runs' median seconds per round on the group's own placement (results
    folder, else archive: a CPU cost is not estimated from a GPU's record), else on whichever placement holds them;
    NaN where none has finished."""
    import numpy as np

    from fedlib import archive, results
    from fedlib.runner import cached_summary

    def median(summaries):
        vals = [s["seconds_per_round_median"] for s in summaries if s and s.get("seconds_per_round_median")]
        return float(np.median(vals)) if vals else math.nan

    own = median(cached_summary(group.cfg, x) or archive.summary(group.cfg, x) for x in group.seeds)
    return own if not math.isnan(own) else median(results.find(group.cfg, x)[1] for x in group.seeds)


def checkpointed_rounds(cfg: dict, seed: int) -> int:
    """The rounds the results folder's run of ``(cfg, seed)`` can resume from (its checkpoint), 0 where none (and
    while the archive alone is read: the report's plan does not depend on a machine's results folder)."""
    from fedlib import archive, store
    from fedlib.config import run_dir

    if archive.reading_only():
        return 0

    ckpt, _ = store.load_checkpoint(run_dir(cfg, seed))
    return int(ckpt["round"]) if ckpt else 0


def extend_action(trend: C.Trend) -> Action:
    """Extending the side behind: to the next doubling of its rounds (at most the cap), every seed from its
    checkpoint where the results folder has one, else from round 1; a side already at the cap is listed
    :data:`PAST_CAP` (to twice the cap), which ``--run`` does not do."""
    from fedlib import plateau

    g = trend.group
    capped = trend.rounds >= plateau.CAP   # at the cap, still rising: the cap is the profile's stated budget
    target = 2 * plateau.CAP if capped else min(plateau.CAP, max(trend.rounds + plateau.STEP, 2 * trend.rounds))
    rounds = sum(target - checkpointed_rounds(g.cfg, s) for s in g.seeds)
    return Action(PAST_CAP if capped else "extend", g, target, len(g.seeds), rounds * seconds_per_round(g))


def seeds_action(trend: C.Trend, want: int, converged: bool = True) -> Action:
    """More seeds for a side: ``want`` in all, each trained for the rounds its group holds (``converged``; a claim
    judged at a fixed protocol reads its config's own ``train.rounds``, whatever longer record a shared run has);
    ``seeds`` where its cells read added seeds (:attr:`fedlib.plateau.Group.more`), else :data:`PROFILE_SEEDS`."""
    g = trend.group
    rounds = trend.rounds if converged else int(g.cfg["train"]["rounds"])
    each = rounds * seconds_per_round(g) + (DERIVE_SECONDS if g.derive else 0.0)
    return Action("seeds" if g.more else PROFILE_SEEDS, g, rounds, want, max(0, want - len(g.seeds)) * each)


def plan_claim(section: str, number: int, claim: C.Claim) -> Item | None:
    """The :class:`Item` of an inconclusive claim, or of one not tested here (no action: the ledger's reason says
    what is missing, :data:`NOT_TESTED_NEED`); None for a decided one or one by construction."""
    from fedlib import plateau

    if claim.verdict == C.NOT_TESTED:
        return Item(section, number, claim, f"not tested: {claim.note}", [], NOT_TESTED_NEED)
    if claim.verdict != C.INCONCLUSIVE:
        return None
    converged = claim.profile == "converged"
    if claim.profile not in C.DECISIVE_PROFILES:
        return Item(section, number, claim, f"{claim.profile}-profile evidence only", [],
                    "the runs of the paper protocol or the converged profile (the section's long-profile command)")
    if not claim.tests:
        return Item(section, number, claim, "no per-seed comparison", [],
                    "a per-seed comparison in the ledger, or more seeds of runs it does not name")
    actions, whys, unnamed, ties, against = [], [], False, [], []
    for t in claim.tests:
        state = t.status(converged)
        if state in (C.FOR, C.AGAINST):
            continue
        before = len(actions)
        ahead = t.ahead if converged and t.n >= 2 else None
        if ahead is not None and (ahead.group is None or ahead.plateaued or ahead.rounds >= plateau.CAP
                                  or math.isinf(t.seeds_to_separate())):
            ahead = None   # the side ahead has settled (or cannot go on, or is the other side's twin on every seed)
        if t.n < 2:
            state, want = "one seed", SEEDS_FOR_SPREAD
        elif state == C.WITHIN and ahead is None and (tie := near_tie(t)):
            whys.append(f"{t.label}: {tie}")
            ties.append(t)
            continue
        else:
            want = _seeds_wanted(t.n)
            if t.minority and state == C.WITHIN:   # the seeds against the margin raise the (paired) test's floor
                want = max(want, C.seeds_for_test(t.minority))
                state += (f" ({t.minority} of {t.n} {'' if t.paired else 'shared-seed '}paired differences against "
                          f"the margin: the exact test needs {C.seeds_for_test(t.minority)} seeds or more)")
        whys.append(f"{t.label}: {state}")
        if state == C.OPEN:
            if t.behind is None or t.behind.group is None:
                unnamed = True
            else:
                actions.append(extend_action(t.behind))
        else:
            if ahead is not None:
                # the margin is not the converged one yet: the side ahead goes on to its plateau first, and seeds
                # trained to a length it has not settled at would have to be extended after it
                whys[-1] += f", and {ahead.label} (ahead) still rising"
                actions.append(extend_action(ahead))
            else:
                unnamed |= _more_seeds(t, want, converged, actions)
            behind = t.behind if converged else None
            if behind is not None and behind.group is not None and not behind.plateaued:
                # more seeds alone would leave it open: the side behind is still rising (Comparison.status)
                whys[-1] += f", and {behind.label} still rising"
                actions.append(extend_action(behind))
        if t.margin < 0:
            against += actions[before:]
    if ties:   # a near-tie keeps the claim from "supported": only a comparison against it can still decide it
        actions = against
    if not whys:   # every comparison decided, the claim not: it asks for an exact p below ALPHA (``significant``)
        for t in claim.tests:
            if t.p is not None and t.p >= C.ALPHA and t.status(converged) == C.FOR:
                whys.append(f"{t.label}: exact p {C.p_text(t.p)} >= {C.ALPHA:g}")
                unnamed |= _more_seeds(t, _seeds_wanted(t.n), converged, actions)
    unique = list({a.key: a for a in actions}.values())
    need = "" if unique else (NEAR_TIE_NEED if ties else "the ledger does not name the runs of every side" if unnamed
                              else "its sides' run groups have the seeds the plan would ask for already" if whys
                              else claim.note or "nothing this planner can run")
    return Item(section, number, claim, "; ".join(whys) or "see the ledger's note", unique, need)


def confirmations(ledgers: dict[str, list[C.Claim]]) -> list[Item]:
    """The decided claims (converged profile) with a comparison decided on a plateau with little to spare
    (:meth:`fedlib.claims.Comparison.spare` below :data:`fedlib.claims.PLATEAU_SLACK`) whose side behind has held its
    plateau for fewer than :data:`fedlib.plateau.STEP` rounds: each with the step that would show the plateau hold
    (:data:`CONFIRM`), cheapest first. Once the side has been taken a step further the rule judges it again at its
    new length (the plateau may have held, or the curve risen: then the early decision or an extension decides);
    a plateau held a step is not asked for again."""
    from fedlib import plateau

    items = []
    for section, cs in ledgers.items():
        for i, c in enumerate(cs, 1):
            if c.verdict not in (C.SUPPORTED, C.NOT_SUPPORTED) or c.profile != "converged":
                continue
            actions, whys = [], []
            for t in c.tests:
                spare, b = t.spare(), t.behind
                if spare is None or spare >= C.PLATEAU_SLACK or b.group is None or b.rounds >= plateau.CAP or (
                        b.since is not None and b.rounds - b.since >= plateau.STEP):
                    continue
                target = min(plateau.CAP, b.rounds + plateau.STEP)
                rounds = sum(target - min(target, checkpointed_rounds(b.group.cfg, s)) for s in b.group.seeds)
                actions.append(Action(CONFIRM, b.group, target, len(b.group.seeds),
                                      rounds * seconds_per_round(b.group)))
                whys.append(t.spare_text())
            if actions:
                items.append(Item(section, i, c, "; ".join(whys), list({a.key: a for a in actions}.values())))
    return sorted(items, key=lambda it: (it.cost, it.section, it.number))


def confirm(items: list[Item], budget: float, workers: int | None = None, progress: bool = True) -> list:
    """Take the sides of :func:`confirmations` one step further, cheapest first, within ``budget`` seconds of wall
    time (times ``workers``, as :func:`run`), each run archived in place of its shorter record as it is kept
    (:func:`keep`); a step under way at the deadline finishes (interrupted, its runs resume from their checkpoints).
    Returns the run groups taken further."""
    from fedlib import grid, plateau

    deadline = time.time() + budget
    _, actions, _ = within_budget(items, budget * max(1, workers or 1), kinds=(CONFIRM,))
    done = []
    for a in actions:
        if time.time() >= deadline:
            break
        jobs = [(plateau.extended(a.group.cfg, a.rounds), s) for s in a.group.seeds]
        grid.run_many(jobs, workers=workers, progress=progress, desc=f"confirming {a.group.label}: {a.rounds} rounds")
        for cfg, s in jobs:
            keep(cfg, s)
        done.append(a.group)
    return done


def near_tie(t: C.Comparison) -> str:
    """Why a comparison within the seed spread is a near-tie that the plan asks no seeds for (``""`` where it is
    not): its sides are identical on every seed, or even a margin one standard error larger than measured would need
    more than :data:`NEAR_TIE_SEEDS` seeds per side for the exact test
    (:meth:`fedlib.claims.Comparison.seeds_to_separate`)."""
    need = t.seeds_to_separate()
    if math.isinf(need):
        return "identical on every seed: no number of seeds separates them"
    if math.isnan(need) or need <= NEAR_TIE_SEEDS:
        return ""
    return (f"a near-tie ({t.margin:+.2f} against a seed std of {t.spread:.2f}: the exact test would need about "
            f"{need:.0f} seeds per side, more than {NEAR_TIE_SEEDS})")


def _seeds_wanted(n: int) -> int:
    """Seeds a side of a comparison on ``n`` seeds should have: 6, or twice ``n`` from 6 on (the test's p halves
    per seed)."""
    return SEEDS_FOR_TEST if n < SEEDS_FOR_TEST else 2 * n


def _more_seeds(t: C.Comparison, want: int, converged: bool, actions: list) -> bool:
    """Append to ``actions`` the seeds each side of ``t`` needs to have ``want`` (a side that has them already
    asks for none); True where a side's runs are not named."""
    unnamed = False
    for side in (t.a_trend, t.b_trend):
        if side is None or side.group is None:
            unnamed = True
        elif len(side.group.seeds) < want:
            actions.append(seeds_action(side, want, converged))
    return unnamed


def plan(ledgers: dict[str, list[C.Claim]]) -> list[Item]:
    """Every open claim of every section with what would decide it, cheapest first (unplannable ones last)."""
    items = [it for section, cs in ledgers.items() for i, c in enumerate(cs, 1)
             if (it := plan_claim(section, i, c)) is not None]
    return sorted(items, key=lambda it: (it.cost, it.section, it.number))


def counts(ledgers: dict[str, list[C.Claim]]) -> tuple[int, int]:
    """``(decided, testable)``: supported + not supported, and those plus inconclusive, over every section."""
    decided = sum(c.verdict in (C.SUPPORTED, C.NOT_SUPPORTED) for cs in ledgers.values() for c in cs)
    return decided, decided + sum(c.verdict == C.INCONCLUSIVE for cs in ledgers.values() for c in cs)


def within_budget(items: list[Item], seconds: float, kinds=RUNNABLE) -> tuple[list[Item], list[Action], float]:
    """The claims whose actions (only ``kinds``) fit in ``seconds`` taken cheapest first, an action shared by
    several claims paid once; returns them, the actions in order and the seconds they cost."""
    chosen, actions, spent, paid = [], [], 0.0, set()
    for it in items:
        if not it.actions or any(a.kind not in kinds for a in it.actions) or math.isnan(it.cost):
            continue
        new = [a for a in it.actions if a.key not in paid]
        extra = sum(a.cost for a in new)
        if spent + extra > seconds:
            continue
        chosen.append(it)
        actions += new
        paid |= {a.key for a in new}
        spent += extra
    return chosen, actions, spent


def hours(seconds: float) -> str:
    if math.isnan(seconds) or math.isinf(seconds):
        return "—"
    return f"{seconds / 3600:.1f}"


def table(items: list[Item]):
    """The plan as a table a person reads: one row per open claim."""
    import pandas as pd

    rows = [{"section": it.section, "#": it.number, "claim": shorten(it.claim.claim), "open because": it.why,
             "what would decide it": "; ".join(a.text() for a in it.actions) or it.need,
             "CPU-hours": hours(it.cost)} for it in items]
    return pd.DataFrame(rows, columns=["section", "#", "claim", "open because", "what would decide it", "CPU-hours"])


def shorten(text: str, width: int = 90) -> str:
    return text if len(text) <= width else text[:width - 1] + "…"


def summary(ledgers: dict, items: list[Item], budget_hours: float = 10.0) -> str:
    """``claims decided: N of M; the next 10 CPU-hours of extensions and added seeds would settle K more (...)``."""
    decided, testable = counts(ledgers)
    chosen, _, spent = within_budget(items, budget_hours * 3600)
    chosen_ids = {id(it) for it in chosen}
    seeds = sum(1 for it in items if it.actions and id(it) not in chosen_ids
                and any(a.kind == PROFILE_SEEDS for a in it.actions))
    from fedlib import plateau

    capped = sum(1 for it in items if it.actions and any(a.kind == PAST_CAP for a in it.actions))
    ties = sum(1 for it in items if it.need == NEAR_TIE_NEED)
    untested = sum(1 for it in items if it.claim.verdict == C.NOT_TESTED)
    thin = confirmations(ledgers)
    return (f"claims decided: {decided} of {testable} testable; the next {budget_hours:g} CPU-hours of extensions and "
            f"added seeds ({hours(spent)} h planned) would bring {len(chosen)} more to where the rule can decide "
            f"them (a plateau, the cap, or seeds enough for the exact test); {seeds} more need a profile's seeds to "
            "grow (listed with their cost)"
            + (f"; {capped} wait on a curve still rising at the {plateau.CAP}-round cap" if capped else "")
            + (f"; {ties} {'is a near-tie' if ties == 1 else 'are near-ties'} that no affordable number of seeds "
               "would decide" if ties else "")
            + (f"; {untested} {'is' if untested == 1 else 'are'} not tested here (each listed with what is "
               "missing: data, weights or archived runs)" if untested else "")
            + (f"; of the decided, {len(thin)} rest{'s' if len(thin) == 1 else ''} on a plateau held for fewer than "
               f"{plateau.STEP} rounds with less than {C.PLATEAU_SLACK:g} points to spare (one step further would "
               f"show it hold: {hours(sum({a.key: a.cost for it in thin for a in it.actions}.values()))} "
               "CPU-hours, `python -m fedlib evidence --confirm`)"
               if thin else ""))



_BUDGET = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([hms]?)\s*$")


def parse_budget(text: str) -> float:
    """``3h``, ``90m``, ``45s`` or a number of hours -> seconds; a bad value is a one-line error."""
    from fedlib.validation import ConfigError

    m = _BUDGET.match(str(text))
    if not m or float(m.group(1)) <= 0:
        raise ConfigError("--budget", text, "a positive duration such as 3h, 90m or 45s")
    return float(m.group(1)) * {"h": 3600, "": 3600, "m": 60, "s": 1}[m.group(2)]


def gpu_groups(items: list[Item], plan_hours: float = 10.0) -> list:
    """The run groups a GPU extends: those of the next ``plan_hours`` CPU-hours (:func:`within_budget`) from their
    costliest end (what a CPU would take longest to do); :func:`gpu_work` adds the seeds it fills."""
    return gpu_work(items, plan_hours)[0]


def gpu_work(items: list[Item], plan_hours: float = 10.0) -> tuple[list, list[tuple]]:
    """What a GPU takes on of the next ``plan_hours`` CPU-hours (:func:`within_budget`), costliest first: the run
    groups to extend (a group also given seeds with them: :func:`extensions_and_seeds`), and the seeds to add to
    other groups, ``[(the group with its added seeds, the rounds they train to)]`` (:attr:`Action.grown`; on the
    GPU a group's added seeds train as one stacked group). A group whose cells derive values from its trained
    models (the leakage study's attacks) is left to a CPU: they are made where the model is."""
    _, actions, _ = within_budget(items, plan_hours * 3600)
    groups, seeds = extensions_and_seeds(sorted(actions, key=lambda a: -a.cost))
    return groups, [(a.grown, a.rounds) for a in seeds if not a.group.derive]


def run(items: list[Item], budget: float, workers: int | None = None, progress: bool = True,
        device: str | None = None, plan_hours: float = 10.0, groups: list | None = None,
        fills: list | None = None) -> list:
    """Spend ``budget`` seconds of wall time on the work of :func:`within_budget`: first the seeds it adds to run
    groups (:func:`fedlib.plateau.fill`, each run archived as it is kept), then its extensions (each group on
    towards its plateau, stopped at the deadline; every step's finished runs archived). Returns the extended
    groups' final statuses.

    On a CPU the budget (times ``workers``) buys the cheapest extensions first. With ``device="cuda"`` the work is
    :func:`gpu_work`'s (or ``groups`` and ``fills``, a plan saved by :func:`save_plan` on the machine that has the
    ledgers), each group placed on the GPU (:func:`on_device`: its seeds train as one stacked group, runs of their
    own with their own run ids): first the seeds it adds to groups, then the extensions, each trained from round 1
    to the length its CPU record has plus a step, then on to its plateau or the cap; :func:`fedlib.results.find`
    reads such a longer record in place of the CPU one, and :func:`fedlib.results.more_seeds` an added seed made on
    the GPU like one made here."""
    from fedlib import plateau

    deadline = time.time() + budget
    if groups is None and device == "cuda":
        groups, fills = gpu_work(items, plan_hours)
    elif groups is None:
        _, actions, _ = within_budget(items, budget * max(1, workers or 1))
        if not actions and (why := too_small(items, budget, workers)):
            print(why, flush=True)
            return []
        groups, grown = extensions_and_seeds(actions)
        fills = [(a.grown, a.rounds) for a in grown]
    if fills:
        print(f"evidence: adding seeds to {len(fills)} run group{'s' if len(fills) != 1 else ''} "
              f"({', '.join(g.label for g, _ in fills)})", flush=True)
        plateau.fill([g if device is None else on_device(g, device) for g, _ in fills], workers=workers,
                     keep=keep, progress=progress, rounds=[r for _, r in fills])
    if device is not None:
        groups = [on_device(g, device) for g in groups]
    if not groups or time.time() >= deadline:
        return []
    print(f"evidence: extending {len(groups)} run group{'s' if len(groups) != 1 else ''} "
          f"({', '.join(g.label for g in groups)})", flush=True)
    return plateau.run(groups, workers=workers, deadline=deadline, progress=progress, keep=keep)


def too_small(items: list[Item], budget: float, workers: int | None) -> str:
    """Why ``--run`` trains nothing where a claim has work it could run but none fits ``budget`` seconds on
    ``workers`` (the cheapest claim's CPU-hours, what the budget buys, the ``--budget`` that would do); ``""`` where
    no claim has runnable work."""
    costs = [it.cost for it in items if it.actions and all(a.kind in RUNNABLE for a in it.actions)
             and not math.isnan(it.cost)]
    if not costs:
        return ""
    w = max(1, workers or 1)
    need = min(costs)
    return (f"evidence: nothing to run: the cheapest claim chosen needs {hours(need)} CPU-hours, more than --budget "
            f"{budget / 60:.0f}m buys on {w} worker{'s' if w != 1 else ''} ({hours(budget * w)}); give --budget "
            f"{math.ceil(need / w / 60)}m or more")


def extensions_and_seeds(actions: list[Action]) -> tuple[list, list[Action]]:
    """The run groups to extend and the seeds actions to fill first, from ``actions``: a group that is both extended
    and given seeds is extended with its added seeds (:attr:`Action.grown`; :func:`fedlib.plateau.next_jobs` trains
    them to the others' length first, then every seed on), not filled to its present length and left there (its
    shortest seeds would hold its trend at that length, still rising)."""
    seeds = {a.group.label: a for a in actions if a.kind == "seeds"}
    extend = list({a.key: a for a in actions if a.kind == "extend"}.values())
    both = {a.group.label for a in extend if a.group.label in seeds}
    groups = [seeds[a.group.label].grown if a.group.label in both else a.group for a in extend]
    return groups, [a for label, a in seeds.items() if label not in both]


def parse_claim(text: str) -> tuple[str, int]:
    """``fedic:2`` -> ``("fedic", 2)``; anything else is one ConfigError line (checked before the ledgers render)."""
    from fedlib.validation import ConfigError

    name, _, num = str(text).rpartition(":")
    if not name.strip() or not num.isdigit():
        raise ConfigError("--claim", text, "SECTION:N, a word of a section's title and a claim number (fedic:2)")
    return name.strip(), int(num)


def select(items: list[Item], wanted: list[str]) -> list[Item]:
    """The items named by ``SECTION:N`` each (``fedic:2``, ``benchmark:11``, ``mpfedcl:8``: a word of the section's
    title, any case, its hyphens and spaces ignored, and the claim's number there); a name that matches no section,
    several, or no open claim of it is one ConfigError line."""
    from fedlib.validation import ConfigError

    def bare(text: str) -> str:   # MP-FedCL, mp-fedcl and mpfedcl alike
        return re.sub(r"[^0-9a-z]", "", text.lower())

    items = [it for it in items if it.claim.verdict == C.INCONCLUSIVE]   # a claim not tested here has nothing to run
    sections = list(dict.fromkeys(it.section for it in items))
    out = []
    for text in wanted:
        name, num = parse_claim(text)
        key = bare(name)
        hits = [s for s in sections if key and key in bare(s)]
        if len(hits) != 1:
            raise ConfigError("--claim", text, f"a word of one section's title ({'; '.join(sections)}): "
                              + ("several sections match" if hits else "no section with an open claim matches"))
        got = [it for it in items if it.section == hits[0] and it.number == num]
        if not got:
            open_ = ", ".join(str(it.number) for it in items if it.section == hits[0])
            raise ConfigError("--claim", text, f"an open claim of {hits[0]} (open there: {open_})")
        out += got
    return out


def save_plan(path, groups: list, fills: list = ()) -> None:
    """Write ``groups`` to extend (:class:`fedlib.plateau.Group`) and ``fills`` (``(group with its added seeds,
    rounds)``: :func:`gpu_work`) as JSON, for a machine that trains them without rendering the ledgers (the GPU
    machine: scripts/gpu_evidence.sh)."""
    import json

    from fedlib import store

    def row(g, **more):
        return {"label": g.label, "cfg": g.cfg, "seeds": list(g.seeds), "metric": g.metric, "stat": g.stat, **more}

    rows = [row(g) for g in groups] + [row(g, fill_to=int(r)) for g, r in fills]
    store.atomic_write(Path(path), json.dumps(rows, indent=1, sort_keys=True) + "\n")


def load_plan(path) -> list:
    """The groups to extend that :func:`save_plan` wrote; a file that is not such a plan is one ConfigError line."""
    return [g for g, rounds in _plan_rows(path) if rounds is None]


def load_fills(path) -> list[tuple]:
    """The seeds to add that :func:`save_plan` wrote: ``[(group with its added seeds, rounds)]``."""
    return [(g, rounds) for g, rounds in _plan_rows(path) if rounds is not None]


def _plan_rows(path) -> list[tuple]:
    import json

    from fedlib.config import run_id
    from fedlib.plateau import Group
    from fedlib.validation import ConfigError

    from fedlib.report import results_dir

    try:
        rows = json.loads(Path(path).read_text())
        # the results folder is where this machine keeps runs (not part of a run's identity)
        out = [(Group(r["label"], {**r["cfg"], "results_dir": str(results_dir())},
                      tuple(int(x) for x in r["seeds"]), r["metric"], r["stat"], more="fill_to" in r),
                None if r.get("fill_to") is None else int(r["fill_to"])) for r in rows]
        for g, _ in out:
            run_id(g.cfg, g.seeds[0])
    except (OSError, ValueError, KeyError, TypeError, IndexError, AttributeError) as exc:
        raise ConfigError("--plan", str(path), "a plan written by `python -m fedlib evidence --save-plan`",
                          message=f"--plan: {path} is not an evidence plan ({type(exc).__name__}: {exc})") from None
    return out


def on_device(group, device: str):
    """``group`` with its config placed on ``device`` (``cuda``: the batched executor, where the seeds of a config
    train as one stacked group: docs/runs.md, "Several runs in one stacked group"); the label says where."""
    from fedlib.config import REFERENCE_PLACEMENT

    executor = "batched" if device == "cuda" else REFERENCE_PLACEMENT["executor"]
    cfg = {**group.cfg, "device": device, "executor": executor}
    return dataclasses.replace(group, cfg=cfg, label=f"{group.label} [{device}]")


def keep(cfg: dict, seed: int) -> bool:
    """Archive an extended run in place of its shorter record (:func:`fedlib.archive.add`), first checking that its
    first rounds are the archived ones (a run made again from round 1 on this machine; a line says where they
    differ, as on a machine whose kernels round otherwise)."""
    from fedlib import archive, plateau

    base = {**cfg, "train": {**cfg["train"], "extend_to": None}}
    before = archive.rounds(base, seed)
    same = plateau.prefix_agrees(cfg, seed, before)
    if same is False:
        print(f"evidence: {cfg['name']} seed {seed}: its first {len(before)} rounds differ from the archived record's "
              "(made on another kind of machine); the extended record replaces it", flush=True)
    return archive.add(cfg, seed)
