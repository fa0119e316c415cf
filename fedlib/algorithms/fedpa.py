"""FedPA: L. Jiang, X. Wang, X. Yang, J. Shu, H. Lin, X. Yi, "FedPA: Generator-Based Heterogeneous Federated
Prototype Adversarial Learning", IEEE Transactions on Dependable and Secure Computing, 2024
(DOI 10.1109/TDSC.2024.3419211); a GFPL Table 1 baseline.

Sources. The paper's text was not available here, only its abstract (a lightweight server generator produces
features rather than raw data; prototype learning finds hard features adversarially; together they regularise the
whole model). The round below is read from the first author's public code (github.com/threeStoneLei1/FedPA, built
on FedGen's code: ``FLAlgorithms/servers/serverFedPA.py``, ``FLAlgorithms/users/userFedPA.py``,
``FLAlgorithms/trainmodel/generator.py``, ``utils/model_config.py``). The paper's equation numbers are not known;
every term below names the function of that code it comes from.

Notation: f = the model's features at ``level`` (the head's input), g = the model's head, G(y, eps) = the
generator, t = the round (1-based), P_c = the global prototype of class c, s(t; w, w_min) = max(w_min, w decay^(t-1))
(the code's ``exp_lr_scheduler``; a zero w switches the term off).

- client (``UserFedPA.train``), from the global model, every batch (x, y) of the run's local SGD:

      L = CE(g(f(x)), y) + r * alpha_t * CE(g(G(y', eps)), y') + beta_t * MSE(f(x), P_y)

  alpha_t = s(t; ``alpha`` 25, ``alpha_min`` 1e-4), beta_t = s(t; ``beta`` 5, ``beta_min`` 0.15), y' =
  ``gen_batch_size`` labels drawn uniformly from the classes with a global prototype, eps ~ U[0, 1)^noise_dim,
  G frozen in eval mode, r = ``gen_ratio`` (default gen_batch_size / the run's batch size, the code's
  ``gen_ratio``), MSE = ``nn.MSELoss`` (mean over batch and dimensions; :func:`~fedlib.prototypes.proto_regulariser`).
  The two extra terms start once a generator and prototypes exist (round 2; the code's ``glob_iter > 0``).
  Local prototypes: the class means of f over every batch of every local epoch (train mode, before each step).
- server (``FedPA.train_generator``), before averaging: ``server_steps`` (50) Adam steps on G with this round's
  client heads g_u frozen (eval mode), each on ``server_batch_size`` labels y drawn uniformly from the classes some
  uploader holds:

      L_G = alpha_t sum_u mean_i[ w_{u,y_i} CE(g_u(G(y_i, eps_i)), y_i) ]            (fidelity to the client heads)
            - server_beta * MSE(G(y, eps), P_y)                                       (adversarial: away from P)
            + eta * exp(-mean_{i,j: y_i != y_j} |G_i - G_j|_1 ||eps_i - eps_j||^2_2)  (diversity, ``DiversityLoss``)

  with w_{u,c} = (n_{u,c} + o) / sum_v (n_{v,c} + o), o = ``count_offset`` (the code's label counts start at 1),
  the mean over all B^2 pairs with same-label pairs counted as 0, both distances averaged over dimensions, P the
  prototypes of the previous round (the repulsion starts in round 2), ``server_beta`` 0.15, ``eta`` 1. Adam:
  lr ``gen_lr`` x ``gen_lr_decay``^(t-1) (3e-4, 0.98: the MNIST run config and its ``ExponentialLR``), weight
  decay ``gen_weight_decay`` 1e-2, moments kept across rounds (one optimiser for the whole run, as in the code).
- server, then: FedAvg of the models (weights n_u / n), and P_c = the count-weighted mean of the uploaded class-c
  prototypes (FedProto Eq. 6; the code's ``calculate_prototype``), recomputed from this round's uploads.
- generator (``Generator``): [eps, onehot(y)] -> Linear(noise_dim + C, hidden_dim) -> BatchNorm1d -> ReLU ->
  Linear(hidden_dim, d), hidden_dim 256, noise_dim 32 (the code's MNIST configuration; d is the model's).

Up: ``w.*`` (the trained model), ``num_samples``, ``protos`` (k, d), ``classes`` (k,) and ``counts`` (k,) (the
training-set class counts, the code's ``label_info``) for the k classes the client holds. Down: the global model
``w.*``, from round 2 the generator ``g.*`` (its floating-point state: weights and BatchNorm statistics) and the
prototypes ``protos`` (k', d), ``classes`` (k'). Inference: ``head``, the global model's classifier.

Simplifications (each alternative a field where cheap):
- local training is the run's SGD over whole epochs (GFPL Table 1: lr 0.01, momentum 0.5, batch 4); the code takes
  ``local_epochs`` = 20 single batches with plain SGD and a 0.99 per-round lr decay; its early stop of the
  regularisation after 20 batches never acts there and is left out;
- the client draws y' from the classes with a global prototype (the code: every label of the data set, which
  coincide once every class has been uploaded); a sample whose class has no prototype gets no prototype pull and no
  repulsion (the code compares it with a zero row);
- the generator weights w_{u,c} use the uploaded class counts of the training set (the code counts the samples of
  the batches a client drew this round, plus 1);
- ``gen_batch_size`` defaults to the run's batch size, so r = 1 as with the code's defaults (both 32); the code's
  fixed 32 against GFPL's batch of 4 would make r = 8 and put 200 x CE on generated features
  (``gen_batch_size: 32`` restores it);
- the server's batch defaults to the run's batch size (the code's), at least 2 for BatchNorm;
- the server's heads run in eval mode, the client's head on generated features in train mode (the model's mode
  during local training; FedProto's ``CNNMnist`` head has dropout, the code's heads do not);
- ``alpha: 0`` switches the generator off entirely (not trained, not sent); with ``beta: 0`` as well the models
  are FedAvg's bit for bit.
"""

from __future__ import annotations

import copy
import dataclasses

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.func import functional_call

from fedlib.algorithms.registry import register
from fedlib.algorithms.base import (derive_seed, load_model_message, mean_params, model_message, sample_weights,
                                    weights)
from fedlib.algorithms.fedavg import FedAvg
from fedlib.prototypes import ProtoTable, aggregate_protos, proto_regulariser, rows_message
from fedlib.validation import BOOL, Interval, Options

GEN_INIT, SERVER_DRAW, CLIENT_DRAW = 42, 43, 44  # derive_seed purpose tags


class FeatureGenerator(nn.Module):
    """FedPA's (FedGen's) conditional generator of features: [eps, onehot(y)] -> Linear -> BatchNorm1d -> ReLU ->
    Linear(hidden, d)."""

    def __init__(self, num_classes: int, dim: int, hidden_dim: int, noise_dim: int):
        super().__init__()
        self.num_classes, self.noise_dim = num_classes, noise_dim
        self.body = nn.Sequential(nn.Linear(noise_dim + num_classes, hidden_dim), nn.BatchNorm1d(hidden_dim),
                                  nn.ReLU())
        self.out = nn.Linear(hidden_dim, dim)

    def forward(self, y: torch.Tensor, eps: torch.Tensor) -> torch.Tensor:
        return self.out(self.body(torch.cat([eps, F.one_hot(y, self.num_classes).to(eps.dtype)], dim=1)))


def diversity_loss(eps: torch.Tensor, out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """FedPA's ``DiversityLoss`` (``isPA``): exp(-mean_{i,j} D_ij) with D_ij = mean_k |out_ik - out_jk| x
    mean_k (eps_ik - eps_jk)^2 for y_i != y_j and 0 for same-label pairs (the mean runs over all B^2 pairs)."""
    layer = (out.unsqueeze(0) - out.unsqueeze(1)).abs().mean(-1)
    noise = (eps.unsqueeze(0) - eps.unsqueeze(1)).pow(2).mean(-1)
    other = (y.unsqueeze(0) != y.unsqueeze(1)).to(out.dtype)
    return torch.exp(-(noise * layer * other).mean())


def label_weights(counts: torch.Tensor, offset: float) -> torch.Tensor:
    """(U, C) weight of uploader u's head for class c: (n_uc + offset) / sum_v (n_vc + offset) (the code's
    ``get_label_weights``); a column with no weight at all (offset 0, class held by nobody) is 0."""
    w = counts + offset
    return w / w.sum(0, keepdim=True).clamp(min=1e-12)


@register
@dataclasses.dataclass(frozen=True)
class FedPA(FedAvg):
    alpha: float = 25.0              # weight of CE on generated features, client and server (code: init_lr=25)
    alpha_min: float = 1e-4          # its floor (code: exp_lr_scheduler's 1e-4)
    beta: float = 5.0                # client prototype-MSE weight (code: exp_down_lr_scheduler init_lr=5)
    beta_min: float = 0.15           # its floor (code: down_lr=0.15)
    decay: float = 0.98              # per-round decay of alpha and beta (code: decay=0.98)
    server_beta: float = 0.15        # weight of the generator's repulsion from the prototypes (code: ensemble_beta)
    eta: float = 1.0                 # weight of the diversity loss (code: 1)
    gen_batch_size: int | None = None  # generated features per client step; None: the run's batch (code: both 32)
    gen_ratio: float | None = None   # factor on the client's generated-feature loss; None: gen_batch_size / batch
    server_steps: int = 50           # generator steps per round (code: ensemble_epochs 50 // 5 epochs x 5 iters)
    server_batch_size: int | None = None  # labels per generator step; None: the run's batch size (code)
    gen_lr: float = 3e-4             # generator Adam lr (code: MNIST ensemble_lr)
    gen_lr_decay: float = 0.98       # per-round factor on gen_lr (code: ExponentialLR gamma 0.98)
    gen_weight_decay: float = 1e-2   # generator Adam weight decay (code: weight_decay 1e-2)
    hidden_dim: int = 256            # generator hidden width (code: MNIST 256)
    noise_dim: int = 32              # generator noise dimension (code: MNIST 32)
    count_offset: float = 1.0        # added to every class count in the heads' weights (code: counts start at 1)
    weighted: bool = True            # sample-count weights for models and class-count weights for prototypes
    level: str = "high"              # the feature level of prototypes and generated features (the head's input)
    name = "fedpa"
    CONSTRAINTS = {"alpha": Interval(0, None), "alpha_min": Interval(0, None), "beta": Interval(0, None),
                   "beta_min": Interval(0, None), "decay": Interval(0, 1, low_open=True),
                   "server_beta": Interval(0, None), "eta": Interval(0, None),
                   "gen_batch_size": Interval(1, None, integer=True, allow_none=True),
                   "gen_ratio": Interval(0, None, allow_none=True),
                   "server_steps": Interval(0, None, integer=True),
                   "server_batch_size": Interval(2, None, integer=True, allow_none=True),
                   "gen_lr": Interval(0, None, low_open=True), "gen_lr_decay": Interval(0, 1, low_open=True),
                   "gen_weight_decay": Interval(0, None), "hidden_dim": Interval(1, None, integer=True),
                   "noise_dim": Interval(1, None, integer=True), "count_offset": Interval(0, None),
                   "weighted": BOOL, "level": Options(("high", "low"))}
    UPLOAD = {"w.*": "float[...]", "num_samples": "int", "protos": "float[k, d]", "classes": "int[k]",
              "counts": "int[k]"}
    BROADCAST = {"w.*": "float[...]", "g.*": "float[...]", "protos?": "float[k, d]", "classes?": "int[k]"}

    def schedule(self, start: float, floor: float, rnd) -> float:
        """max(floor, start x decay^(t - 1)); 0 when ``start`` is 0 (the term switched off)."""
        return 0.0 if start == 0 else max(floor, start * self.decay ** (rnd.index - 1))

    def generator(self, ctx, dim: int) -> FeatureGenerator:
        """The generator at its seeded initialisation (the run's RNG untouched)."""
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(derive_seed(ctx.seed, GEN_INIT))
            return FeatureGenerator(ctx.num_classes, dim, self.hidden_dim, self.noise_dim).to(ctx.device)

    # -- server ----------------------------------------------------------------------------------
    def init_server(self, ctx):
        C = ctx.num_classes
        return {**super().init_server(ctx), "generator": None, "gen_opt": None,
                "protos": torch.zeros(C, 0, device=ctx.device),
                "present": torch.zeros(C, dtype=torch.bool, device=ctx.device)}

    def broadcast(self, ctx, server, cid, rnd):
        msg = dict(server["weights"])
        if server["generator"] is not None:
            msg.update(model_message(server["generator"], prefix="g."))
        msg.update(rows_message(server["protos"], server["present"]))
        return msg

    def aggregate(self, ctx, server, uploads, rnd):
        msgs = [uploads[c] for c in sorted(uploads)]
        if not msgs:
            return server, {}
        server, metrics = dict(server), {}
        if self.alpha > 0:
            server, metrics = self.train_generator(ctx, server, msgs, rnd)
        server["weights"] = mean_params(msgs, server["weights"], sample_weights(msgs, self.weighted))
        ups = [m for m in msgs if len(m["classes"])]
        if ups:
            server["protos"], server["present"] = aggregate_protos(ups, ctx.num_classes, self.weighted)
        return server, metrics

    def train_generator(self, ctx, server: dict, msgs: list[dict], rnd) -> tuple[dict, dict]:
        """``server_steps`` Adam steps on the generator against this round's client heads (module docstring)."""
        C = ctx.num_classes
        dev = msgs[0]["protos"].device
        counts = torch.zeros(len(msgs), C, device=dev)
        for u, m in enumerate(msgs):
            counts[u, m["classes"]] = m["counts"].to(counts.dtype)
        qualified = torch.nonzero(counts.sum(0) > 0).flatten()
        if not len(qualified) or self.server_steps == 0:
            return server, {}
        w = label_weights(counts, self.count_offset)
        head = ctx.new_model(None).head.to(dev).eval()
        heads = [{k[len("w.head."):]: v for k, v in m.items() if k.startswith("w.head.")} for m in msgs]
        dim = msgs[0]["protos"].shape[1]
        gen = self.generator(ctx, dim)
        if server["generator"] is not None:
            gen.load_state_dict(server["generator"])
        lr = self.gen_lr * self.gen_lr_decay ** (rnd.index - 1)
        opt = torch.optim.Adam(gen.parameters(), lr=lr, weight_decay=self.gen_weight_decay)
        if server["gen_opt"] is not None:
            opt.load_state_dict(server["gen_opt"])
            for group in opt.param_groups:
                group["lr"] = lr
        alpha = self.schedule(self.alpha, self.alpha_min, rnd)
        repel = self.server_beta > 0 and bool(server["present"].any())
        B = self.server_batch_size or max(2, ctx.train.batch_size)
        g = torch.Generator().manual_seed(derive_seed(rnd.seed, SERVER_DRAW, rnd.index))
        gen.train()
        total = {"gen_loss": 0.0, "gen_fidelity": 0.0, "gen_diversity": 0.0, "gen_repulsion": 0.0}
        for _ in range(self.server_steps):
            y = qualified[torch.randint(len(qualified), (B,), generator=g).to(dev)]
            eps = torch.rand(B, self.noise_dim, generator=g).to(dev)
            out = gen(y, eps)
            fid = sum((F.cross_entropy(functional_call(head, p, (out,)), y, reduction="none") * w[u, y]).mean()
                      for u, p in enumerate(heads))
            div = diversity_loss(eps, out, y)
            loss = alpha * fid + self.eta * div
            if repel:
                rep = proto_regulariser(out, y, server["protos"], server["present"])
                loss = loss - self.server_beta * rep
                total["gen_repulsion"] += float(rep.detach())
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            total["gen_loss"] += float(loss.detach())
            total["gen_fidelity"] += float(fid.detach())
            total["gen_diversity"] += float(div.detach())
        metrics = {k: v / self.server_steps for k, v in total.items()}
        return {**server, "generator": weights(gen), "gen_opt": copy.deepcopy(opt.state_dict())}, metrics

    # -- client ----------------------------------------------------------------------------------
    def task(self, ctx, cid, client, msg, data, rnd):
        """From the global model; the prototype pull and the generated features once a generator and prototypes
        exist. Generated features are drawn per local step (from a generator of their own, in step order) and
        scored by the trained head (``head_on``)."""
        task = super().task(ctx, cid, client, msg, data, rnd)
        task.extras, task.collect, task.collect_all_epochs = {}, (self.level,), True
        received = ProtoTable.from_message(msg, ctx.num_classes)
        if received is None:
            return task
        if self.schedule(self.beta, self.beta_min, rnd) > 0:
            task.extras["table"], task.extras["present"] = received.single()
        if self.schedule(self.alpha, self.alpha_min, rnd) > 0 and any(k.startswith("g.") for k in msg):
            d = self.module(ctx, cid, None).feature_dims[self.level]
            gen = self.generator(ctx, d)
            load_model_message(gen, msg, prefix="g.")
            gen.eval()
            n_gen = self.gen_batch_size or ctx.train.batch_size
            ratio = self.gen_ratio if self.gen_ratio is not None else n_gen / ctx.train.batch_size
            task.extras["gen_ratio"] = torch.full((), ratio, dtype=torch.float64, device=data.x.device)
            draw = torch.Generator().manual_seed(derive_seed(rnd.seed, CLIENT_DRAW, rnd.index, cid))
            classes = msg["classes"]

            def draws(k: int) -> dict:
                picks = []
                for _ in range(k):  # per step: the labels, then the noise (the order of the code's loop)
                    picks.append((torch.randint(len(classes), (n_gen,), generator=draw),
                                  torch.rand(n_gen, self.noise_dim, generator=draw)))
                y = classes[torch.cat([i for i, _ in picks]).to(classes.device)]
                with torch.no_grad():
                    fake = gen(y, torch.cat([e for _, e in picks]).to(data.x.device))
                return {"gen_y": y.view(k, n_gen), "gen_fake": fake.view(k, n_gen, -1)}

            task.draws, task.head_on = draws, ("gen_fake",)
        return task

    def batch_loss(self, out, y, epoch, extras, teachers, params, rnd):
        """CE, plus r alpha_t CE of the head on generated features, plus beta_t the pull towards the prototypes;
        the parts in float64 (the means of Python floats the code keeps)."""
        logits, feats = out
        z = feats[self.level]
        loss = F.cross_entropy(logits, y)
        none = torch.zeros((), dtype=torch.float64, device=y.device)
        parts = {"ce": loss.detach().double(), "gen_ce": none, "proto": none}
        if "gen_fake" in extras:
            g_ce = F.cross_entropy(extras["head(gen_fake)"], extras["gen_y"])
            parts["gen_ce"] = g_ce.detach().double()
            loss = loss + (extras["gen_ratio"] * self.schedule(self.alpha, self.alpha_min, rnd)).float() * g_ce
        if "table" in extras:
            p = proto_regulariser(z, y, extras["table"], extras["present"])
            parts["proto"] = p.detach().double()
            loss = loss + self.schedule(self.beta, self.beta_min, rnd) * p
        return loss, parts

    def finish(self, ctx, cid, client, msg, data, rnd, task, model, sums, metrics):
        up = {**self.upload(model, data), **sums[self.level].message(counts=False)}
        up["counts"] = torch.bincount(data.y, minlength=ctx.num_classes)[up["classes"]]  # the training set's counts
        return {"model": weights(model)}, up, metrics
