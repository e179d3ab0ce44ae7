"""PyTorch data loading for packed datasets (implemented in ``packwise.integrations._torch_data``)."""

from .integrations._torch_data import DistributedPackSampler, PackedParquetDataset

__all__ = ["DistributedPackSampler", "PackedParquetDataset"]
