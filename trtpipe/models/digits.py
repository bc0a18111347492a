"""The bundled trained model: a small ResNet for scikit-learn's 8x8 digits, upsampled to 32x32.

It is the one model in trtpipe with real weights and real labelled data, so it is what every accuracy check
(conversion, FP16, INT8 calibration, the accuracy budget) is proven on. ``python -m
trtpipe.models.train_digits`` retrains it reproducibly.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from torch import Tensor, nn

WEIGHTS_DIR = Path(__file__).parent / "weights"
WEIGHTS_PATH = WEIGHTS_DIR / "digits_resnet.safetensors"
METADATA_PATH = WEIGHTS_DIR / "digits_resnet.json"


class BasicBlock(nn.Module):
    """Two 3x3 convolutions with a residual connection (a projection when the shape changes)."""

    def __init__(self, in_channels: int, out_channels: int, stride: int = 1) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, out_channels, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(out_channels)
        self.conv2 = nn.Conv2d(out_channels, out_channels, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(out_channels)
        self.relu = nn.ReLU(inplace=True)
        self.shortcut: nn.Module = nn.Identity()
        if stride != 1 or in_channels != out_channels:
            self.shortcut = nn.Sequential(
                nn.Conv2d(in_channels, out_channels, 1, stride, bias=False), nn.BatchNorm2d(out_channels)
            )

    def forward(self, x: Tensor) -> Tensor:
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return self.relu(out + self.shortcut(x))


class DigitsResNet(nn.Module):
    """ResNet-style CNN for 1x32x32 inputs: a stem and three residual stages of 16, 32 and 64 channels."""

    def __init__(self, num_classes: int = 10, widths: tuple[int, int, int] = (16, 32, 64)) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(1, widths[0], 3, 1, 1, bias=False), nn.BatchNorm2d(widths[0]),
                                  nn.ReLU(inplace=True))
        self.layer1 = BasicBlock(widths[0], widths[0])
        self.layer2 = BasicBlock(widths[0], widths[1], stride=2)
        self.layer3 = BasicBlock(widths[1], widths[2], stride=2)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(widths[2], num_classes)

    def forward(self, x: Tensor) -> Tensor:
        x = self.layer3(self.layer2(self.layer1(self.stem(x))))
        return self.fc(self.pool(x).flatten(1))


def load_trained() -> DigitsResNet:
    """The bundled trained model, in eval mode."""
    from safetensors.torch import load_file

    from trtpipe.errors import TrtpipeError

    if not WEIGHTS_PATH.is_file():
        raise TrtpipeError(
            f"The bundled weights {WEIGHTS_PATH} are missing: reinstall trtpipe or run "
            "'python -m trtpipe.models.train_digits'."
        )
    model = DigitsResNet()
    model.load_state_dict(load_file(str(WEIGHTS_PATH)))
    return model.eval()


def trained_metadata() -> dict[str, Any]:
    return json.loads(METADATA_PATH.read_text()) if METADATA_PATH.is_file() else {}
