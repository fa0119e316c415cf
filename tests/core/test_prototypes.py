import torch

from fedlib.prototypes import ProtoAccumulator, aggregate_protos, class_means, nearest_prototype_scores


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
