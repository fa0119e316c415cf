"""FedFA: T. Zhou, J. Zhang, D. H. K. Tsang, "FedFA: Federated Learning with Feature Anchors to Align Features
and Classifiers for Heterogeneous Data", IEEE Transactions on Mobile Computing 23(6):6731-6742 (early access
2023; DOI 10.1109/TMC.2023.3325366, arXiv 2211.09299); a GFPL Table 1 baseline.

Sources: the paper's abstract (feature anchors align the features and calibrate the classifiers of the clients)
and the authors' code; the paper's full text was not available here, so equation numbers are not given.

The round follows the authors' code (github.com/TailinZhou/FedFA: ``fedfa_cl_optimizer`` in
``utils/optimizer.py``, ``AnchorLoss`` in ``utils/AnchorLoss.py``, ``fedfa_anchorloss`` in ``server_se1.py``),
whose equations are written out here:

- server state: the global model and C feature anchors a_1..a_C in the feature space f(x) = the head's input
  (``level``). Initial anchors (``anchor_init: onehot``): C distinct rows of the d x d identity drawn at random
  (normalised Gaussian rows when C > d, as the code falls back); ``gaussian``: normalised Gaussian rows (the
  code's ablation). Every client receives the same anchors and the global model.
- client, per batch B (the run's SGD on the whole model, fresh each round):

      L = CE(g(f(x)), y) + lam * (1/C) sum_{c in B} (1/|B_c|) sum_{i in B_c} ||f(x_i) - a_c||^2      (anchor loss)

  then, with ``calibration: batch``, one classifier-calibration step: the head g alone takes one step of its own
  optimiser (Adam, lr 1e-3, created once per round) on CE(g(a_c), c) over all C anchors, the anchors of every
  class whether or not the client holds it. The anchors used by both terms are the received ones, fixed during
  the round. ``calibration: epoch`` calibrates once after every local epoch (the code's ablation), ``none`` never.
- client anchor update, after every local epoch e: with S_c the sum over the epoch's batches of the batch mean of
  f(x) over class c (features of the forward pass before each step, train mode),

      b_c = S_c / (number of batches of the epoch)         (``anchor_mean: batches``, the code)
      a_c <- m a_c + (1 - m) b_c                           for every class c the epoch saw, m = ``anchor_momentum``,

  starting from the received anchors; the other rows stay the received anchors. ``anchor_mean: class_batches``
  divides by the number of batches that hold class c instead (the plain mean of the batch means; the code's
  divisor shrinks b_c when a class misses batches).
- server: FedAvg of the models and the same weighted average of all C anchor rows (weights n_k / n,
  ``weighted: false``: plain means), as the code aggregates both with ``aggregation``.

Up: ``w.*`` (the trained model), ``num_samples``, ``anchors`` (C, d): the client's anchors, all rows. Down: the
global model ``w.*`` and the global anchors ``anchors`` (C, d). Inference: ``head``, the global model's classifier
on each client's test set (the code tests the global model).

Defaults: ``lam`` 0.1 and ``anchor_momentum`` 0.5 (``lambda_anchor``, ``momentum_anchor`` of the code's
``args_*.py``); calibration after every batch with Adam at torch's default lr 1e-3 (``fedfa_cl_optimizer``; its
commented-out alternative is ``calib_optimizer: sgd`` with ``calib_lr: 0.1``).

Choices and simplifications:
- local optimisation is the run's (GFPL Table 1: SGD lr 0.01, momentum 0.5, batch 4); the code's SGD weight
  decay 1e-3 and its 0.99 per-round learning-rate decay are the run's ``train`` settings here;
- the calibration step runs the head in eval mode: the code's classifier is one Linear layer, while FedProto's
  ``CNNMnist`` head starts with Dropout(0.5), which would drop whole anchors;
- an epoch updates the anchors of the classes its batches held (the code: the client's classes, which coincide
  when no sample is dropped; with ``drop_last`` a class can miss a whole epoch);
- calibration after every step is implemented by calibrating before every step but the first and once after the
  last, so that local training reuses :func:`~fedlib.algorithms.base.sgd_epochs`; the order of updates is the
  code's.

Seen under GFPL's Table 1 protocol (measured, not changed): the calibration is a separable problem (C anchors, C
classes) that Adam keeps solving with steps of about ``calib_lr`` per weight whatever the gradient's size, and every
client pushes the head the same way, so averaging does not cancel it: the head's weights grow by about
``calib_lr`` x (local steps per round) a round. At batch 4 with 100 shots per class (Fashion-MNIST, w-bar 3: about
89 steps a round) the head's weights reached an RMS of 2.85 by round 33 (33 x 89 x 0.001 = 2.9; the extractor's
last layer 0.05), the training loss rose from round 14, and all three seeds diverged (rounds 33, 48, 50). With 18
shots (MNIST-5k, about 15 steps a round) the drift is 6 times slower and no run diverged in 100 rounds. The code's
own settings (batch 64, SGD weight decay 1e-3) take far fewer steps a round. ``calib_optimizer: sgd`` with
``calib_lr`` 0.1 (the code's commented-out alternative) has no constant-size step: the same seed-0 run with it did
not diverge in 50 rounds (head RMS 0.99, accuracy 84.0% at round 50 and rising, against Adam's best 79.4% at round 14).
"""

from __future__ import annotations

import dataclasses

import torch
import torch.nn.functional as F

from fedlib.algorithms.registry import register
from fedlib.algorithms.base import derive_seed, model_message, mean_params, sample_weights, sgd_epochs, weights
from fedlib.algorithms.fedavg import FedAvg
from fedlib.prototypes import class_means
from fedlib.validation import Interval, Options

ANCHOR_INIT = 41  # derive_seed purpose tag of the initial anchors


def initial_anchors(num_classes: int, dim: int, kind: str, seed: int) -> torch.Tensor:
    """(C, d) initial anchors: ``onehot`` = C distinct rows of the identity at random (normalised Gaussian rows
    when C > d), ``gaussian`` = normalised Gaussian rows (FedFA's ``AnchorLoss`` initialisations)."""
    g = torch.Generator().manual_seed(seed)
    if kind == "onehot" and num_classes <= dim:
        return torch.eye(dim)[torch.randperm(dim, generator=g)[:num_classes]]
    return F.normalize(torch.randn(num_classes, dim, generator=g), dim=1)


def anchor_loss(z: torch.Tensor, y: torch.Tensor, anchors: torch.Tensor) -> torch.Tensor:
    """FedFA's anchor loss without its weight: (1/C) sum over the classes c of the batch of the mean over the
    class's samples of ||z_i - a_c||^2 (``AnchorLoss.forward``: each squared distance divided by its class's
    count in the batch, summed, divided by the number of classes C)."""
    counts = torch.bincount(y, minlength=len(anchors)).to(z.dtype)
    d2 = (z - anchors[y]).pow(2).sum(1)
    return (d2 / counts[y]).sum() / len(anchors)


@register
@dataclasses.dataclass(frozen=True)
class FedFA(FedAvg):
    lam: float = 0.1                 # anchor-loss weight (code: lambda_anchor 0.1)
    anchor_momentum: float = 0.5     # m of the local anchor update (code: momentum_anchor 0.5)
    calibration: str = "batch"       # classifier calibration after every "batch" (code), every "epoch", or "none"
    calib_optimizer: str = "adam"    # the calibration step's optimiser (code: Adam); "sgd": plain SGD
    calib_lr: float = 1e-3           # its learning rate (code: Adam's default)
    anchor_mean: str = "batches"     # divisor of the summed batch means: all batches (code) or "class_batches"
    anchor_init: str = "onehot"      # "onehot" rows of the identity (code) or "gaussian" (code's ablation)
    level: str = "high"              # the feature level the anchors live in (the head's input)
    name = "fedfa"
    CONSTRAINTS = {"lam": Interval(0, None), "anchor_momentum": Interval(0, 1),
                   "calibration": Options(("batch", "epoch", "none")), "calib_optimizer": Options(("adam", "sgd")),
                   "calib_lr": Interval(0, None, low_open=True), "anchor_mean": Options(("batches", "class_batches")),
                   "anchor_init": Options(("onehot", "gaussian")), "level": Options(("high", "low"))}
    UPLOAD = {"w.*": "float[...]", "num_samples": "int", "anchors": "float[C, d]"}
    BROADCAST = {"w.*": "float[...]", "anchors": "float[C, d]"}

    # -- server ----------------------------------------------------------------------------------
    def init_server(self, ctx):
        model = ctx.new_model(None)
        anchors = initial_anchors(ctx.num_classes, model.feature_dims[self.level], self.anchor_init,
                                  derive_seed(ctx.seed, ANCHOR_INIT))
        return {"weights": model_message(model), "anchors": anchors.to(ctx.device)}

    def broadcast(self, ctx, server, cid, rnd):
        return {**server["weights"], "anchors": server["anchors"]}

    def aggregate(self, ctx, server, uploads, rnd):
        msgs = list(uploads.values())
        if not msgs:
            return server, {}
        avg = mean_params(msgs, [*server["weights"], "anchors"], sample_weights(msgs, self.weighted))
        anchors = avg.pop("anchors")
        return {**server, "weights": avg, "anchors": anchors}, {}

    # -- client ----------------------------------------------------------------------------------
    def calibration_step(self, model, opt: torch.optim.Optimizer, anchors: torch.Tensor) -> float:
        """One step of ``opt`` (the head's parameters) on CE(head(a_c), c) over all anchors, head in eval mode."""
        model.head.eval()
        loss = F.cross_entropy(model.head(anchors), torch.arange(len(anchors), device=anchors.device))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        model.head.train()
        return float(loss.detach())

    def batch_support(self):
        return ("per-step class means folded into the anchors every epoch, and classifier calibration steps with a "
                "second optimiser between the local steps")

    def local_update(self, ctx, cid, client, msg, data, rnd):
        start = {**client["model"], **{k[2:]: v for k, v in msg.items() if k.startswith("w.")}}  # the global model
        model = self.module(ctx, cid, start)
        anchors = msg["anchors"]
        C = ctx.num_classes
        opt_c = None
        if self.calibration != "none":
            cls = torch.optim.Adam if self.calib_optimizer == "adam" else torch.optim.SGD
            opt_c = cls(model.head.parameters(), lr=self.calib_lr)
        new = anchors.clone()                                # the client's anchors, updated after every epoch
        sums = torch.zeros_like(anchors)                     # this epoch's summed batch class means
        hits = torch.zeros(C, device=anchors.device)         # and the number of batches holding each class
        run = {"epoch": 0, "steps": 0, "batches": 0, "anchor": 0.0, "calib": []}

        def fold():                                          # end of an epoch: the momentum update of the anchors
            nonlocal new
            if run["batches"]:
                div = torch.full_like(hits, run["batches"]) if self.anchor_mean == "batches" else hits.clamp(min=1)
                b = sums / div.unsqueeze(1)
                m = self.anchor_momentum
                new = torch.where((hits > 0).unsqueeze(1), m * new + (1 - m) * b, new)
            sums.zero_()
            hits.zero_()
            run["batches"] = 0

        def loss_fn(xb, yb, epoch):
            if epoch != run["epoch"]:                        # a new epoch starts: close the previous one
                fold()
                run["epoch"] = epoch
                if self.calibration == "epoch":
                    run["calib"].append(self.calibration_step(model, opt_c, anchors))
            if self.calibration == "batch" and run["steps"]:  # after every step (see the module docstring)
                run["calib"].append(self.calibration_step(model, opt_c, anchors))
            run["steps"] += 1
            run["batches"] += 1
            logits, feats = model(xb)
            z = feats[self.level]
            means, counts = class_means(z.detach(), yb, C)
            sums.add_(means)
            hits.add_((counts > 0).to(hits.dtype))
            loss = F.cross_entropy(logits, yb)
            if self.lam > 0:
                a = anchor_loss(z, yb, anchors)
                run["anchor"] += float(a.detach())
                loss = loss + self.lam * a
            return loss

        loss = sgd_epochs(ctx, model, data, rnd.generator(cid), loss_fn, lr=ctx.train.round_lr(rnd))
        fold()
        if opt_c is not None:
            run["calib"].append(self.calibration_step(model, opt_c, anchors))
        up = self.upload(model, data)
        up["anchors"] = new
        metrics = {"train_loss": loss, "anchor_loss": run["anchor"] / max(run["steps"], 1)}
        if run["calib"]:
            metrics.update(calibration_loss=run["calib"][-1], calibration_steps=len(run["calib"]))
        return {"model": weights(model)}, up, metrics
