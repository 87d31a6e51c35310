"""Covariate shifts applied once per suite to whole tensors."""
from __future__ import annotations

import torch
from torchvision.transforms.functional import InterpolationMode, rotate


def rotate_images(images: torch.Tensor, degrees: float) -> torch.Tensor:
    """Rotate a batch (N, C, H, W) counter-clockwise by ``degrees`` about the centre, bilinear, zero fill."""
    if degrees % 360 == 0:
        return images.clone()
    return rotate(images, float(degrees), interpolation=InterpolationMode.BILINEAR, fill=0.0)
