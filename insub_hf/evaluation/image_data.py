"""What the harness evaluates on: in-distribution and OOD images in [0, 1] with their labels and the normalisation
the encoder was trained with, checked once when built."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..processing.image_range import check_processor_fields, check_unit_images, normalize_images
from .ood_sets import check_same_geometry
from .probes import check_probe_labels


@dataclass
class ImageEvaluationData:
    """In-distribution and OOD images in [0, 1], with the normalisation the encoder was trained with.

    Attributes:
        train_images: `(N, C, H, W)`; train_labels: `(N,)` (probe training).
        test_images: `(T, C, H, W)`; test_labels: `(T,)`.
        ood_images: name -> `(K, C, H, W)` images of the same geometry.
        mean, std: per-channel normalisation.
        num_classes: C.
    """

    train_images: torch.Tensor
    train_labels: torch.Tensor | None
    test_images: torch.Tensor
    test_labels: torch.Tensor | None
    ood_images: dict[str, torch.Tensor]
    mean: tuple[float, ...]
    std: tuple[float, ...]
    num_classes: int

    def __post_init__(self) -> None:
        # the processor's rules: float images in [0, 1], a finite mean and a positive std per channel
        check_processor_fields(self.test_images.shape[1], self.mean, self.std)
        for name, images in (("train_images", self.train_images), ("test_images", self.test_images),
                             *((f"ood_images[{name!r}]", images) for name, images in self.ood_images.items())):
            check_unit_images(images, f"ImageEvaluationData.{name}")
        check_probe_labels(self.train_labels, self.num_classes, "training")
        check_probe_labels(self.test_labels, self.num_classes, "test")
        for name, images in self.ood_images.items():
            check_same_geometry(name, images, self.test_images)

    def inputs(self, images: torch.Tensor, labels: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
        batch = {"pixel_values": normalize_images(images, self.mean, self.std)}
        return batch if labels is None else {**batch, "labels": labels}
