"""torchvision's one-stage detectors cut before their post-processing, so they export with a dynamic batch.

A torchvision detector (RetinaNet, SSD, SSDlite, FCOS) takes a list of images and returns, per image, a dict of
the boxes that survive a score threshold, a top-k and non-maximum suppression: a loop over the images and outputs
whose size depends on the data. Neither ONNX exporter keeps that batch-dynamic (dynamo cannot trace the data-
dependent sizes; TorchScript traces the loop for the tracing batch) and the surviving boxes, with their ties in
score, are not something two runtimes agree on box for box. :func:`detector_head` keeps the network, the anchors
and the box decoding, and stops there: its outputs are per-anchor class scores and boxes, which the detect measure
reads as they are, and the score threshold, top-k and NMS are the application's (as with YOLO exports)::

    # detector.py, named as MODEL: trtpipe convert detector.py:make -o retinanet.onnx
    import torch
    from torchvision.models.detection import retinanet_resnet50_fpn
    from trtpipe.models.detectors import detector_head

    def make():
        model = retinanet_resnet50_fpn(weights=None, weights_backbone=None, num_classes=91)
        model.load_state_dict(torch.load("retinanet.pt", weights_only=True))
        return detector_head(model, (800, 800))
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from trtpipe.errors import BadInput

# The families whose head runs once over the whole image (their class name: how the box coder and scores work).
_SIGMOID = {"RetinaNet", "FCOS"}  # one sigmoid per class
_SOFTMAX = {"SSD"}  # a softmax over the classes, class 0 the background
_TWO_STAGE = {"FasterRCNN", "MaskRCNN", "KeypointRCNN", "GeneralizedRCNN"}
HEAD_GUIDE = "README.md, 'Detectors'"


def detector_head(model: nn.Module, input_size: tuple[int, int] | int, *, raw: bool = False) -> DetectorHead:
    """``model`` (a torchvision RetinaNet, SSD, SSDlite or FCOS, weights loaded) up to its post-processing, at an
    input of ``input_size`` (height, width) pixels: see :class:`DetectorHead`."""
    return DetectorHead(model, input_size, raw=raw)


class DetectorHead(nn.Module):
    """A torchvision one-stage detector's network, anchors and box decoding, at one input size, batch dynamic.

    Input: ``images`` [N, 3, H, W], float RGB in [0, 1], as the torchvision model takes them; normalised here with
    the model's own mean and std. It is not resized: torchvision resizes to ``min_size`` (800 for RetinaNet and
    FCOS) or to the fixed size (300 for SSD300, 320 for SSDlite) before its network, so give that size for the
    detections the model was trained for, and resize images to it yourself.

    Outputs (``raw=False``): ``scores`` [N, A, C], each class's probability per anchor (sigmoid for RetinaNet,
    the square root of class times centerness for FCOS, softmax for SSD with the background class 0 set to 0), and
    ``boxes`` [N, A, 4], the anchor's decoded box (x1 y1 x2 y2, input pixels, clipped to the image). Column k is
    torchvision's label k. What torchvision does next, and the application must: keep scores above its
    ``score_thresh``, the best ``topk_candidates`` (per feature level for RetinaNet and FCOS), class-wise NMS at
    ``nms_thresh``, at most ``detections_per_img``. ``raw=True``: the head's own tensors instead, ``cls_logits``
    [N, A, C] and ``bbox_regression`` [N, A, 4] (FCOS adds ``bbox_ctrness`` [N, A, 1]), to be decoded against
    ``anchors`` [A, 4] (this module's buffer, x1 y1 x2 y2) with the model's box coder.
    """

    # buffers (registered in __init__), declared for the type checker: nn.Module's attribute lookup says only
    # "a tensor or a module"
    mean: Tensor
    std: Tensor
    anchors: Tensor

    def __init__(self, model: nn.Module, input_size: tuple[int, int] | int, *, raw: bool = False) -> None:
        super().__init__()
        family = _family(model)
        height, width = (input_size, input_size) if isinstance(input_size, int) else tuple(input_size)
        transform: Any = model.transform
        divisor = int(getattr(transform, "size_divisible", 1))
        if height % divisor or width % divisor:
            raise BadInput(f"torchvision's {type(model).__name__} pads images to a multiple of {divisor} pixels: "
                           f"give an input size that is one (not {height}x{width}).")
        self.family, self.raw = family, raw
        detector: Any = model  # a torchvision detector: its parts are attributes nn.Module's types do not know
        self.backbone: nn.Module = detector.backbone
        self.head: nn.Module = detector.head
        self.register_buffer("mean", torch.tensor(transform.image_mean).view(1, 3, 1, 1), persistent=False)
        self.register_buffer("std", torch.tensor(transform.image_std).view(1, 3, 1, 1), persistent=False)
        self.box_coder: Any = detector.box_coder
        self.input_shape = (1, 3, height, width)  # what trtpipe reads when --input-shape is not given
        self.register_buffer("anchors", self._make_anchors(detector.anchor_generator, height, width), persistent=False)

    def _make_anchors(self, generator: nn.Module, height: int, width: int) -> Tensor:
        from torchvision.models.detection.image_list import ImageList

        images = torch.zeros(1, 3, height, width)
        training = self.backbone.training
        self.backbone.eval()  # only the feature maps' sizes matter: this run must not move batch-norm statistics
        with torch.no_grad():
            features = self._features(images)
        self.backbone.train(training)
        return generator(ImageList(images, [(height, width)]), features)[0]

    def _features(self, images: Tensor) -> list[Tensor]:
        features = self.backbone(images)
        return [features] if isinstance(features, Tensor) else list(features.values())

    def forward(self, images: Tensor) -> dict[str, Tensor]:
        outputs = self.head(self._features((images - self.mean) / self.std))
        if self.raw:
            return dict(outputs)
        logits, regression = outputs["cls_logits"], outputs["bbox_regression"]
        if self.family == "SSD":
            background = torch.ones(logits.shape[-1], dtype=logits.dtype, device=logits.device)
            scores = torch.softmax(logits, -1) * background.index_fill(0, torch.tensor([0]), 0.0)
        elif self.family == "FCOS":
            scores = torch.sqrt(torch.sigmoid(logits) * torch.sigmoid(outputs["bbox_ctrness"]))
        else:
            scores = torch.sigmoid(logits)
        boxes = self._decode(regression)
        height, width = self.input_shape[2:]
        limits = torch.tensor([width, height, width, height], dtype=boxes.dtype, device=boxes.device)
        return {"scores": scores, "boxes": torch.minimum(boxes.clamp(min=0), limits)}

    def _decode(self, regression: Tensor) -> Tensor:
        """The box coder's decoding, for every image at once against the one set of anchors."""
        anchors = self.anchors.to(regression.dtype)
        if self.family == "FCOS":  # BoxLinearCoder: distances to the four sides, in units of the anchor's size
            return self.box_coder.decode(regression, anchors)
        # BoxCoder: centre offsets in units of the anchor's size, log size ratios; weights per coordinate
        size = anchors[:, 2:] - anchors[:, :2]
        centre = anchors[:, :2] + 0.5 * size
        weights = torch.tensor(self.box_coder.weights, dtype=regression.dtype, device=regression.device)
        deltas = regression / weights
        clip = self.box_coder.bbox_xform_clip
        new_centre = deltas[..., :2] * size + centre
        new_size = torch.exp(deltas[..., 2:].clamp(max=clip)) * size
        return torch.cat([new_centre - 0.5 * new_size, new_centre + 0.5 * new_size], dim=-1)


def _family(model: nn.Module) -> str:
    names = [cls.__name__ for cls in type(model).__mro__ if cls.__module__.startswith("torchvision.models.detection")]
    family = next((n for n in names if n in _SIGMOID | _SOFTMAX), None)
    if family is not None:
        return family
    if any(n in _TWO_STAGE for n in names):
        raise BadInput(f"{type(model).__name__} is a two-stage detector: its second stage runs on the boxes the "
                       "first one's NMS keeps, so there is no head to cut before post-processing. detector_head "
                       "takes torchvision's one-stage detectors: RetinaNet, SSD, SSDlite, FCOS.")
    raise BadInput(f"detector_head takes a torchvision RetinaNet, SSD, SSDlite or FCOS, not a {type(model).__name__}.")


def unwrapped_detector_hint(module: nn.Module) -> str | None:
    """What to do, when ``module`` is a whole torchvision detector (post-processing included): None otherwise."""
    names = {cls.__name__ for cls in type(module).__mro__ if cls.__module__.startswith("torchvision.models.detection")}
    if not names:
        return None
    name = type(module).__name__
    if names & _TWO_STAGE:
        return (f"torchvision's {name} ends in per-image post-processing (NMS, then a second stage on the boxes it "
                "keeps), which no exporter keeps batch-dynamic and which has no head to cut before it: convert it "
                "whole with --static-batch, or use a one-stage detector (RetinaNet, SSD, FCOS) cut with "
                "trtpipe.models.detectors.detector_head.")
    return (f"torchvision's {name} ends in per-image post-processing (score threshold, top-k, NMS), which does not "
            "export with a dynamic batch nor verify box for box: export it up to that point with "
            "trtpipe.models.detectors.detector_head(model, (height, width)) in a factory (see "
            f"{HEAD_GUIDE}).")

