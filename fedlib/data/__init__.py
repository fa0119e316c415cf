"""Data: sources (files -> tensors), partitioners (labels + seed -> indices), FederatedData."""

from fedlib.data.federated import ClientData, FederatedData
from fedlib.data.partition import SCHEMES, Partition, make_partition
from fedlib.data.sources import LOADERS, Dataset, DatasetUnavailable, load_dataset
from fedlib.data import domains  # noqa: F401,E402  (registers the feature-skew datasets)

__all__ = ["ClientData", "FederatedData", "Partition", "make_partition", "SCHEMES", "Dataset", "DatasetUnavailable",
           "LOADERS", "load_dataset"]
