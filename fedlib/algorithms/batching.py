"""What the batched executor asks of a method beyond the contract: the executor's capabilities, apart from the hooks
that define a method.

:class:`fedlib.algorithms.contract.Algorithm` is what a method author writes: what a client trains
(``local_update``, or its parts ``task`` / ``batch_loss`` / ``finish``), what it sends (``UPLOAD``, ``BROADCAST``),
how the server combines it (``aggregate``) and how a client predicts (``predict`` / ``scores``). The batched executor
(:class:`fedlib.executors.Batched`) trains the clients of one architecture, and the runs of one stacked group
(:mod:`fedlib.stacked`), as one vmapped loop; what it needs to know of a method is here, in :class:`Batching`, which
``Algorithm`` inherits with defaults that serve every method. A method touches them only to say it cannot be batched
(:meth:`Batching.batch_support`), to finish or score a whole group at once where that is faster
(:meth:`Batching.finish_group`, :meth:`Batching.scores_group`), or to let a stacked group differ in a hyperparameter
(:attr:`Batching.SWEEPABLE`). docs/engine.md, "The batched executor".
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar

from fedlib.counting import phase


@dataclasses.dataclass
class TrainedGroup:
    """Clients of one architecture that the batched executor trained together, as
    :meth:`Batching.finish_group` gets them (client ``cids[g]`` is row g of every stacked tensor).

    ``jobs``: ``{cid: (client state, message, data)}``; ``tasks``: ``{cid: LocalTask}``; ``states``: each
    client's trained ``state_dict`` (views of ``stacked``, ``{name: (G, ...)}``; read only);
    ``sums``: ``{level: GroupSums}`` of the collected levels; ``metrics``: ``{cid: metrics}``.
    """

    cids: list
    jobs: dict
    tasks: dict
    states: dict
    stacked: dict
    sums: dict
    metrics: dict


def contract_default(hook):
    """Mark ``hook`` as the contract's own default (``Algorithm.local_update``: the SGD loop on ``batch_loss``;
    ``Algorithm.scores``: the head), so that :class:`Batching` can tell whether a method replaced it."""
    hook.contract_default = True
    return hook


def replaced(method, name: str) -> bool:
    """Whether ``method``'s class replaced the contract's default ``name`` hook (:func:`contract_default`)."""
    return not getattr(getattr(type(method), name), "contract_default", False)


class Batching:
    """The batched executor's questions to a method, with the answers that serve every method written on the
    contract's defaults."""

    # Fields whose values may differ between the runs of one stacked group (fedlib.stacked: sweep points
    # trained together): each is read by batch_loss only in arithmetic (the batched executor gives each row
    # its own run's value as a tensor) or not at all (the server, task and finish are each run's own).
    # A field read in Python control flow inside batch_loss must not be listed (vmap refuses it).
    SWEEPABLE: ClassVar[tuple[str, ...]] = ()

    def batch_support(self) -> str | None:
        """``None`` when :mod:`fedlib.executors`' batched executor can train this method, else why not."""
        if replaced(self, "local_update"):
            return "it trains with its own loop (several modules or a round-dependent loss)"
        return None

    def finish_group(self, ctx, rnd, group: TrainedGroup) -> dict:
        """``{cid: (client state, upload, metrics)}`` of a group of clients the batched executor trained
        together. Default: ``finish`` per client on a module holding its trained weights; a method
        whose finish needs no module can answer for the group at once (:class:`TrainedGroup`)."""
        out = {}
        for g, cid in enumerate(group.cids):
            client, msg, data = group.jobs[cid]
            with phase("setup"):
                model = self.module(ctx, cid, group.states[cid])
            sums = {lv: acc.client(g) for lv, acc in group.sums.items()}
            out[cid] = self.finish(ctx, cid, client, msg, data, rnd, group.tasks[cid], model, sums, group.metrics[cid])
        return out

    def scores_group(self, ctx, cids: list, clients: list, msgs: list, logits, feats: dict) -> dict | None:
        """``scores`` of G clients at once from their stacked outputs (``logits`` (G, n, C), ``feats``
        ``{level: (G, n, d)}``; test sets padded to n): ``{rule: (G, n, C)}``, or ``None`` where the
        method scores client by client. Default: the head, where ``scores`` is the contract's default."""
        return None if replaced(self, "scores") else {"head": logits}
