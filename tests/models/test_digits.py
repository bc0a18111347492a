"""The bundled trained model and its data: the ground truth for every accuracy figure trtpipe reports."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from trtpipe.errors import BadInput
from trtpipe.files import sha256_file
from trtpipe.models.data import load_split
from trtpipe.models.digits import METADATA_PATH, WEIGHTS_PATH, load_trained, trained_metadata


def test_splits_are_disjoint_stratified_and_cover_the_data() -> None:
    splits = {name: load_split("digits", name) for name in ("train", "calibration", "eval")}
    assert {n: len(s) for n, s in splits.items()} == {"train": 800, "calibration": 150, "eval": 847}
    rows = [s.images.reshape(len(s), -1) for s in splits.values()]
    seen = {r.tobytes() for r in rows[0]}
    # Some digits images are pixel-identical duplicates in the source data; allow only those few.
    assert sum(r.tobytes() in seen for r in rows[2]) <= 3
    for split in splits.values():
        assert split.images.dtype == np.float32 and split.images.shape[1:] == (1, 32, 32)
        assert set(np.unique(split.labels)) == set(range(10))
    assert splits["eval"].images.min() >= -1.0 and splits["eval"].images.max() <= 1.0


def test_trained_model_reaches_its_recorded_held_out_accuracy() -> None:
    split = load_split("digits", "eval")
    with torch.inference_mode():
        predictions = load_trained()(torch.from_numpy(split.images)).argmax(1).numpy()
    accuracy = float((predictions == split.labels).mean())
    metadata = trained_metadata()
    assert accuracy >= 0.95
    assert accuracy == pytest.approx(metadata["eval_accuracy"], abs=1e-6)
    assert metadata["eval_samples"] == len(split)


def test_weights_are_small_safetensors_matching_the_metadata() -> None:
    assert WEIGHTS_PATH.stat().st_size < 2 * 1024 * 1024
    assert sha256_file(WEIGHTS_PATH) == trained_metadata()["weights_sha256"]
    assert METADATA_PATH.is_file()


def test_unknown_split_and_dataset_are_named() -> None:
    with pytest.raises(BadInput, match=r"no split .test.*train, calibration, eval"):
        load_split("digits", "test")
    with pytest.raises(BadInput, match="Unknown data set 'mnist'"):
        load_split("mnist", "eval")
