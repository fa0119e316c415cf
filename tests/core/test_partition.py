import numpy as np
import pytest

from fedlib.data.partition import label_partition, make_partition, nway_kshot
from fedlib.validation import ConfigError
from tests.conftest import label_blocks

CIFAR_TR, CIFAR_TE = label_blocks(5000, 10), label_blocks(1000, 10)
FMNIST_TR, FMNIST_TE = label_blocks(6000, 10), label_blocks(1000, 10)


def _assert_disjoint(parts):
    allidx = np.concatenate(parts)
    assert len(np.unique(allidx)) == len(allidx)


def test_nway_kshot_matches_fedmps_cifar_setting():
    # Prepare / Execute: FedMPS Table II, CIFAR-10 row (n=3, k=100, |A_ij|=110, t=15, std=1), seed 1234
    p = nway_kshot(CIFAR_TR, CIFAR_TE, 10, num_clients=20, ways=3, shots=100, stdev=1, block=110,
                   test_shots=15, seed=1234)
    # Assert: the code's n_list for seed 1234 (docs/fedmps.md): 59 class slots, client 0 has 4 classes
    ways = (p.counts > 0).sum(1)
    assert ways.tolist() == [4, 3, 2, 2, 2, 3, 3, 3, 4, 4, 4, 2, 2, 4, 4, 4, 2, 2, 2, 3]
    assert ways.sum() == 59
    for cid in range(20):
        owned = p.counts[cid][p.counts[cid] > 0]
        assert len(set(owned)) == 1 and owned[0] in (100, 101)  # k_i in [k-std+1, k+std]
        assert (p.test_counts[cid] == 15 * (p.counts[cid] > 0)).all()  # t per owned class only
    _assert_disjoint(p.train)
    _assert_disjoint(p.test)
    assert all((t >= len(CIFAR_TR)).all() for t in p.test)  # tests come from the official test split
    assert all((t < len(CIFAR_TR)).all() for t in p.train)


def test_nway_kshot_fashion_std2_ranges_and_hash():
    p = nway_kshot(FMNIST_TR, FMNIST_TE, 10, num_clients=20, ways=3, shots=100, stdev=2, block=110,
                   test_shots=15, seed=1234)
    ways = (p.counts > 0).sum(1)
    assert ways.min() >= 2 and ways.max() <= 5 and ways.sum() == 71  # docs/fedmps.md
    ks = p.counts.max(1)
    assert ks.min() >= 99 and ks.max() <= 102
    again = nway_kshot(FMNIST_TR, FMNIST_TE, 10, num_clients=20, ways=3, shots=100, stdev=2, block=110,
                       test_shots=15, seed=1234)
    other = nway_kshot(FMNIST_TR, FMNIST_TE, 10, num_clients=20, ways=3, shots=100, stdev=2, block=110,
                       test_shots=15, seed=1235)
    assert again.hash == p.hash and other.hash != p.hash
    assert all((a == b).all() for a, b in zip(again.train, p.train, strict=False))


def test_nway_kshot_errors_name_field_value_and_limit():
    with pytest.raises(ConfigError, match=r"partition\.ways: got 11; allowed: an integer in \[1, 10\]"):
        nway_kshot(CIFAR_TR, CIFAR_TE, 10, ways=11)
    with pytest.raises(ConfigError, match=r"partition\.shots: got 300; allowed: at most what the data holds"):
        nway_kshot(CIFAR_TR, CIFAR_TE, 10, num_clients=20, shots=300, stdev=1, block=301)
    with pytest.raises(ConfigError, match=r"partition\.test_shots: got 60"):
        nway_kshot(CIFAR_TR, CIFAR_TE, 10, num_clients=20, test_shots=60)


def test_dirichlet_merge_uses_every_sample_once_and_splits_75_25():
    y_tr, y_te = label_blocks(300, 10), label_blocks(60, 10)
    p = label_partition("dirichlet", y_tr, y_te, 10, num_clients=10, alpha=0.1, seed=1)
    pool = np.concatenate(p.train + p.test)
    assert sorted(pool.tolist()) == list(range(len(y_tr) + len(y_te)))
    sizes = np.array([len(a) + len(b) for a, b in zip(p.train, p.test, strict=False)])
    assert sizes.min() >= p.params["min_size"] == int(min(40, 3600 / 10 / 2))
    for a, b in zip(p.train, p.test, strict=False):
        assert len(a) == int(round(0.75 * (len(a) + len(b))))
    # Dir(0.1) is skewed: most clients hold few classes in bulk
    top = np.sort(p.counts, axis=1)[:, -2:].sum(1) / p.counts.sum(1)
    assert np.median(top) > 0.7


def test_dirichlet_official_split_test_follows_train_classes():
    y_tr, y_te = label_blocks(300, 10), label_blocks(60, 10)
    p = label_partition("dirichlet", y_tr, y_te, 10, num_clients=5, alpha=0.5, seed=3, split="official")
    assert sorted(np.concatenate(p.train).tolist()) == list(range(len(y_tr)))
    _assert_disjoint(p.test)
    assert ((p.test_counts > 0) <= (p.counts > 0)).all()  # no test class the client never trained on
    assert p.test_counts.sum(0).tolist() == [60] * 10


def test_pathological_two_classes_per_client_first_fit():
    y_tr, y_te = label_blocks(100, 10), label_blocks(20, 10)
    p = label_partition("pathological", y_tr, y_te, 10, num_clients=10, classes_per_client=2, balance=True,
                        seed=1, split="official")
    assert ((p.counts > 0).sum(1) == 2).all()
    # PFLlib deals class c to the first ceil(M/C*2)=2 clients still needing classes
    assert np.flatnonzero(p.counts[:, 0]).tolist() == [0, 1]
    assert np.flatnonzero(p.counts[:, 9]).tolist() == [8, 9]
    assert p.counts[0, 0] == 50 and p.counts.sum() == 1000


def test_make_partition_unknown_argument_suggests():
    with pytest.raises(ConfigError, match="did you mean 'ways'"):
        make_partition({"scheme": "nway_kshot", "way": 3}, CIFAR_TR, CIFAR_TE, 10)
    with pytest.raises(ConfigError, match=r"partition\.scheme: got 'shards'"):
        make_partition({"scheme": "shards"}, CIFAR_TR, CIFAR_TE, 10)


def test_nway_kshot_spreads_ways_and_shots_separately():
    # GFPL Table 2: w-bar 4 with w-hat 1, s-bar 100 with s-hat 20
    y_tr, y_te = label_blocks(6000, 10), label_blocks(1000, 10)
    p = nway_kshot(y_tr, y_te, 10, num_clients=20, ways=4, shots=100, stdev=20, ways_stdev=1, block=120,
                   test_shots=40, seed=1)
    ways = (p.counts > 0).sum(1)
    shots = p.counts.max(1)
    assert ways.min() >= 3 and ways.max() <= 5 and len(set(ways.tolist())) > 1
    assert shots.min() >= 81 and shots.max() <= 120 and shots.max() - shots.min() > 10
    assert p.params["ways_stdev"] == 1
    # without ways_stdev the partition (and its hash) is the one stdev gives both
    a = nway_kshot(y_tr, y_te, 10, num_clients=20, ways=4, shots=100, stdev=2, test_shots=40, seed=1)
    b = nway_kshot(y_tr, y_te, 10, num_clients=20, ways=4, shots=100, stdev=2, ways_stdev=2, test_shots=40, seed=1)
    assert "ways_stdev" not in a.params and all(np.array_equal(x, y) for x, y in zip(a.train, b.train, strict=True))
    with pytest.raises(ConfigError, match="partition.ways_stdev"):
        nway_kshot(y_tr, y_te, 10, ways_stdev=-1)


def _dirichlet_every_attempt_builds_lists(labels, num_clients, alpha, min_size, seed):
    """The Dirichlet split as first written: every attempt builds its index lists (the reference for the
    faster version, which builds them for the successful attempt only)."""
    rs = np.random.RandomState(seed)
    N, C = len(labels), int(labels.max()) + 1
    for _ in range(10_000):
        parts = [[] for _ in range(num_clients)]
        for c in range(C):
            idx_c = np.flatnonzero(labels == c)
            rs.shuffle(idx_c)
            p = rs.dirichlet(np.repeat(alpha, num_clients))
            p = np.array([pj * (len(part) < N / num_clients) for pj, part in zip(p, parts, strict=True)])
            p = p / p.sum()
            cuts = (np.cumsum(p) * len(idx_c)).astype(int)[:-1]
            for part, chunk in zip(parts, np.split(idx_c, cuts), strict=True):
                part.extend(chunk.tolist())
        if min(len(p) for p in parts) >= min_size:
            return [np.array(p, dtype=np.int64) for p in parts]


@pytest.mark.parametrize("n, clients, alpha, min_size, seed", [
    (700, 20, 0.1, 10, 1),      # tens of attempts before every client holds 10
    (3000, 20, 0.1, 10, 0), (500, 5, 0.5, 20, 3), (6000, 40, 0.05, 5, 2)])
def test_dirichlet_split_equals_the_reference_draw_for_draw(n, clients, alpha, min_size, seed):
    from fedlib.data.partition import dirichlet_indices

    labels = np.random.default_rng(7).integers(0, 10, n)
    got = dirichlet_indices(labels, clients, alpha, min_size, seed)
    ref = _dirichlet_every_attempt_builds_lists(labels, clients, alpha, min_size, seed)
    assert len(got) == clients and all(np.array_equal(a, b) for a, b in zip(got, ref, strict=True))
    assert sorted(np.concatenate(got).tolist()) == list(range(n))
