"""VDP++: variance-only variational density propagation (the ``vdp`` method's machinery).

* :mod:`bench.vdp.layers` -- moment-propagating layers (Linear, Conv2d, activations, batch /
  layer norm, max / average pooling, dropout, flatten, residual sum, softmax, sigmoid);
* :mod:`bench.vdp.convert` -- :func:`to_vdp` builds the VDP network from a standard one;
* :mod:`bench.vdp.loss` -- the ELBO of eq. 10-12;
* :mod:`bench.vdp.unet` -- the segmentation UNet's padding, pooling, bilinear upsampling and skip
  concatenation, and the multi-label presence pooling of ``unet_presence`` (registered converters);
* :mod:`bench.vdp.memory` -- peak tensor memory of a call (for perf and the experiments).
"""
from bench.vdp.convert import Residual, VDPNetwork, check_mean_path, convert_module, register_converter, to_vdp
from bench.vdp.layers import (VDPActivation, VDPAvgPool2d, VDPBatchNorm, VDPConv2d, VDPDropout, VDPFlatten,
                              VDPIdentity, VDPLayerNorm, VDPLinear, VDPMaxPool2d, VDPModule, VDPResidual,
                              VDPSequential, VDPWeightLayer, sigmoid_moments, softmax_moments)
from bench.vdp.loss import LIKELIHOODS, data_nll, expected_cross_entropy, gaussian_nll, multilabel_nll, vdp_loss
from bench.vdp.unet import VDPPixelRows, VDPPresence, VDPUNetBody, bilinear_moments  # registers the UNet converters

__all__ = ["Residual", "VDPNetwork", "check_mean_path", "convert_module", "register_converter", "to_vdp",
           "VDPActivation", "VDPAvgPool2d", "VDPBatchNorm", "VDPConv2d", "VDPDropout", "VDPFlatten", "VDPIdentity",
           "VDPLayerNorm", "VDPLinear", "VDPMaxPool2d", "VDPModule", "VDPResidual", "VDPSequential",
           "VDPWeightLayer",
           "softmax_moments", "sigmoid_moments", "VDPPixelRows", "VDPPresence", "VDPUNetBody", "bilinear_moments",
           "LIKELIHOODS", "data_nll", "expected_cross_entropy", "gaussian_nll", "multilabel_nll", "vdp_loss"]
