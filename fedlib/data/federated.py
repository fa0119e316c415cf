"""FederatedData: a dataset and a partition, materialised once as per-client tensors."""

from __future__ import annotations

import dataclasses

import torch

from fedlib.data.partition import Partition
from fedlib.data.sources import Dataset


@dataclasses.dataclass
class ClientData:
    """One client's local data (never visible to the server)."""

    cid: int
    x: torch.Tensor
    y: torch.Tensor
    classes: torch.Tensor  # int64, the classes the client holds

    def __len__(self) -> int:
        return len(self.y)

    def to(self, device: str | torch.device) -> ClientData:
        """Move the tensors to ``device`` (in place; returns self)."""
        self.x, self.y, self.classes = self.x.to(device), self.y.to(device), self.classes.to(device)
        return self


def client_data(dataset: Dataset, partition: Partition, cid: int,
                pool: tuple[torch.Tensor, torch.Tensor] | None = None) -> tuple[ClientData, ClientData]:
    """Client ``cid``'s ``(train, test)`` data: its rows of the pooled train + test split (``pool``: that
    pool, when the caller cuts many clients from one)."""
    x_pool, y_pool = pool or pooled(dataset)
    classes = torch.from_numpy(partition.classes(cid)).long()
    out = []
    for idx in (partition.train[cid], partition.test[cid]):
        i = torch.from_numpy(idx)
        out.append(ClientData(cid, x_pool[i].contiguous(), y_pool[i].contiguous(), classes))
    return out[0], out[1]


def pooled(dataset: Dataset) -> tuple[torch.Tensor, torch.Tensor]:
    """The train and test split as one pool (partitions index into it)."""
    return torch.cat([dataset.x_train, dataset.x_test]), torch.cat([dataset.y_train, dataset.y_test])


class FederatedData:
    """Per-client train and test tensors of ``dataset`` cut by ``partition``."""

    def __init__(self, dataset: Dataset, partition: Partition):
        self.dataset, self.partition = dataset, partition
        pool = pooled(dataset)
        self.train: list[ClientData] = []
        self.test: list[ClientData] = []
        for cid in range(partition.num_clients):
            train, test = client_data(dataset, partition, cid, pool)
            self.train.append(train)
            self.test.append(test)

    def to(self, device: str | torch.device) -> FederatedData:
        """Move every client's tensors to ``device`` (in place; returns self)."""
        for part in (self.train, self.test):
            for d in part:
                d.to(device)
        return self

    @property
    def num_clients(self) -> int:
        return self.partition.num_clients

    @property
    def num_classes(self) -> int:
        return self.dataset.num_classes
