"""Sample-level DP-SGD in local training (fedlib/privacy/dpsgd.py): equal to plain SGD without noise and
clipping, each sample clipped by hand, the noise's scale, hooks gone afterwards, the accountant, the
config's limits, and the imprint server defeated."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch
import torch.nn.functional as F

from fedlib.algorithms import make_algorithm
from fedlib.algorithms.base import Round
from fedlib.config import run_id, validate
from fedlib.data.federated import ClientData
from fedlib.privacy.active import craft_imprint, recover_imprint
from fedlib.privacy.defense import sample_level_epsilon
from fedlib.validation import ConfigError
from tests.conftest import make_ctx
from tests.privacy.test_privacy_attacks import images, psnr


def client_data(n=16, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 1, 8, 8, generator=g)
    return ClientData(0, x, torch.arange(n) % 4, torch.arange(4))


def fedavg_update(ctx, data, msg=None, rnd=None):
    """FedAvg's upload after one local update of client 0 from the server's initial model (or ``msg``)."""
    rnd = Round(1, 1, 0) if rnd is None else rnd
    algo = make_algorithm({"name": "fedavg"})
    msg = msg if msg is not None else algo.broadcast(ctx, algo.init_server(ctx), 0, rnd)
    _, upload, _ = algo.local_update(ctx, 0, algo.init_client(ctx, 0), msg, data, rnd)
    return msg, {k: v for k, v in upload.items() if k.startswith("w.")}


def test_without_noise_and_with_a_clip_no_sample_reaches_it_is_plain_sgd():
    ctx = make_ctx(model="mlp_mnist", batch_size=4, local_epochs=2)
    data = client_data()
    _, plain = fedavg_update(ctx, data)
    _, private = fedavg_update(dataclasses.replace(ctx, dp_sgd=(1e9, 0.0)), data)
    for k in plain:   # the same batches; the mean of per-sample gradients equals the batch gradient
        torch.testing.assert_close(private[k], plain[k], rtol=1e-5, atol=1e-6)


def test_each_sample_gradient_is_clipped_before_the_mean_by_hand():
    # one step on the whole data (batch 16), no momentum: w_1 = w_0 - lr * mean_i g_i * min(1, C / |g_i|)
    ctx = make_ctx(model="mlp_mnist", batch_size=16, momentum=0.0, lr=0.1)
    data, clip = client_data(), 0.05
    msg, private = fedavg_update(dataclasses.replace(ctx, dp_sgd=(clip, 0.0)), data)
    model = ctx.new_model(0)
    model.load_state_dict({k[2:]: v for k, v in msg.items()})
    names = [n for n, _ in model.named_parameters()]
    clipped = []
    for i in range(len(data)):
        logits, _ = model(data.x[i:i + 1])
        grads = torch.autograd.grad(F.cross_entropy(logits, data.y[i:i + 1]), list(model.parameters()))
        norm = torch.sqrt(sum(g.pow(2).sum() for g in grads))
        assert norm > clip   # every sample is clipped here
        clipped.append([g * (clip / norm) for g in grads])
    for j, n in enumerate(names):
        expected = dict(model.named_parameters())[n].detach() - 0.1 * torch.stack([c[j] for c in clipped]).mean(0)
        torch.testing.assert_close(private[f"w.{n}"], expected, rtol=1e-4, atol=1e-6)


def test_the_noise_has_std_lr_sigma_clip_over_the_batch_and_is_reproducible():
    ctx = make_ctx(model="mlp_mnist", batch_size=16, momentum=0.0, lr=0.1)
    data, clip, sigma = client_data(), 0.05, 2.0
    _, clean = fedavg_update(dataclasses.replace(ctx, dp_sgd=(clip, 0.0)), data)
    _, noisy = fedavg_update(dataclasses.replace(ctx, dp_sgd=(clip, sigma)), data)
    _, again = fedavg_update(dataclasses.replace(ctx, dp_sgd=(clip, sigma)), data)
    _, other_round = fedavg_update(dataclasses.replace(ctx, dp_sgd=(clip, sigma)), data, rnd=Round(2, 2, 0))
    diff = torch.cat([(noisy[k] - clean[k]).flatten() for k in clean])
    assert len(diff) > 400_000
    assert float(diff.std()) == pytest.approx(0.1 * sigma * clip / 16, rel=0.01)
    assert all(torch.equal(noisy[k], again[k]) for k in noisy)
    assert not all(torch.equal(noisy[k], other_round[k]) for k in noisy)


def test_the_hooks_are_removed_after_the_local_update():
    ctx = make_ctx(model="mlp_mnist", batch_size=4)
    data = client_data()
    fedavg_update(dataclasses.replace(ctx, dp_sgd=(1.0, 1.0)), data)
    assert ctx.pool   # the scratch module the update trained, shared with ctx
    for model in ctx.pool.values():
        for m in model.modules():
            assert not m._forward_hooks and not m._backward_hooks
        assert all(getattr(p, "grad_sample", None) is None for p in model.parameters())
    # and a plain update afterwards (reusing the scratch modules) is the plain update
    _, first = fedavg_update(ctx, data)
    fresh = make_ctx(model="mlp_mnist", batch_size=4)
    _, second = fedavg_update(fresh, data)
    assert all(torch.equal(first[k], second[k]) for k in first)


def test_dp_sgd_defeats_the_imprint_server():
    # the setting of tests/privacy/test_privacy_attacks.py's imprint test: without DP-SGD most images come back
    # exactly; with each sample's gradient clipped to 1 and noise multiplier 1, none does
    ctx = make_ctx(model="mlp_mnist", lr=0.05, momentum=0.0, batch_size=16)
    algo = make_algorithm({"name": "fedavg"})
    honest = algo.broadcast(ctx, algo.init_server(ctx), 0, Round(1, 1, 0))
    crafted = {f"w.{k}": v for k, v in craft_imprint({k[2:]: v for k, v in honest.items()}, images(256, 7)).items()}
    x = images(16, seed=8)
    data = ClientData(0, x, torch.arange(16) % 4, torch.arange(4))

    def exact_copies(c):
        msg, up = fedavg_update(c, data, msg=crafted)
        rec = recover_imprint({k[2:]: msg[k] - up[k] for k in up}, (1, 8, 8))
        return sum(max(psnr(rec, xi.expand_as(rec))) > 40 for xi in x.unsqueeze(1))

    assert exact_copies(ctx) >= 12
    assert exact_copies(dataclasses.replace(ctx, dp_sgd=(1.0, 1.0))) == 0


def test_sample_level_epsilon_is_opacus_documented_value():
    # Opacus's accountant test: noise 1.5, sample rate 0.04, 2,250 steps, delta 1e-5 -> epsilon 7.3291;
    # here as 90 rounds of 25 steps at batch 10 of 250 samples
    assert sample_level_epsilon(1.5, 250, 10, 25, 90, 1e-5) == pytest.approx(7.3291, abs=1e-3)
    assert math.isinf(sample_level_epsilon(0.0, 250, 10, 25, 90, 1e-5))


def test_a_model_with_batch_normalisation_fails_with_one_line():
    ctx = make_ctx(model="cnn_fmnist", input_shape=(1, 28, 28), batch_size=4)
    data = ClientData(0, torch.randn(8, 1, 28, 28), torch.arange(8) % 4, torch.arange(4))
    with pytest.raises(ConfigError, match="defense.mechanism: got 'dp_sgd'.*CNNFashion has BatchNorm2d"):
        fedavg_update(dataclasses.replace(ctx, dp_sgd=(1.0, 1.0)), data)


BASE = {"dataset": "mnist", "model": "mlp_mnist", "algorithm": {"name": "fedavg"}, "train": {"rounds": 2},
        "partition": {"scheme": "iid", "num_clients": 2}}


def test_a_dp_sgd_block_validates_and_changes_the_run_id():
    plain = validate(BASE)
    cfg = validate({**BASE, "defense": {"mechanism": "dp_sgd", "clip_sample": 1, "noise_multiplier": 0.5}})
    assert cfg["defense"] == {"mechanism": "dp_sgd", "clip_sample": 1.0, "noise_multiplier": 0.5}
    assert cfg["executor"] == "sequential" and run_id(cfg, 0) != run_id(plain, 0)
    upload = {"clip_update": 1, "clip_features": 5, "noise_multiplier": 0.5}
    # the upload defence named explicitly is the same run as the upload defence by default
    assert run_id(validate({**BASE, "defense": {**upload, "mechanism": "upload"}}), 0) == \
        run_id(validate({**BASE, "defense": upload}), 0)


@pytest.mark.parametrize("change, match", [
    ({"algorithm": {"name": "fedprox"}}, "defense.mechanism: got 'dp_sgd'.*fedprox is not one"),
    ({"algorithm": {"name": "fedproto"}}, "fedproto is not one"),
    ({"executor": "batched"}, "executor: got 'batched'.*sequential with defense.mechanism dp_sgd"),
    ({"defense": {"mechanism": "dp_sgd", "clip_sample": 1}}, "defense.noise_multiplier: got None"),
    ({"defense": {"mechanism": "dp_sgd", "clip_sample": 0, "noise_multiplier": 1}}, "defense.clip_sample: got 0"),
    ({"defense": {"mechanism": "dp_sgd", "clip_sample": 1, "noise_multiplier": 1, "clip_update": 1}},
     "defense.clip_update"),
    ({"defense": {"mechanism": "dpsgd", "clip_sample": 1, "noise_multiplier": 1}},
     "defense.mechanism: got 'dpsgd'; allowed: upload .* or dp_sgd"),
])
def test_a_bad_dp_sgd_config_fails_with_one_line(change, match):
    raw = {**BASE, "defense": {"mechanism": "dp_sgd", "clip_sample": 1.0, "noise_multiplier": 1.0}, **change}
    with pytest.raises(ConfigError, match=match):
        validate(raw)
