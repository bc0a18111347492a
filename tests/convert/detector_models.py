"""Small detectors for the export tests, named as factories (``tests.convert.detector_models:NAME``).

``caching_head`` is Ultralytics' Detect head in miniature: it keeps the shape of its last input and rebuilds its
anchors only when ``self.shape != shape``, which after a run at the tracing batch makes torch.export fix the batch.
``tiny_ssd`` is a whole torchvision SSD (post-processing included) on a backbone small enough to export in seconds.
"""

from __future__ import annotations

from collections import OrderedDict

import torch
from torch import Tensor, nn

SIZE = 64
CLASSES = 3


class _Features(nn.Module):
    """Two feature maps, at strides 8 and 16."""

    def __init__(self, channels: int = 8) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, channels, 3, 4, 1), nn.ReLU(), nn.Conv2d(channels, channels, 3, 2, 1),
                                  nn.ReLU())
        self.down = nn.Sequential(nn.Conv2d(channels, channels, 3, 2, 1), nn.ReLU())
        self.out_channels = [channels, channels]

    def forward(self, x: Tensor) -> OrderedDict[str, Tensor]:
        first = self.stem(x)
        return OrderedDict([("0", first), ("1", self.down(first))])


def _anchors(features: list[Tensor], strides: tuple[int, ...]) -> tuple[Tensor, Tensor]:
    """Cell centres [2, A] and their strides [1, A], as Ultralytics' make_anchors."""
    points, scales = [], []
    for feature, stride in zip(features, strides, strict=True):
        height, width = feature.shape[2:]
        y, x = torch.meshgrid(torch.arange(height) + 0.5, torch.arange(width) + 0.5, indexing="ij")
        points.append(torch.stack([x.flatten(), y.flatten()]))
        scales.append(torch.full((1, height * width), float(stride)))
    return torch.cat(points, 1), torch.cat(scales, 1)


class CachingHead(nn.Module):
    """A YOLOv8-style detector whose head caches its anchors by input shape; output [N, 4 + C, A]."""

    input_shape = (1, 3, SIZE, SIZE)
    strides = (8, 16)

    def __init__(self) -> None:
        super().__init__()
        self.features = _Features()
        self.box = nn.ModuleList(nn.Conv2d(8, 4, 1) for _ in self.strides)
        self.cls = nn.ModuleList(nn.Conv2d(8, CLASSES, 1) for _ in self.strides)
        self.shape: torch.Size | None = None
        self.anchors = self.scale = torch.empty(0)

    def forward(self, x: Tensor) -> Tensor:
        features = list(self.features(x).values())
        batch = features[0].shape[0]
        boxes = torch.cat([head(f).view(batch, 4, -1) for head, f in zip(self.box, features, strict=True)], -1)
        scores = torch.cat([head(f).view(batch, CLASSES, -1) for head, f in zip(self.cls, features, strict=True)], -1)
        if self.shape != features[0].shape:  # Ultralytics' Detect._get_decode_boxes
            self.anchors, self.scale = _anchors(features, self.strides)
            self.shape = features[0].shape
        centre = (self.anchors.unsqueeze(0) + boxes[:, :2].tanh()) * self.scale
        size = boxes[:, 2:].exp() * self.scale
        return torch.cat([centre, size, scores.sigmoid()], 1)


def caching_head() -> nn.Module:
    torch.manual_seed(0)
    return CachingHead().eval()


class PerImage(nn.Module):
    """A model that loops over the images of its batch: traced for the tracing batch by either exporter."""

    input_shape = (1, 3, 16, 16)

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)

    def forward(self, x: Tensor) -> Tensor:
        return torch.stack([self.conv(image[None])[0].amax(0) for image in x.unbind(0)])


def per_image() -> nn.Module:
    torch.manual_seed(0)
    return PerImage().eval()


def tiny_torchvision(family: str) -> nn.Module:
    """A torchvision SSD, RetinaNet or FCOS on the two-map backbone above, resizing to SIZE (so an image of that size
    goes through unchanged)."""
    from torchvision.models.detection.anchor_utils import AnchorGenerator, DefaultBoxGenerator
    from torchvision.models.detection.fcos import FCOS
    from torchvision.models.detection.retinanet import RetinaNet
    from torchvision.models.detection.ssd import SSD

    torch.manual_seed(0)
    if family == "ssd":
        return SSD(_Features(), DefaultBoxGenerator([[2], [2]]), (SIZE, SIZE), num_classes=CLASSES).eval()
    backbone = _Features(32)  # FCOS's head normalises in groups of 32 channels
    backbone.out_channels = 32  # type: ignore[assignment]  # what RetinaNet and FCOS read: one width for all maps
    if family == "retinanet":
        anchors = AnchorGenerator(((16,), (32,)), ((0.5, 1.0, 2.0),) * 2)
        model = RetinaNet(backbone, CLASSES, min_size=SIZE, max_size=SIZE, anchor_generator=anchors)
    else:
        anchors = AnchorGenerator(((8,), (16,)), ((1.0,),) * 2)
        model = FCOS(backbone, CLASSES, min_size=SIZE, max_size=SIZE, anchor_generator=anchors)
    for parameter in model.head.parameters():  # their init (std 0.01, a 1 % prior) gives every anchor one score
        torch.nn.init.normal_(parameter, std=0.3)
    return model.eval()


def _tiny_ssd_model() -> nn.Module:
    return tiny_torchvision("ssd")


def tiny_ssd() -> nn.Module:
    """A whole torchvision SSD: per-image score threshold, top-k and NMS after the network."""
    model = _tiny_ssd_model()
    model.input_shape = (1, 3, SIZE, SIZE)
    return model


def tiny_ssd_head() -> nn.Module:
    """The same SSD cut before its post-processing, as the README says to export it."""
    from trtpipe.models.detectors import detector_head

    return detector_head(_tiny_ssd_model(), SIZE).eval()
