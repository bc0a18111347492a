"""Retrain the bundled digits model reproducibly: ``python -m trtpipe.models.train_digits``.

Fixed seeds, deterministic algorithms and one CPU thread make the run repeatable on a given machine and
torch version. The weights are written as safetensors (no pickle) with a metadata JSON that records the
held-out accuracy and how it was measured.
"""

from __future__ import annotations

import argparse
import datetime as dt
import hashlib
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from trtpipe.files import atomic_path, sha256_file, write_json_atomic
from trtpipe.models import data
from trtpipe.models.digits import METADATA_PATH, WEIGHTS_PATH, DigitsResNet

SEED = 0
EPOCHS = 40
BATCH_SIZE = 64
LEARNING_RATE = 3e-3
SHIFT_PIXELS = 3


def _augment(images: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """Random shifts of up to SHIFT_PIXELS in each direction (pad, then crop), so the net is not brittle."""
    pad = SHIFT_PIXELS
    padded = F.pad(images, (pad, pad, pad, pad), value=float(images.min()))
    size = images.shape[-1]
    out = torch.empty_like(images)
    offsets = torch.randint(0, 2 * pad + 1, (len(images), 2), generator=generator)
    for i, (dy, dx) in enumerate(offsets.tolist()):
        out[i] = padded[i, :, dy : dy + size, dx : dx + size]
    return out


def accuracy(model: torch.nn.Module, split: data.LabelledSplit) -> float:
    model.eval()
    with torch.inference_mode():
        predictions = model(torch.from_numpy(split.images)).argmax(1).numpy()
    return float((predictions == split.labels).mean())


def train(epochs: int = EPOCHS, seed: int = SEED) -> tuple[DigitsResNet, dict[str, float]]:
    torch.manual_seed(seed)
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(1)
    generator = torch.Generator().manual_seed(seed)

    train_split = data.load_split("digits", "train")
    eval_split = data.load_split("digits", "eval")
    images = torch.from_numpy(train_split.images)
    labels = torch.from_numpy(train_split.labels)

    model = DigitsResNet()
    optimizer = torch.optim.AdamW(model.parameters(), lr=LEARNING_RATE, weight_decay=1e-4)
    steps_per_epoch = (len(images) + BATCH_SIZE - 1) // BATCH_SIZE
    schedule = torch.optim.lr_scheduler.OneCycleLR(
        optimizer, max_lr=LEARNING_RATE, total_steps=epochs * steps_per_epoch
    )
    for epoch in range(epochs):
        model.train()
        order = torch.randperm(len(images), generator=generator)
        total_loss = 0.0
        for start in range(0, len(images), BATCH_SIZE):
            batch = order[start : start + BATCH_SIZE]
            loss = F.cross_entropy(model(_augment(images[batch], generator)), labels[batch])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            schedule.step()
            total_loss += float(loss.detach()) * len(batch)
        if (epoch + 1) % 10 == 0 or epoch == epochs - 1:
            print(f"epoch {epoch + 1:3d}  loss {total_loss / len(images):.4f}  "
                  f"eval accuracy {accuracy(model, eval_split):.4f}")
    model.eval()
    return model, {"train": accuracy(model, train_split), "eval": accuracy(model, eval_split)}


def save(model: DigitsResNet, accuracies: dict[str, float], weights: Path, metadata: Path) -> None:
    from safetensors.torch import save_file

    state = {k: v.detach().contiguous() for k, v in model.state_dict().items()}
    with atomic_path(weights) as tmp:
        save_file(state, str(tmp))
    sizes = {name: len(data.load_split("digits", name)) for name in ("train", "calibration", "eval")}
    write_json_atomic(metadata, {
        "architecture": "digits_resnet",
        "num_classes": 10,
        "input_shape": [1, 1, data.DIGITS_IMAGE_SIZE, data.DIGITS_IMAGE_SIZE],
        "parameters": sum(p.numel() for p in model.parameters()),
        "dataset": "digits (scikit-learn load_digits)",
        "preprocessing": {
            "source": "8x8 grey images, values 0..16",
            "resize": f"bilinear to {data.DIGITS_IMAGE_SIZE}x{data.DIGITS_IMAGE_SIZE}",
            "scale": "x / 16",
            "mean": data.DIGITS_MEAN,
            "std": data.DIGITS_STD,
        },
        "splits": {**sizes, "seed": data.SPLIT_SEED, "stratified": True},
        "training": {"seed": SEED, "epochs": EPOCHS, "batch_size": BATCH_SIZE, "optimizer": "AdamW",
                     "max_lr": LEARNING_RATE, "schedule": "one-cycle", "augmentation":
                     f"random shifts up to {SHIFT_PIXELS} px", "threads": 1,
                     "torch": torch.__version__},
        "train_accuracy": round(accuracies["train"], 6),
        "eval_accuracy": round(accuracies["eval"], 6),
        "eval_samples": sizes["eval"],
        "weights_sha256": sha256_file(weights),
        "state_dict_sha256": hashlib.sha256(b"".join(
            np.ascontiguousarray(v.numpy()).tobytes() for v in state.values())).hexdigest(),
        "trained_on": dt.date.today().isoformat(),
    })


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--epochs", type=int, default=EPOCHS)
    parser.add_argument("--weights", type=Path, default=WEIGHTS_PATH)
    parser.add_argument("--metadata", type=Path, default=METADATA_PATH)
    args = parser.parse_args()
    model, accuracies = train(args.epochs)
    if accuracies["eval"] < 0.95:
        raise SystemExit(f"Held-out accuracy {accuracies['eval']:.4f} is under 0.95; weights not written.")
    save(model, accuracies, args.weights, args.metadata)
    print(f"wrote {args.weights} ({args.weights.stat().st_size / 1024:.0f} KiB), "
          f"eval accuracy {accuracies['eval']:.4f} on {len(data.load_split('digits', 'eval'))} images")


if __name__ == "__main__":
    main()
