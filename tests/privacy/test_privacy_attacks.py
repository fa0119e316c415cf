"""The attack library: feature inversion, gradient inversion, the imprint server, the defence, the table.

Reconstruction thresholds: images live in [0, 1]; PSNR 30 dB is an RMS pixel error of 0.03
(invisible at 8x8), while a uniform random image scores about 8 dB against a fixed image and a
class-mean image 12-15 dB. Every attack test pairs "recovers above 30 dB" with a control (a broken
attack or the wrong target) that stays below 15 dB, so a test fails if the attack stops working.
"""

import math

import numpy as np
import pandas as pd
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from fedlib.algorithms import ALGORITHMS, make_algorithm
from fedlib.algorithms.base import Round
from fedlib.data.federated import ClientData
from fedlib.privacy.active import craft_imprint, recover_imprint
from fedlib.privacy.defense import clip_rows, epsilon, noise_for_epsilon, private_prototypes, private_update
from fedlib.privacy.gradients import client_gradient, dlg, infer_label, invert_gradients, pseudo_gradient
from fedlib.privacy.holds import ATTACKS, holdings_table, kind_of, what_server_holds
from fedlib.privacy.inversion import feature_fn, invert_features, samples_per_prototype, total_variation
from fedlib.privacy.metrics import best_match_reference, label_accuracy, psnr_ssim
from fedlib.privacy.table import attack_upload, leakage_table, references, score
from fedlib.validation import ConfigError
from tests.conftest import make_ctx

MEAN, STD = 0.5, 0.25


class TinyNet(nn.Module):
    """64 pixels -> Linear(64, d) -> activation ("high") -> Linear(d, C): a fedlib-style model."""

    def __init__(self, d=96, num_classes=4, act=nn.Tanh, seed=0):
        super().__init__()
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            self.body = nn.Sequential(nn.Flatten(), nn.Linear(64, d), act())
            self.head = nn.Linear(d, num_classes)

    def forward(self, x):
        h = self.body(x)
        return self.head(h), {"high": h}


def images(n, seed=1):
    """n smooth random 8x8 images in [0, 1], normalised with MEAN/STD."""
    g = torch.Generator().manual_seed(seed)
    x = F.interpolate(torch.rand(n, 1, 4, 4, generator=g), size=(8, 8), mode="bilinear", align_corners=False)
    return (x - MEAN) / STD


def psnr(a, b):
    return psnr_ssim(a, b, MEAN, STD).psnr


# ----------------------------------------------------------------------------- feature inversion

def test_total_variation_by_hand():
    x = torch.tensor([[0.0, 1.0], [0.0, 3.0]]).view(1, 1, 2, 2)
    # horizontal |1-0|, |3-0| -> mean 2; vertical |0-0|, |3-1| -> mean 1
    assert total_variation(x).tolist() == [3.0]


@pytest.mark.slow
def test_feature_inversion_recovers_images_from_their_own_features():
    # Prepare: a white-box extractor (injective: 96 features of 64 pixels) and two private images
    model, x = TinyNet(), images(2)
    with torch.no_grad():
        target = feature_fn(model)(x)
    # Execute
    rec = invert_features(feature_fn(model), target, (1, 8, 8), steps=200, restarts=2, lr=0.1, tv=0.0,
                          mean=MEAN, std=STD)
    broken = invert_features(feature_fn(model), target, (1, 8, 8), steps=1, restarts=2, lr=0.1, tv=0.0,
                             mean=MEAN, std=STD)
    # Assert: the attack recovers the image; one step from the random start does not
    assert (psnr(rec.images, x) > 30).all()
    assert (psnr(broken.images, x) < 15).all()
    assert rec.loss.shape == (2,) and (rec.loss < broken.loss).all()


def test_feature_inversion_is_deterministic_and_checks_its_input():
    model, x = TinyNet(), images(1)
    with torch.no_grad():
        t = feature_fn(model)(x)
    a = invert_features(feature_fn(model), t, (1, 8, 8), steps=3, restarts=2, seed=4)
    b = invert_features(feature_fn(model), t, (1, 8, 8), steps=3, restarts=2, seed=4)
    assert torch.equal(a.images, b.images)
    with pytest.raises(ConfigError, match=r"loss: got 'l1'; allowed: 'l2' or 'cosine'"):
        invert_features(feature_fn(model), t, (1, 8, 8), loss="l1")
    with pytest.raises(ConfigError, match=r"restarts: got 0; allowed: an integer in \[1, inf\)"):
        invert_features(feature_fn(model), t, (1, 8, 8), restarts=0)


# ----------------------------------------------------------------------------- gradient inversion

@pytest.mark.parametrize("label", [0, 1, 2, 3])
def test_idlg_infers_the_label_of_one_image(label):
    model = TinyNet(act=nn.Sigmoid)
    g = client_gradient(model, images(1), torch.tensor([label]))
    assert infer_label(g, "head.weight", "head.bias") == label
    assert infer_label(g, "head.weight") == label  # sigmoid features are positive: the row sums decide


def _one_step(model, x, y, lr):
    """The weights after one SGD step of lr on (x, y), and the exact gradient at the start."""
    g = client_gradient(model, x, y)
    return {n: (p - lr * g[n]).detach() for n, p in model.named_parameters()}, g


@pytest.mark.parametrize("layout", ["w", "meme", "mentee_svd", "ifca", "cam"])
def test_the_update_gradient_reads_every_message_layout(layout):
    # One SGD step of lr 0.5 from w0 gives (w0 - w1) / 0.5 = the exact gradient, whatever the layout of the
    # messages: FedAvg's w., FML's meme., FedKD's SVD factors, IFCA's chosen cluster c<j>., FedCAM's f/g parts.
    from fedlib.privacy.table import logits_layer, update_gradient

    net, x, y = TinyNet(d=6), images(3), torch.tensor([0, 1, 3])
    w0 = {n: p.detach().clone() for n, p in net.named_parameters()}
    w1, g = _one_step(net, x, y, 0.5)
    if layout in ("w", "meme"):
        b, u = {f"{layout}.{n}": v for n, v in w0.items()}, {f"{layout}.{n}": v for n, v in w1.items()}
    elif layout == "mentee_svd":  # weights as exact (full-rank) SVD factors, biases as mentee.
        def msg(w):
            out = {}
            for n, v in w.items():
                if v.dim() == 2:
                    uu, ss, vv = torch.linalg.svd(v, full_matrices=False)
                    out.update({f"svd_u.{n}": uu, f"svd_s.{n}": ss, f"svd_v.{n}": vv})
                else:
                    out[f"mentee.{n}"] = v
            return out
        b, u = msg(w0), msg(w1)
    elif layout == "ifca":  # cluster 1 is the one the client trained; cluster 0 holds other weights
        other = {n: v + 1.0 for n, v in w0.items()}
        b = {**{f"c0.{n}": v for n, v in other.items()}, **{f"c1.{n}": v for n, v in w0.items()}}
        u = {**{f"w.{n}": v for n, v in w1.items()}, "cluster": 1, "num_samples": 3}
    if layout != "cam":
        target = TinyNet(d=6, seed=5)  # other weights: the start must come from the broadcast
        got = update_gradient(target, b, u, 0.5, 1)
        assert sorted(got) == sorted(g)
        for n in g:
            torch.testing.assert_close(got[n], g[n], atol=2e-5, rtol=1e-4)
        for n, p in target.named_parameters():
            torch.testing.assert_close(p.detach(), w0[n], atol=1e-5, rtol=1e-5)
        assert logits_layer(got, 4) == ("head.weight", "head.bias")
        return
    # FedCAM: module = g (frozen global part, sent down as g.) + f (cluster part: down c<j>., up w.)
    cam = nn.ModuleDict({"g": TinyNet(d=6, seed=2), "f": TinyNet(d=6, seed=3)})
    gw = {f"g.{n}": v.detach().clone() for n, v in cam["g"].named_parameters()}
    b = {**gw, **{f"c0.{n}": v for n, v in w0.items()}}
    u = {**{f"w.{n}": v for n, v in w1.items()}, "cluster": 0}
    got = update_gradient(cam, b, u, 0.5, 1)
    assert sorted(got) == sorted(f"f.{n}" for n in g)
    for n in g:
        torch.testing.assert_close(got[f"f.{n}"], g[n], atol=2e-5, rtol=1e-4)
    assert logits_layer(got, 4) == ("f.head.weight", "f.head.bias")


def test_a_personal_head_leaves_no_logits_layer_to_read_the_label_from():
    # FedPer sends the body only: iDLG has no layer with C outputs, and the attack says so in one line
    from fedlib.privacy.table import logits_layer, update_gradient

    net, x, y = TinyNet(d=6), images(1), torch.tensor([2])
    w0 = {n: p.detach().clone() for n, p in net.named_parameters()}
    w1, _ = _one_step(net, x, y, 0.5)
    b = {f"w.{n}": v for n, v in w0.items() if n.startswith("body")}
    u = {f"w.{n}": v for n, v in w1.items() if n.startswith("body")}
    assert logits_layer(update_gradient(net, b, u, 0.5, 1), 4) is None
    with pytest.raises(ConfigError, match="labels: .*no gradient of a layer with 4 outputs"):
        attack_upload("fedper", b, u, net, (1, 8, 8), batch=1, steps=1, restarts=1, lr=0.5, num_classes=4)
    out = attack_upload("fedper", b, u, net, (1, 8, 8), batch=1, labels=y, steps=2, restarts=1, lr=0.5,
                        num_classes=4)
    assert out["gradient_inversion"][0].images.shape == (1, 1, 8, 8)


@pytest.mark.slow
def test_inverting_gradients_recovers_one_image_from_its_exact_gradient():
    # Prepare
    model, x, y = TinyNet(act=nn.Sigmoid), images(2), torch.tensor([2])
    target = client_gradient(model, x[:1], y)
    # Execute: the true gradient, and (control) the gradient of another image
    rec = invert_gradients(model, target, y, (1, 1, 8, 8), steps=150, restarts=1, tv=0.0, mean=MEAN, std=STD)
    other = invert_gradients(model, client_gradient(model, x[1:], y), y, (1, 1, 8, 8), steps=150, restarts=1,
                             tv=0.0, mean=MEAN, std=STD)
    # Assert
    assert psnr(rec.images, x[:1])[0] > 30
    assert psnr(other.images, x[:1])[0] < 15


@pytest.mark.slow
def test_dlg_and_idlg_recover_one_image_with_lbfgs():
    model, x, y = TinyNet(act=nn.Sigmoid), images(1), torch.tensor([1])
    target = client_gradient(model, x, y)
    soft = dlg(model, target, (1, 1, 8, 8), 4, steps=20, mean=MEAN, std=STD)        # DLG: labels optimised
    known = dlg(model, target, (1, 1, 8, 8), 4, labels=y, steps=20, mean=MEAN, std=STD)  # iDLG: label given
    other = dlg(model, client_gradient(model, images(2)[1:], y), (1, 1, 8, 8), 4, labels=y, steps=20,
                mean=MEAN, std=STD)
    assert psnr(soft.images, x)[0] > 30 and psnr(known.images, x)[0] > 30 and known.loss[0] < 1e-6
    assert psnr(other.images, x)[0] < 15


@pytest.mark.slow
def test_pseudo_gradient_of_several_local_steps_is_inverted():
    # Prepare: the client takes 3 SGD steps (lr 0.05) on one image from the broadcast weights
    model, x, y = TinyNet(act=nn.Sigmoid), images(1, seed=3), torch.tensor([3])
    broadcast = {f"w.{k}": v.clone() for k, v in model.state_dict().items()}
    client = TinyNet(act=nn.Sigmoid)
    client.load_state_dict(model.state_dict())
    opt = torch.optim.SGD(client.parameters(), lr=0.05)
    for _ in range(3):
        opt.zero_grad()
        F.cross_entropy(client(x)[0], y).backward()
        opt.step()
    upload = {**{f"w.{k}": v.clone() for k, v in client.state_dict().items()}, "num_samples": 1}
    # Execute
    g = pseudo_gradient(broadcast, upload, lr=0.05, local_steps=3)
    label = infer_label(g, "head.weight", "head.bias")
    rec = invert_gradients(model, g, torch.tensor([label]), (1, 1, 8, 8), steps=150, restarts=1, tv=0.0,
                           mean=MEAN, std=STD)
    # Assert: keys without the prefix, the mean step gradient close to the first one, the image back
    assert set(g) == {"body.1.weight", "body.1.bias", "head.weight", "head.bias"}
    exact = client_gradient(model, x, y)
    assert F.cosine_similarity(g["body.1.weight"].flatten(), exact["body.1.weight"].flatten(), dim=0) > 0.95
    assert label == 3
    assert psnr(rec.images, x)[0] > 30
    with pytest.raises(ConfigError, match=r"local_steps: got 0"):
        pseudo_gradient(broadcast, upload, lr=0.05, local_steps=0)


# ----------------------------------------------------------------------------- active server

@pytest.mark.slow
def test_imprint_broadcast_reveals_every_image_of_a_fedavg_update():
    # Prepare: FedAvg on an MLP; the server crafts the broadcast from auxiliary images
    ctx = make_ctx(model="mlp_mnist", lr=0.05, momentum=0.0, batch_size=16)
    algo = make_algorithm({"name": "fedavg"})
    client = algo.init_client(ctx, 0)
    honest = algo.broadcast(ctx, algo.init_server(ctx), 0, Round(1, 1, 0))
    weights = {k[2:]: v for k, v in honest.items()}
    crafted = {f"w.{k}": v for k, v in craft_imprint(weights, images(256, seed=7)).items()}
    x, y = images(16, seed=8), torch.arange(16) % 4
    data = ClientData(0, x, y, torch.arange(4))
    # Execute: one local step (16 images, batch 16) from each broadcast; the server reads the update
    recovered = {}
    for name, msg in (("crafted", crafted), ("honest", honest)):
        _, upload, _ = algo.local_update(ctx, 0, client, msg, data, Round(1, 1, 0))
        update = {k[2:]: msg[k] - upload[k] for k in msg}
        recovered[name] = recover_imprint(update, (1, 8, 8))
    # Assert: most private images are matched exactly by a recovered one (two images sharing one of the
    # 512 bins come back mixed), against none with the honest model, whose rows each see about half the
    # batch: its ratios are mixtures, near the batch mean (about 18 dB here)
    def best(rec):
        return torch.tensor([max(psnr(rec, xi.expand_as(rec))) for xi in x.unsqueeze(1)])

    crafted, honest = best(recovered["crafted"]), best(recovered["honest"])
    assert (crafted > 40).sum() >= 12
    assert honest.max() < 25
    with pytest.raises(ConfigError, match="layer: got 'fc'"):
        craft_imprint(weights, images(4), first="fc")


# ----------------------------------------------------------------------------- samples per prototype

def identity_attack(stats):
    return stats.view(-1, 1, 8, 8)


def test_samples_per_prototype_curve_falls_with_the_group_size():
    # Toy: the feature is the image itself and the attack inverts it exactly, so a mean over n
    # images is recovered exactly and differs from each member by (n - 1) / n of its spread.
    x, y = images(64, seed=5), torch.arange(64) % 2
    flat = lambda z: z.flatten(1)  # noqa: E731
    mean = samples_per_prototype(identity_attack, flat, x, y, sizes=(1, 2, 4, 8, 16), groups=6, mean=MEAN, std=STD)
    km = samples_per_prototype(identity_attack, flat, x, y, sizes=(2, 8), groups=6, kind="kmeans",
                               mean=MEAN, std=STD)
    assert mean.n.tolist() == [1, 2, 4, 8, 16]
    assert mean.psnr[0] == math.inf and mean.ssim[0] == pytest.approx(1.0)
    assert (np.diff(mean.psnr[1:]) < 0).all() and (np.diff(mean.ssim) < 0).all()
    # two centroids of two images are the images themselves: averaging protects nothing
    assert km.psnr[0] == math.inf and km.psnr[1] > mean.psnr[3]
    with pytest.raises(ConfigError, match=r"sizes: got 40; allowed: at most 32"):
        samples_per_prototype(identity_attack, flat, x, y, sizes=(40,))


# ----------------------------------------------------------------------------- metrics and references

def test_best_match_and_label_accuracy_by_hand():
    aux = torch.stack([torch.zeros(1, 8, 8), torch.full((1, 8, 8), 0.4)])  # pixels 0.5 and 0.6
    x = torch.full((1, 1, 8, 8), 0.36)                                    # pixel 0.59: nearest is 0.6
    s = best_match_reference(aux, x, MEAN, STD)
    assert s.psnr[0] == pytest.approx(40.0)  # MSE 0.01^2
    head = nn.Linear(64, 2)
    with torch.no_grad():
        head.weight.zero_()
        head.bias.copy_(torch.tensor([0.0, 1.0]))
    clf = nn.Sequential(nn.Flatten(), head)
    assert label_accuracy(clf, aux, torch.tensor([1, 0])) == 0.5


# ----------------------------------------------------------------------------- defence and accountant

@pytest.mark.slow
def test_accountant_matches_opacus_documented_values():
    # Opacus's own accountant test: sigma 1.5, q 0.04, 90 epochs (2,250 steps), delta 1e-5
    assert epsilon(1.5, 2250, 0.04, 1e-5) == pytest.approx(7.32911117143, abs=1e-6)
    # Opacus's search returns the noise whose epsilon is within its tolerance 0.01 below the target
    sigma = noise_for_epsilon(8.0, 2250, 0.04, 1e-5)
    assert 8.0 - 0.01 < epsilon(sigma, 2250, 0.04, 1e-5) <= 8.0
    # No sampling, one release: RDP alpha / (2 sigma^2), Opacus's conversion, minimum over its orders
    alphas = np.array([1 + x / 10.0 for x in range(1, 100)] + list(range(12, 64)), dtype=float)
    rdp = alphas / (2 * 2.0 ** 2)
    hand = np.min(rdp - (np.log(1e-5) + np.log(alphas)) / (alphas - 1) + np.log((alphas - 1) / alphas))
    assert epsilon(2.0, 1, 1.0, 1e-5) == pytest.approx(hand, rel=1e-9)
    assert epsilon(0.0, 10, 0.1, 1e-5) == math.inf
    assert epsilon(4.0, 100, 0.1, 1e-5) < epsilon(2.0, 100, 0.1, 1e-5) < epsilon(2.0, 400, 0.1, 1e-5)
    with pytest.raises(ConfigError, match=r"sample_rate: got 1.5; allowed: a number in \(0, 1\]"):
        epsilon(1.0, 1, 1.5, 1e-5)


def test_private_prototypes_clip_and_noise():
    g = torch.Generator().manual_seed(0)
    feats, labels = torch.randn(8, 5, generator=g), torch.tensor([0, 0, 0, 0, 1, 1, 1, 1])
    clean, counts = private_prototypes(feats, labels, 3, clip=100.0, noise_multiplier=0.0)
    assert torch.allclose(clean[:2], torch.stack([feats[:4].mean(0), feats[4:].mean(0)]))
    assert counts.tolist() == [4, 4, 0] and clean[2].abs().sum() == 0
    assert (clip_rows(feats, 0.5).norm(dim=1) <= 0.5 + 1e-6).all()
    # noise on the mean: std sigma * clip / n = 1 * 2 / 4 = 0.5
    noisy, _ = private_prototypes(torch.zeros(8, 20000), labels, 2, clip=2.0, noise_multiplier=1.0, generator=g)
    assert noisy.std(dim=1).tolist() == pytest.approx([0.5, 0.5], abs=0.01)


def test_private_update_clips_the_whole_update():
    w0 = {"w.a": torch.zeros(3), "w.b": torch.zeros(4), "num_samples": 5}
    up = {"w.a": torch.tensor([3.0, 0, 0]), "w.b": torch.tensor([0, 4.0, 0, 0]), "num_samples": 5}
    out = private_update(w0, up, clip=1.0, noise_multiplier=0.0)
    assert out["num_samples"] == 5
    assert torch.allclose(out["w.a"], torch.tensor([0.6, 0, 0])) and torch.allclose(out["w.b"][1], torch.tensor(0.8))
    assert torch.equal(private_update(w0, up, clip=10.0, noise_multiplier=0.0)["w.a"], up["w.a"])


# ----------------------------------------------------------------------------- what the server holds

@pytest.mark.parametrize("name", sorted(ALGORITHMS))
def test_what_server_holds_is_the_declared_upload(name):
    cls = ALGORITHMS[name]
    view = what_server_holds(name)
    assert view.upload == cls.UPLOAD and view.broadcast == cls.BROADCAST and view.reply == cls.REPLY
    assert set(view.upload_kinds) == set(cls.UPLOAD)
    unknown = [k for k in [*cls.UPLOAD, *cls.BROADCAST, *cls.REPLY] if kind_of(k) == "unknown"]
    assert not unknown, f"{name} sends keys outside fedlib.privacy.holds.KINDS: {unknown}"
    assert set(view.attacks) <= set(ATTACKS)


def test_what_server_holds_by_hand():
    assert what_server_holds("fedavg").attacks == ("gradient_inversion", "imprint", "label_inference")
    assert what_server_holds("fedproto").attacks == ("decoder", "label_inference")
    assert not what_server_holds("fedproto").holds_extractor
    assert what_server_holds("fedpac").attacks[:2] == ("gradient_inversion", "feature_inversion")
    assert what_server_holds("gfpl").upload_kinds == {"means?": "mixture", "vars?": "mixture",
                                                      "weights?": "mixture", "classes?": "labels"}
    assert what_server_holds("lgfedavg").summary() == "head"
    assert what_server_holds("mpfedcl").summary() == "model+prototypes (extractor known)"
    table = holdings_table(["fedavg", "fedmps"])
    assert table.loc["fedmps", "decoder"] and not table.loc["fedmps", "feature_inversion"]
    with pytest.raises(ConfigError, match="method: got 'fedfoo'"):
        what_server_holds("fedfoo")


# ----------------------------------------------------------------------------- the leakage table

@pytest.mark.slow
def test_attack_upload_and_leakage_table_from_what_the_server_holds():
    # Prepare: one image per class; a FedAvg round (one SGD step on image 0) and an MP-FedCL-style
    # upload (the model plus one prototype per class: each prototype is one image's feature)
    model, x, y = TinyNet(act=nn.Sigmoid), images(2, seed=11), torch.tensor([0, 1])
    broadcast = {f"w.{k}": v.clone() for k, v in model.state_dict().items()}
    grads = client_gradient(model, x[:1], y[:1])
    fedavg_up = {**{f"w.{k}": broadcast[f"w.{k}"] - 0.05 * grads[k] for k in grads}, "num_samples": 1}
    with torch.no_grad():
        protos = model(x)[1]["high"]
    proto_up = {**broadcast, "num_samples": 2, "protos": protos, "classes": y}
    # Execute
    a = attack_upload("fedavg", broadcast, fedavg_up, TinyNet(act=nn.Sigmoid), (1, 8, 8), batch=1, lr=0.05,
                      steps=150, restarts=1, mean=MEAN, std=STD)
    b = attack_upload("mpfedcl", broadcast, proto_up, TinyNet(act=nn.Sigmoid), (1, 8, 8), steps=200, restarts=1,
                      mean=MEAN, std=STD)
    rows = [{"method": "fedavg", "attack": "gradient_inversion",
             **score(a["gradient_inversion"][0].images, x[:1], y[:1], None, model, MEAN, STD)},
            {"method": "mpfedcl", "attack": "feature_inversion:protos",
             **score(b["feature_inversion:protos"][0].images, x, y, b["feature_inversion:protos"][1], None, MEAN, STD)}]
    table = leakage_table(pd.DataFrame(rows), references(images(32, seed=12), torch.arange(32) % 2, x, y,
                                                         mean=MEAN, std=STD))
    # Assert: FedAvg gives no feature statistic, MP-FedCL no batch size: one attack each
    assert list(a) == ["gradient_inversion"] and list(b) == ["feature_inversion:protos"]
    assert table.columns.tolist() == ["rank", "method", "holds", "attack", "psnr", "ssim", "label_acc"]
    assert table["rank"].tolist() == [1, 2, 3, 4]
    # both attacks rank above both references (the defaults of 200 steps leave the sigmoid
    # extractor's inversion at about 24 dB; the references stay near 15 dB)
    assert set(table.method[:2]) == {"fedavg", "mpfedcl"} and (table.psnr[:2] > 20).all()
    assert (table.psnr[2:] < 18).all()
    assert table.holds[table.method == "fedavg"].item() == "model (extractor known)"
    assert table.attack[2:].tolist() == ["reference: best auxiliary match", "reference: class average"] or \
        table.attack[2:].tolist() == ["reference: class average", "reference: best auxiliary match"]
    with pytest.raises(ConfigError, match="labels: got None"):
        attack_upload("fedavg", broadcast, fedavg_up, model, (1, 8, 8), batch=2)
