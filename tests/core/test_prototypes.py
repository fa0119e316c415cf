import torch

from fedlib.prototypes import GroupSums, ProtoAccumulator, aggregate_protos, class_means, nearest_prototype_scores


def test_class_means_by_hand():
    f = torch.tensor([[1.0, 0.0], [3.0, 2.0], [0.0, 4.0], [2.0, 2.0], [5.0, 5.0], [1.0, 1.0]])
    y = torch.tensor([0, 0, 2, 2, 2, 0])
    means, counts = class_means(f, y, 3)
    assert counts.tolist() == [3, 0, 3]
    assert torch.allclose(means, torch.tensor([[5 / 3, 1.0], [0.0, 0.0], [7 / 3, 11 / 3]]))


def test_accumulator_message_only_seen_classes():
    acc = ProtoAccumulator(4, 2)
    acc.add(torch.tensor([[1.0, 1.0], [3.0, 1.0]]), torch.tensor([1, 1]))
    acc.add(torch.tensor([[0.0, 2.0]]), torch.tensor([3]))
    m = acc.message()
    assert m["classes"].tolist() == [1, 3] and m["counts"].tolist() == [2, 1]
    assert m["protos"].tolist() == [[2.0, 1.0], [0.0, 2.0]]


def test_aggregate_protos_unweighted_and_weighted_by_hand():
    ups = [
        {"protos": torch.tensor([[1.0, 1.0], [2.0, 2.0]]), "classes": torch.tensor([0, 2]),
         "counts": torch.tensor([1, 3])},
        {"protos": torch.tensor([[3.0, 5.0]]), "classes": torch.tensor([0]), "counts": torch.tensor([3])},
    ]
    p, present = aggregate_protos(ups, 3, weighted=False)
    assert present.tolist() == [True, False, True]
    assert p.tolist() == [[2.0, 3.0], [0.0, 0.0], [2.0, 2.0]]
    p, _ = aggregate_protos(ups, 3, weighted=True)
    assert torch.allclose(p[0], torch.tensor([(1 * 1 + 3 * 3) / 4, (1 * 1 + 3 * 5) / 4]))


def test_nearest_prototype_scores_mask_absent():
    protos = torch.tensor([[0.0, 0.0], [10.0, 0.0], [1.0, 0.0]])
    present = torch.tensor([True, True, False])
    s = nearest_prototype_scores(torch.tensor([[0.9, 0.0], [6.0, 0.0]]), protos, present)
    assert s.argmax(1).tolist() == [0, 1]
    assert torch.isinf(s[:, 2]).all()
    assert torch.allclose(s[0, :2], torch.tensor([-0.81, -(9.1 ** 2)]))


def test_group_sums_give_every_clients_upload_at_once():
    # Prepare: three clients' per-class sums (client 1 saw nothing), the rows they saw in client order
    torch.manual_seed(0)
    G, C, d = 3, 4, 5
    accs = [ProtoAccumulator(C, d) for _ in range(G)]
    for g, labels in ((0, [0, 2, 2]), (2, [3, 1, 1, 1])):
        accs[g].add(torch.randn(len(labels), d), torch.tensor(labels))
    sums, counts = torch.cat([a.sums for a in accs]), torch.cat([a.counts for a in accs])
    cells = torch.nonzero(counts).flatten()
    sizes = [int((a.counts > 0).sum()) for a in accs]
    # Execute
    group = GroupSums(sums, counts, cells, sizes, C)
    ups = group.messages()
    # Assert: the same tensors as each client's own message, and views of the client's sums
    for g, acc in enumerate(accs):
        one = acc.message()
        assert ups[g].keys() == one.keys() and all(torch.equal(ups[g][k], one[k]) for k in one)
        assert torch.equal(group.client(g).message()["protos"], one["protos"])
    assert group.messages(counts=False)[0].keys() == {"protos", "classes"}


def test_group_accuracies_match_client_accuracies_on_padded_test_sets():
    from fedlib.metrics import client_accuracies, group_accuracies

    torch.manual_seed(1)
    C, sizes = 4, [5, 3, 0]
    ys = [torch.randint(0, C, (n,)) for n in sizes]
    scores = [torch.randn(n, C) for n in sizes]
    own = [torch.tensor([0, 1]), torch.tensor([1, 2, 3]), torch.tensor([0])]
    n = max(sizes)
    S = torch.stack([torch.cat([s, torch.zeros(n - len(s), C)]) for s in scores])
    Y = torch.stack([torch.cat([y, torch.full((n - len(y),), -1)]) for y in ys])
    valid = torch.arange(n) < torch.tensor(sizes).unsqueeze(1)
    held = torch.zeros(len(sizes), C, dtype=torch.bool)
    for g, o in enumerate(own):
        held[g, o] = True
    got = group_accuracies({"head": S}, Y, valid, held)
    for g in range(len(sizes)):
        want = client_accuracies({"head": scores[g]}, ys[g], own[g], C)
        for k, v in want.items():
            assert torch.equal(got[k][g], v) or (v.isnan() and got[k][g].isnan()), (k, g)
