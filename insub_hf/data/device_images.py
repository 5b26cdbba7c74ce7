"""A training set of plain images kept on the training device: each batch is one gather there, with no loader
workers, no per-sample collation and no host-to-device copy of pixels (`InSubTrainingArguments.data_on_device`)."""

from __future__ import annotations

import torch


class DeviceImages(torch.utils.data.Dataset):
    """Images `(N, C, H, W)` as one tensor on a device: uint8 (0..255) or floats in [0, 1].

    A row is `{"pixel_values": (C, H, W) float32 in [0, 1]}`. The data loader asks for a whole batch at once
    (`__getitems__`, which torch's loader prefers over `__getitem__`): `(B, C, H, W)` float32 gathered on the
    images' device, already a batch, so `collate_device_batch` passes it through. The batch's indices cross to the
    device through pinned memory, without waiting for the device (no host sync per step).
    """

    def __init__(self, images: torch.Tensor):
        if images.dim() != 4:
            raise ValueError(f"DeviceImages takes images of shape (N, C, H, W), got {tuple(images.shape)}.")
        if images.dtype != torch.uint8 and not images.is_floating_point():
            raise ValueError(f"DeviceImages takes uint8 (0..255) or float images in [0, 1], got dtype {images.dtype}.")
        self.images = images

    @classmethod
    def from_rows(cls, dataset, device: torch.device | str) -> "DeviceImages":
        """The `pixel_values` of a map-style training set (e.g. `image_tensor_dataset`) moved to `device`."""
        if isinstance(dataset, cls):
            return dataset.to(device)
        if hasattr(dataset, "column_names") and dataset.format.get("type") != "custom":  # one array, arrow -> numpy
            images = torch.from_numpy(dataset.with_format("numpy")[:]["pixel_values"])
        else:
            images = torch.stack([torch.as_tensor(dataset[i]["pixel_values"]) for i in range(len(dataset))])
        return cls(images.to(device))

    def to(self, device: torch.device | str) -> "DeviceImages":
        return DeviceImages(self.images.to(device))

    @property
    def device(self) -> torch.device:
        return self.images.device

    def __len__(self) -> int:
        return len(self.images)

    def unit(self, images: torch.Tensor) -> torch.Tensor:
        return images.float() / 255 if images.dtype == torch.uint8 else images.float()

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        return {"pixel_values": self.unit(self.images[index])}

    def __getitems__(self, indices: list[int]) -> dict[str, torch.Tensor]:
        index = torch.as_tensor(indices, dtype=torch.long)
        if self.device.type == "cuda":
            index = index.pin_memory()
        return {"pixel_values": self.unit(self.images[index.to(self.device, non_blocking=True)])}


def collate_device_batch(batch):
    """The collator of a `DeviceImages` loader: a batch gathered by `__getitems__` is already one; anything else goes
    through transformers' `default_data_collator`."""
    if isinstance(batch, dict):
        return batch
    from transformers import default_data_collator

    return default_data_collator(batch)
