"""`make int8-decisions`: issue #55's measurement. Does deciding INT8 steps by expected value (the step rule of
``trtpipe/optimize/step_rule.py``) give files at least as accurate on unseen data as the significance rule before it,
and ahead of the peers' defaults?

For six trained models of different kinds (two packaged detectors, a CTC text recognizer and a direction classifier
from rapidocr's wheel, the pretrained EfficientNet-Lite0 and the repo's digits model) it builds a FIXED calibration
set (a .npz of N samples, so that optimize's held-out split applies: 64 for the dense models, 128 for the classifiers
and the recognizer) and a DISJOINT unseen set from trtpipe's own data sources, with seeds no earlier measurement used
where the source takes one (checked: no unseen sample equals a calibration sample). Then, for targets cpu and
tensorrt, it quantizes each model four ways on the same calibration samples:

- trtpipe ``optimize --precision int8 --target T --calib calib.npz``, default options otherwise, with the code BEFORE
  the step rule (``--before``, a checkout of 2f2eca5) and with this checkout's (AFTER), each in its own process with
  its own tree on PYTHONPATH;
- NNCF's default PTQ and ONNX Runtime's quantize_static (QDQ, per-channel; U8S8 for cpu, S8S8 symmetric for
  tensorrt), through scripts/peers.py's helpers, on the same FP32 graph at opset 13.

Every file is scored on the unseen set against the FP32 model's own outputs with the task measure trtpipe uses
(trtpipe.comparison.compare with the model's task and decoder), with its 95 % interval; tensorrt-target files (and
NNCF's file in the tensorrt table) are judged with Q/DQ as float ops, TensorRT's arithmetic, as scripts/peers.py
does. From each trtpipe manifest it records the steps that ran, which were kept and the paired change each made.

Results go to reports/int8-decisions/results.json (a model already there is not run again unless named with
--redo) and the page docs/results/int8-decisions.md, rewritten after each model so that a partial page exists if
the run is cut short. A benchmark, not a test.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnx

sys.path.insert(0, str(Path(__file__).resolve().parent))  # scripts/peers.py's quantizers and helpers
from peers import _one_line, _static_batch, nncf, ort_static

from trtpipe.comparison import Comparison, compare
from trtpipe.models.data import load_split
from trtpipe.models.packaged import LAYOUT_DETECTOR, TEXT_DETECTOR, natural_batch, packaged_model, packaged_onnx
from trtpipe.models.photos import photo_crops
from trtpipe.optimize.graph.opset import upgrade_for_precision
from trtpipe.optimize.judging.evaluate import outputs
from trtpipe.optimize.judging.step_rule import paired_change
from trtpipe.vocab import Precision, Task

DAY = "2026-11-28"  # the date of the measurements on the page: every section with a table names it
HERE = Path(__file__).resolve().parent.parent
WORK = HERE / "reports" / "int8-decisions"
PAGE = HERE / "docs" / "results" / "int8-decisions.md"
RAPIDOCR = "rapidocr_onnxruntime/models"
OPTIMIZE_TIMEOUT_S = 900  # one optimize run by default (--timeout); past it the cell says so
TARGETS = ("cpu", "tensorrt")
METHODS = ("BEFORE", "AFTER", "NNCF", "quantize_static")
# Seeds of the seeded sources: none of them used by scripts/peers.py or the tests (0 and 1), so the unseen pages and
# lines are new to every earlier measurement.
CALIB_SEED, UNSEEN_SEED = 100, 200
NOTES = "<!-- notes: written by hand; re-rendering the tables keeps them -->"
MODELS = ("digits_resnet", "ppocr_cls", "ppocrv4_rec", TEXT_DETECTOR, LAYOUT_DETECTOR, "efficientnet_lite0")


@dataclass
class Prepared:
    """A model ready to quantize: the file trtpipe is given, the opset-13 FP32 graph the peers are given, the
    calibration and unseen inputs, and how outputs are judged."""

    name: str
    kind: str
    trtpipe_source: Path
    peer_source: Path
    calib: np.ndarray
    unseen: np.ndarray
    task: Task
    decoder: Callable[[list[np.ndarray]], list[Any]] | None
    data: str
    batch: int | None = None  # judging batch (1 for a graph fixed at batch 1)


def _site_file(relative: str) -> Path:
    import importlib.util

    spec = importlib.util.find_spec(relative.split("/")[0])  # not imported: its __init__ needs OpenCV
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit(f"{relative.split('/')[0]} is not installed (make install puts it in .venv)")
    return Path(next(iter(spec.submodule_search_locations))).parent / relative


def _peer_graph(source: Path, folder: Path) -> Path:
    """The FP32 graph at opset 13 (per-channel Q/DQ needs it), which every peer quantizes and every score is against."""
    path = folder / "fp32.onnx"
    upgraded, _ = upgrade_for_precision(onnx.load(str(source)), Precision.INT8)
    onnx.save(upgraded, str(path))
    return path


def _line_crops(pages: int, seed: int, height: int, width: int, count: int, rotate: bool) -> np.ndarray:
    """``count`` text-line crops of trtpipe's rendered-text photos (packaged text detector's natural batch, ``seed``),
    each resized to ``height`` keeping its aspect (at most ``width`` wide), normalised as PaddleOCR's recognizer and
    direction classifier expect ((x / 255 - 0.5) / 0.5) and padded with zeros to ``width``; ``rotate``: every other
    line (seeded) turned 180 degrees, so that the direction classifier sees both of its classes."""
    from PIL import Image

    batch = natural_batch(TEXT_DETECTOR, pages, seed=seed, size=(640, 640), raw=True)
    rng = np.random.default_rng(seed)
    crops = []
    for page, boxes in zip(batch.inputs, batch.boxes, strict=True):
        pixels = page.transpose(1, 2, 0)
        for box in boxes:
            x0, y0 = max(0, int(box.left) - 2), max(0, int(box.top) - 2)
            x1, y1 = min(pixels.shape[1], int(box.right) + 2), min(pixels.shape[0], int(box.bottom) + 2)
            line = Image.fromarray(np.ascontiguousarray(pixels[y0:y1, x0:x1]))
            if rotate and rng.integers(2):
                line = line.rotate(180)
            w = max(1, min(width, int(np.ceil(height * line.width / line.height))))
            array = np.asarray(line.resize((w, height), Image.Resampling.BILINEAR)).astype(np.float32)
            out = np.zeros((3, height, width), np.float32)
            out[:, :, :w] = (array.transpose(2, 0, 1) / 255.0 - 0.5) / 0.5
            crops.append(out)
            if len(crops) == count:
                return np.stack(crops)
    raise SystemExit(f"{pages} pages gave only {len(crops)} lines; {count} were asked for")


# Trained detectors shipped inside wheels that no trtpipe default was chosen on (issue #55's "models this project
# has not tuned on"); `make int8-decisions` installs the wheels with --no-deps, trtpipe reads only the .onnx files.
NUDENET = "nudenet_yolov8n"  # nudenet 3.4.2 (MIT; the model's own metadata says AGPL-3.0): YOLOv8n, 18 classes
DDDDOCR_DET = "ddddocr_yolox"  # ddddocr 1.6.1 (MIT): YOLOX-tiny character detector of click captchas
# ddddocr 1.6.1's captcha reader (MIT): a CNN with swish blocks, an LSTM and a CTC head over 8210 characters,
# time-major [T, 1, C] logits from a graph fixed at batch 1 (docs/results/output-layouts.md read its layout; no INT8
# default was chosen on it)
DDDDOCR_REC = "ddddocr_ocr"
WHEEL_MODELS = (NUDENET, DDDDOCR_DET, DDDDOCR_REC)


def _faces_on_photos(purpose: str, count: int, size: int, seed: int) -> np.ndarray:
    """``count`` photo crops (``size`` square, RGB in 0..1) with one to three of scikit-image's LFW faces pasted on
    each at 40-120 px: people for a detector whose classes include faces and bodies."""
    from PIL import Image
    from skimage import data as skimage_data

    faces = skimage_data.lfw_subset()
    rng = np.random.default_rng(seed)
    crops = photo_crops(purpose, (3, size, size), (0.0, 0.0, 0.0), (1.0, 1.0, 1.0), count)
    for crop in crops:
        for _ in range(int(rng.integers(1, 4))):
            side = int(rng.integers(40, 121))
            face = Image.fromarray((255 * faces[int(rng.integers(len(faces)))]).astype(np.uint8))
            pixels = np.asarray(face.resize((side, side), Image.Resampling.BILINEAR), np.float32) / 255.0
            y, x = (int(v) for v in rng.integers(0, size - side, 2))
            crop[:, y:y + side, x:x + side] = pixels[None] * rng.uniform(0.8, 1.1, (3, 1, 1))
    return np.clip(crops, 0.0, 1.0)


def _captcha_pages(purpose: str, count: int, size: int, seed: int) -> np.ndarray:
    """``count`` click-captcha-like images (``size`` square, BGR pixels 0..255 as ddddocr feeds its detector): a
    photo crop behind three to six letters and digits in DejaVu fonts, 28-64 px, turned a little, random colours."""
    from PIL import Image, ImageDraw, ImageFont

    fonts = sorted(Path("/usr/share/fonts/truetype/dejavu").glob("DejaVu*.ttf"))
    if not fonts:
        raise SystemExit("the DejaVu fonts are not installed (Debian: fonts-dejavu-core)")
    rng = np.random.default_rng(seed)
    glyphs = "ABCDEFGHJKLMNPQRSTUVWXYZ23456789"
    pages = photo_crops(purpose, (3, size, size), (0.0, 0.0, 0.0), (1.0, 1.0, 1.0), count, raw=True)
    out = np.empty((count, 3, size, size), np.float32)
    for index, page in enumerate(pages):
        image = Image.fromarray(np.ascontiguousarray(page.transpose(1, 2, 0)))
        for _ in range(int(rng.integers(3, 7))):
            height = int(rng.integers(28, 65))
            font = ImageFont.truetype(str(fonts[int(rng.integers(len(fonts)))]), height)
            tile = Image.new("RGBA", (2 * height, 2 * height), (0, 0, 0, 0))
            colour = tuple(int(v) for v in rng.integers(0, 256, 3))
            ImageDraw.Draw(tile).text((height // 2, height // 4), glyphs[int(rng.integers(len(glyphs)))], font=font,
                                      fill=(*colour, 255))
            tile = tile.rotate(float(rng.uniform(-30, 30)), resample=Image.Resampling.BILINEAR)
            x, y = (int(v) for v in rng.integers(0, size - 2 * height, 2))
            image.paste(tile, (x, y), tile)
        out[index] = np.asarray(image, np.float32)[:, :, ::-1].transpose(2, 0, 1)  # BGR, raw 0..255
    return out


def _captcha_lines(count: int, seed: int, height: int = 64, width: int = 160) -> np.ndarray:
    """``count`` text captchas as ddddocr reads them: ``height`` x ``width`` grey in 0..1 (its own ``/ 255``), four to
    six letters and digits in DejaVu fonts, each turned a little, on a light noisy ground with two to four lines
    drawn across, blurred a little, pixel noise on top."""
    from PIL import Image, ImageDraw, ImageFilter, ImageFont

    fonts = sorted(Path("/usr/share/fonts/truetype/dejavu").glob("DejaVu*.ttf"))
    if not fonts:
        raise SystemExit("the DejaVu fonts are not installed (Debian: fonts-dejavu-core)")
    rng = np.random.default_rng(seed)
    glyphs = "abcdefghjkmnpqrstuvwxyzABCDEFGHJKLMNPQRSTUVWXYZ23456789"
    out = np.empty((count, 1, height, width), np.float32)
    for index in range(count):
        ground = int(rng.integers(190, 256))
        image = Image.new("L", (width, height), ground)
        draw = ImageDraw.Draw(image)
        characters = int(rng.integers(4, 7))
        x = int(rng.integers(2, 14))
        for _ in range(characters):
            size = int(rng.integers(30, 46))
            font = ImageFont.truetype(str(fonts[int(rng.integers(len(fonts)))]), size)
            tile = Image.new("L", (size + 8, size + 12), 0)
            ImageDraw.Draw(tile).text((4, 0), glyphs[int(rng.integers(len(glyphs)))], font=font, fill=255)
            tile = tile.rotate(float(rng.uniform(-25, 25)), resample=Image.Resampling.BILINEAR)
            ink = int(rng.integers(0, 120))
            y = int(rng.integers(0, max(1, height - tile.height)))
            image.paste(Image.new("L", tile.size, ink), (x, y), tile)
            x += int(size * rng.uniform(0.55, 0.8))
            if x > width - 20:
                break
        for _ in range(int(rng.integers(2, 5))):
            points = [(int(rng.integers(0, width)), int(rng.integers(0, height))) for _ in range(2)]
            draw.line(points, fill=int(rng.integers(0, 160)), width=int(rng.integers(1, 3)))
        image = image.filter(ImageFilter.GaussianBlur(float(rng.uniform(0.0, 0.8))))
        pixels = np.asarray(image, np.float32) + rng.normal(0.0, 8.0, (height, width))
        out[index, 0] = np.clip(pixels, 0, 255) / 255.0
    return out


def prepare(name: str, folder: Path, unseen_count: int | None) -> Prepared:
    """The model's files and its two disjoint input sets."""
    if name == NUDENET:
        from trtpipe.tasks.detect import decode_yolov8

        original = _site_file("nudenet/320n.onnx")
        count = unseen_count or 100
        calib = _faces_on_photos("calibration", 64, 320, CALIB_SEED)
        unseen = _faces_on_photos("eval", count, 320, UNSEEN_SEED)
        return Prepared(name, "NudeNet YOLOv8n detector (wheel)", original, _peer_graph(original, folder), calib,
                        unseen, Task.DETECT, decode_yolov8, f"photo crops (320x320, 0..1) with 1-3 LFW faces pasted, "
                        f"calibration crops 0-63 (seed {CALIB_SEED}), unseen eval crops 0-{count - 1} (seed "
                        f"{UNSEEN_SEED})")
    if name == DDDDOCR_DET:
        from trtpipe.tasks.detect import yolox_decoder

        original = _site_file("ddddocr/common_det.onnx")
        count = unseen_count or 100
        calib = _captcha_pages("calibration", 64, 416, CALIB_SEED)
        unseen = _captcha_pages("eval", count, 416, UNSEEN_SEED)
        return Prepared(name, "ddddocr YOLOX-tiny character detector (wheel)", original,
                        _peer_graph(original, folder), calib, unseen, Task.DETECT, yolox_decoder(416, 416),
                        f"captcha-like images (416x416, BGR 0..255): photo crop behind 3-6 rendered characters, "
                        f"calibration 64 (seed {CALIB_SEED}), unseen {count} (seed {UNSEEN_SEED})", batch=1)
    if name == DDDDOCR_REC:
        original = _site_file("ddddocr/common.onnx")
        count = unseen_count or 200
        calib = _captcha_lines(128, CALIB_SEED)
        unseen = _captcha_lines(count, UNSEEN_SEED)
        return Prepared(name, "ddddocr captcha reader: CNN + LSTM + CTC (wheel)", original,
                        _peer_graph(original, folder), calib, unseen, Task.SEQUENCE, None,
                        f"rendered text captchas (64x160 grey, 4-6 characters, noise lines, blur), calibration 128 "
                        f"(seed {CALIB_SEED}), unseen {count} (seed {UNSEEN_SEED})", batch=1)
    if name in (LAYOUT_DETECTOR, TEXT_DETECTOR):
        packaged = packaged_model(name)
        original = packaged_onnx(name)
        # DBNet at 320x320 rather than its packaged 640x640, to keep the whole run near an hour on 2 busy cores
        size = (320, 320) if name == TEXT_DETECTOR else None
        # PicoDet's fixed 800x608 pages: 64 unseen, as the run must fit about an hour on 2 busy cores
        count = unseen_count or (64 if name == LAYOUT_DETECTOR else 100)
        calib = natural_batch(name, 64, seed=CALIB_SEED, size=size)
        unseen = natural_batch(name, count, seed=UNSEEN_SEED, size=size)
        kind = "PP-PicoDet layout detector" if name == LAYOUT_DETECTOR else "PP-OCRv4 DBNet text detector"
        source = _peer_graph(original, folder)
        return Prepared(name, kind, original, source, calib.inputs, unseen.inputs, packaged.task, packaged.decoder(),
                        f"calibration {calib.source}; unseen {unseen.source}",
                        batch=_static_batch(onnx.load(str(source))) or 1)
    if name == "ppocrv4_rec":
        original = _site_file(f"{RAPIDOCR}/ch_PP-OCRv4_rec_infer.onnx")
        count = unseen_count or 200
        calib = _line_crops(80, CALIB_SEED, 48, 320, 128, rotate=False)
        unseen = _line_crops(120, UNSEEN_SEED, 48, 320, count, rotate=False)
        return Prepared(name, "PP-OCRv4 CTC text recognizer", original, _peer_graph(original, folder), calib, unseen,
                        Task.SEQUENCE, None, f"text-line crops (48x320) of rendered-text photos, pages seed "
                        f"{CALIB_SEED} (calibration) and {UNSEEN_SEED} (unseen)")
    if name == "ppocr_cls":
        original = _site_file(f"{RAPIDOCR}/ch_ppocr_mobile_v2.0_cls_infer.onnx")
        count = unseen_count or 200
        calib = _line_crops(80, CALIB_SEED + 1, 48, 192, 128, rotate=True)
        unseen = _line_crops(120, UNSEEN_SEED + 1, 48, 192, count, rotate=True)
        return Prepared(name, "PP-OCR mobile direction classifier", original, _peer_graph(original, folder), calib,
                        unseen, Task.CLASSIFY, None, f"text-line crops (48x192, half turned 180 degrees) of "
                        f"rendered-text photos, pages seed {CALIB_SEED + 1} and {UNSEEN_SEED + 1}")
    if name == "efficientnet_lite0":
        from trtpipe.models.loader import load_model

        converted = folder / "source.onnx"
        if not converted.exists():
            subprocess.run([sys.executable, "-m", "trtpipe.cli", "convert", name, "-o", str(converted)],
                           check=True, stdout=subprocess.DEVNULL, cwd=HERE)
        prep = load_model(name).extra["preprocessing"]
        count = unseen_count or 200
        mean, std = tuple(prep["mean"]), tuple(prep["std"])
        calib = photo_crops("calibration", (3, 224, 224), mean, std, 128)
        # eval crops 500 onwards: scripts/peers.py judged (and the defaults were chosen) on the first 500
        unseen = photo_crops("eval", (3, 224, 224), mean, std, 500 + count)[500:]
        return Prepared(name, "EfficientNet-Lite0 (ImageNet-pretrained, depthwise)", converted,
                        _peer_graph(converted, folder), calib, unseen, Task.CLASSIFY, None,
                        f"photo crops: calibration crops 0-127, unseen eval crops 500-{499 + count}")
    if name == "digits_resnet":
        converted = folder / "source.onnx"
        if not converted.exists():
            subprocess.run([sys.executable, "-m", "trtpipe.cli", "convert", name, "-o", str(converted)],
                           check=True, stdout=subprocess.DEVNULL, cwd=HERE)
        unseen_all = load_split("digits", "eval").images
        unseen = unseen_all[: unseen_count] if unseen_count else unseen_all
        return Prepared(name, "digits ResNet (trained in the repo)", converted, _peer_graph(converted, folder),
                        load_split("digits", "calibration").images[:128], unseen, Task.CLASSIFY, None,
                        f"digits calibration split (first 128), eval split ({len(unseen)})")
    raise SystemExit(f"unknown model {name}")


def _disjoint(calib: np.ndarray, unseen: np.ndarray) -> None:
    seen = {hashlib.sha256(np.ascontiguousarray(x).tobytes()).hexdigest() for x in calib}
    shared = sum(hashlib.sha256(np.ascontiguousarray(x).tobytes()).hexdigest() in seen for x in unseen)
    if shared:
        raise SystemExit(f"{shared} unseen samples are also calibration samples")


def run_optimize(tree: Path, source: Path, out: Path, calib: Path, target: str, log: Path,
                 timeout: int = OPTIMIZE_TIMEOUT_S) -> str | None:
    """trtpipe optimize from ``tree`` in its own process, its output streamed to ``log``: None, or the error line.
    A file a cut run already wrote (with its manifest) is kept rather than made again."""
    if out.exists() and out.with_suffix(".manifest.json").exists():
        return None
    command = [sys.executable, "-m", "trtpipe.cli", "optimize", str(source), "-o", str(out), "--precision", "int8",
               "--target", target, "--calib", str(calib)]
    env = {**os.environ, "PYTHONPATH": str(tree), "COLUMNS": "160"}
    with log.open("w") as stream:
        try:
            done = subprocess.run(command, cwd=tree, env=env, stdout=stream, stderr=subprocess.STDOUT,
                                  timeout=timeout)
        except subprocess.TimeoutExpired:
            return f"timed out after {timeout} s on the busy 2-core machine"
    if done.returncode != 0 or not out.exists():
        lines = [line.strip() for line in log.read_text().splitlines() if line.strip()]
        return (lines[-1] if lines else f"exit {done.returncode}")[:300]
    return None


def recipe_record(out: Path) -> dict[str, Any] | None:
    """The manifest's int8.recipe (quality, steps, measured steps with their decisions)."""
    manifest = out.with_suffix(".manifest.json")
    if not manifest.exists():
        return None
    data = json.loads(manifest.read_text())
    section = data.get("int8") or (data.get("details") or {}).get("int8") or {}
    recipe = section.get("recipe")
    return recipe if isinstance(recipe, dict) else None


def judge(path: Path, model: Prepared, reference: list[np.ndarray], float_qdq: bool) -> Comparison:
    """The file's outputs on the unseen set against FP32's, by the model's task measure (Q/DQ as float ops for a
    tensorrt-target file)."""
    judged = outputs(onnx.load(str(path)), model.unseen, batch=model.batch,
                     as_written=float_qdq)
    return compare(reference, judged, task=model.task, decoder=model.decoder)


def cell_of(result: Comparison) -> dict[str, Any]:
    found = result.agreement_interval
    return {"measure": result.agreement_name, "agreement": result.agreement,
            "interval": None if found is None else [found.low, found.high], "units": result.samples,
            "cosine": result.cosine}


def paired(judged: dict[str, Comparison]) -> dict[str, Any]:
    """AFTER's figure minus BEFORE's and minus NNCF's on the same unseen samples, pair by pair (the step rule's own
    paired interval): [point, low, high] in points, where both were judged and the task gives per-sample figures."""
    out: dict[str, Any] = {}
    after = judged.get("AFTER")
    for other in ("BEFORE", "NNCF"):
        theirs = judged.get(other)
        if after is None or theirs is None or after.agreement is None or theirs.agreement is None:
            continue
        found = paired_change(theirs, after)
        out[f"AFTER-{other}"] = [100 * (after.agreement - theirs.agreement),
                                 None if found is None else found.low, None if found is None else found.high]
    return out


def run_model(name: str, before: Path, unseen_count: int | None, *, targets: tuple[str, ...] = TARGETS, jobs: int = 1,
              timeout: int = OPTIMIZE_TIMEOUT_S) -> dict[str, Any]:
    folder = WORK / name
    folder.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    model = prepare(name, folder, unseen_count)
    _disjoint(model.calib, model.unseen)
    input_name = onnx.load(str(model.trtpipe_source)).graph.input[0].name
    calib_path = folder / "calib.npz"
    np.savez(calib_path, **{input_name: model.calib})
    reference = outputs(onnx.load(str(model.peer_source)), model.unseen, batch=model.batch)
    print(f"{name}: {len(model.calib)} calibration, {len(model.unseen)} unseen ({model.data})", flush=True)
    entry: dict[str, Any] = {"kind": model.kind, "data": model.data, "calibration": len(model.calib),
                             "unseen": len(model.unseen), "task": str(model.task), "cells": {}, "steps": {}}
    peer_batch = _static_batch(onnx.load(str(model.peer_source))) or 32
    nncf_file: Path | None = None
    nncf_error: str | None = None
    runs = [(method, target) for target in targets for method in ("BEFORE", "AFTER")]
    with ThreadPoolExecutor(max_workers=jobs) as pool:  # jobs > 1: optimize runs side by side (each its own process)
        errors = dict(zip(runs, pool.map(lambda run: run_optimize(
            before if run[0] == "BEFORE" else HERE, model.trtpipe_source, folder / f"{run[0]}-{run[1]}.onnx",
            calib_path, run[1], folder / f"{run[0]}-{run[1]}.log", timeout), runs), strict=True))
    for target in targets:
        float_qdq = target == "tensorrt"
        cells: dict[str, Any] = {}
        judged: dict[str, Comparison] = {}
        for method in METHODS:
            out = folder / f"{method}-{target}.onnx"
            started = time.perf_counter()
            error: str | None = None
            try:
                if method in ("BEFORE", "AFTER"):
                    error = errors[method, target]
                    if error is None:
                        entry["steps"].setdefault(target, {})[method] = recipe_record(out)
                elif method == "NNCF":
                    if nncf_file is None and nncf_error is None:  # one NNCF file per model, judged per target
                        try:
                            nncf_file = nncf(model.peer_source, folder / "NNCF.onnx", model.calib)
                        except Exception as failure:  # a peer's crash is a result
                            nncf_error = _one_line(failure)
                    error, out = nncf_error, nncf_file or out
                else:
                    ort_static(model.peer_source, out, model.calib, signed=float_qdq, batch=min(peer_batch, 32))
                if error:
                    cell = {"error": error}
                else:
                    judged[method] = judge(out, model, reference, float_qdq)
                    cell = cell_of(judged[method])
            except Exception as failure:  # a crash in one cell is recorded, the run goes on
                cell = {"error": _one_line(failure)}
            cell["seconds"] = round(time.perf_counter() - started, 1)
            cells[method] = cell
            shown = cell.get("error") or f"{cell['measure']} {100 * float(cell['agreement'] or 0):.1f} %"
            print(f"  {target} {method}: {shown} ({cell['seconds']} s)", flush=True)
        entry["cells"][target] = cells
        entry.setdefault("paired", {})[target] = paired(judged)
    entry["seconds"] = round(time.perf_counter() - start, 1)
    return entry


def pair_again(name: str, entry: dict[str, Any]) -> None:
    """The paired differences for a model measured before the script computed them: its files judged again."""
    folder = WORK / name
    model = prepare(name, folder, entry["unseen"])
    reference = outputs(onnx.load(str(model.peer_source)), model.unseen, batch=model.batch)
    for target in [t for t in TARGETS if t in entry["cells"]]:
        judged: dict[str, Comparison] = {}
        for method in ("BEFORE", "AFTER", "NNCF"):
            path = folder / ("NNCF.onnx" if method == "NNCF" else f"{method}-{target}.onnx")
            if path.exists() and not entry["cells"][target][method].get("error"):
                judged[method] = judge(path, model, reference, target == "tensorrt")
                assert abs((judged[method].agreement or 0) - entry["cells"][target][method]["agreement"]) < 1e-9
        entry.setdefault("paired", {})[target] = paired(judged)
        print(f"{name} {target}: {entry['paired'][target]}", flush=True)


def _machine() -> str:
    info = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    model = next((line.split(":", 1)[1].strip() for line in info.splitlines() if line.startswith("Model name")), "?")
    flags = next((line.split(":", 1)[1].split() for line in info.splitlines() if line.startswith("Flags")), [])
    named = [f for f in ("avx512_vnni", "avx_vnni", "amx_tile", "amx_int8", "amx_bf16") if f in flags]
    return f"{model} (flags: {', '.join(named) or 'no VNNI, no AMX'}), {os.cpu_count()} cores"


def _figure(cell: dict[str, Any] | None) -> str:
    if not cell:
        return "not run"
    if cell.get("error"):
        return f"error: {str(cell['error']).replace('|', '/')}"
    low, high = cell["interval"] or (None, None)
    text = f"{100 * float(cell['agreement']):.1f} %"
    return text + (f" ({100 * low:.1f}-{100 * high:.1f})" if low is not None else "")


def _difference(found: list[float | None] | None) -> str:
    """A paired difference in points with its 95 % interval (points), or a dash."""
    if not found:
        return "–"
    point, low, high = found
    return f"{point:+.1f}" + (f" ({low:+.1f} to {high:+.1f})" if low is not None and high is not None else "")


def _float_layers(manifest: Path) -> str:
    """The type the layers INT8 leaves float were written in (int8.high_precision.dtype): fp16 where "INT8 with FP16
    elsewhere" was kept, fp32 where it was not (BEFORE decided that on the worst cosine for some models, a choice
    its measured steps do not list)."""
    if not manifest.exists():
        return "?"
    section = json.loads(manifest.read_text()).get("int8") or {}
    found = section.get("high_precision") or {}
    return str(found.get("dtype", "–"))


def _steps_line(recipe: dict[str, Any] | None) -> list[tuple[str, str, str, str]]:
    """(step, kept, change pp, interval) per measured step of a manifest's recipe."""
    if not recipe:
        return []
    rows = []
    baseline = None  # the figure of the file as it stood before the step: the last state kept
    for step in recipe.get("measured", []):
        if "kept" not in step:
            baseline = step.get("agreement", baseline)
            continue
        point = step.get("change_pp")
        if point is None and baseline is not None and step.get("agreement") is not None:
            # BEFORE's records carry the interval, not the point: the same paired change from the two figures
            point = 100 * (float(step["agreement"]) - float(baseline))
        if step.get("kept"):
            baseline = step.get("agreement", baseline)
        found = step.get("change_interval_pp") or {}
        interval = (f"{found['low']:+.1f} to {found['high']:+.1f} ({found.get('units', '?')} samples)"
                    if found.get("low") is not None else "–")
        rows.append((str(step.get("step")), "kept" if step.get("kept") else "dropped",
                     "–" if point is None else f"{point:+.1f}", interval))
    return rows


def write_page(results: dict[str, Any], machine: str, partial: bool) -> None:
    lines = ["# Results: INT8 decisions by expected value (issue #55, item 4)", "",
             f"**{DAY}**, `make int8-decisions` (`scripts/int8_decisions.py`). Machine: **{machine}**, shared "
             "with three other engineers' builds and tests and busy throughout: wall times below are not speeds. "
             "The accuracy figures do not depend on the load.", "",
             "Each model was quantized on a fixed calibration .npz (so optimize's held-out split applies) and every "
             "file scored on a disjoint unseen set against the FP32 model's own outputs, with the task measure "
             "trtpipe uses and its 95 % interval (in brackets). BEFORE: `trtpipe optimize --precision int8 --target "
             "T --calib calib.npz` at 2f2eca5 (before the step rule); AFTER: the same command on main (decisions by "
             "the paired point change; the commit each file was made at is in its manifest and the notes below); "
             "NNCF: `nncf.quantize` with its defaults; quantize_static: ONNX "
             "Runtime's QDQ per-channel MinMax, U8S8 for cpu, S8S8 symmetric for tensorrt. Files for tensorrt are "
             "judged with Q/DQ as float ops (TensorRT's arithmetic); NNCF makes one file (asymmetric U8 "
             "activations, for OpenVINO), judged on ONNX Runtime's integer kernels in the cpu table and as float "
             "Q/DQ in the tensorrt table (TensorRT itself would not take its zero points).", ""]
    if partial:
        lines += ["*Partial: the run is still going or was cut short; the models below are the ones finished.*", ""]
    lines += ["| model | kind | calibration / unseen samples | data | task measure |", "|---|---|---:|---|---|"]
    for name, entry in results.items():
        measure = next((c.get("measure") for cells in entry["cells"].values() for c in cells.values()
                        if c.get("measure")), "?")
        lines.append(f"| {name} | {entry['kind']} | {entry['calibration']} / {entry['unseen']} | {entry['data']} | "
                     f"{measure} |")
    missing = [name for name in MODELS if name not in results]
    if missing:
        lines.append(f"\nNot measured in this run: {', '.join(missing)} (the run's time on the shared machine ran "
                     "out before them; `scripts/int8_decisions.py NAME` measures one and adds it to the page).")
    lines += ["", "Sizes chosen for the time the run had on 2 busy cores: PP-OCRv4's text detector at 320x320 "
              "(packaged size 640x640), PicoDet's fixed 800x608 pages with 64 unseen (the others have 100 or more).",
              ""]
    for target in TARGETS:
        lines += [f"## Target `{target}` ({DAY})", "", "| model | task measure | N unseen | BEFORE | AFTER | NNCF | "
                  "quantize_static | AFTER − BEFORE, paired | AFTER − NNCF, paired |",
                  "|---|---|---:|---:|---:|---:|---:|---:|---:|"]
        for name, entry in results.items():
            cells = entry["cells"].get(target, {})
            measure = next((c.get("measure") for c in cells.values() if c.get("measure")), "?")
            pairs = (entry.get("paired") or {}).get(target, {})
            lines.append(f"| {name} | {measure} | {entry['unseen']} | "
                         + " | ".join(_figure(cells.get(m)) for m in METHODS) + " | "
                         + " | ".join(_difference(pairs.get(f"AFTER-{m}")) for m in ("BEFORE", "NNCF")) + " |")
        lines += ["", *_verdicts(results, target), ""]
    lines += [f"## Steps the recipes kept or dropped ({DAY})", "",
              "From each trtpipe manifest (`int8.recipe.measured`): the steps that were judged on optimize's "
              "held-out split, the decision and the paired change each made (percentage points of the task measure, "
              "95 % interval; BEFORE's records carry only the interval, so its point change is the difference of the "
              "two held-out figures it records). Steps a recipe runs without a judgement (equalization, depthwise "
              "scaling) are in `int8.recipe.steps`; *float layers* is the type the layers INT8 leaves float were "
              "written in (`int8.high_precision.dtype`: fp16 where INT8 with FP16 elsewhere was kept).", "",
              "| model | target | code | quality | steps run | float layers | judged step | decision | change pp | "
              "95 % interval |", "|---|---|---|---|---|---|---|---|---:|---|"]
    for name, entry in results.items():
        for target in TARGETS:
            for method in ("BEFORE", "AFTER"):
                recipe = entry["steps"].get(target, {}).get(method)
                if recipe is None:
                    error = entry["cells"].get(target, {}).get(method, {}).get("error")
                    lines.append(f"| {name} | {target} | {method} | – | – | – | {'error' if error else 'no record'} "
                                 "| – | – | – |")
                    continue
                run = ", ".join(recipe.get("steps", [])) or "–"
                floats = _float_layers(WORK / name / f"{method}-{target}.manifest.json")
                judged = _steps_line(recipe) or [("none judged", "–", "–", "–")]
                for step, kept, point, interval in judged:
                    lines.append(f"| {name} | {target} | {method} | {recipe.get('quality', '?')} | {run} | {floats} | "
                                 f"{step} | {kept} | {point} | {interval} |")
    lines.append("")
    kept = PAGE.read_text().split(NOTES, 1) if PAGE.exists() else []
    PAGE.write_text("\n".join(lines) + (NOTES + kept[1] if len(kept) == 2 else ""))


def _verdicts(results: dict[str, Any], target: str) -> list[str]:
    """Where AFTER is below BEFORE or below NNCF, said plainly (point figures; the intervals say how sure)."""
    out = []
    for name, entry in results.items():
        cells = entry["cells"].get(target, {})
        after = cells.get("AFTER", {})
        if after.get("error") or after.get("agreement") is None:
            out.append(f"- {name}: AFTER has no figure ({after.get('error', 'not run')}).")
            continue
        words = []
        pairs = (entry.get("paired") or {}).get(target, {})
        for other in ("BEFORE", "NNCF"):
            cell = cells.get(other, {})
            if cell.get("agreement") is None:
                continue
            diff = 100 * (float(after["agreement"]) - float(cell["agreement"]))
            found = pairs.get(f"AFTER-{other}")
            sure = ""
            if found and found[1] is not None and found[2] is not None:
                sure = (", outside the noise" if found[1] > 0 or found[2] < 0 else ", within the noise") + \
                    f" (paired 95 % interval {found[1]:+.1f} to {found[2]:+.1f})"
            if diff < 0:
                words.append(f"**below {other}** by {-diff:.1f} points{sure}")
            else:
                words.append(f"{'level with' if diff == 0 else 'above'} {other}"
                             + (f" by {diff:.1f} points" if diff else "") + sure)
        out.append(f"- {name}: AFTER is " + ", ".join(words) + ".")
    return out


def load_results() -> tuple[dict[str, Any], str]:
    """Every measured model (WORK/NAME/result.json; results.json from runs before those files), in the page's order,
    with paired differences judged afterwards (--pair) where its own lack them; and the machine line."""
    store = WORK / "results.json"
    saved = json.loads(store.read_text()) if store.exists() else {}
    found: dict[str, Any] = dict(saved.get("models", {}))
    for path in sorted(WORK.glob("*/result.json")):
        found[path.parent.name] = json.loads(path.read_text())
    pairs = json.loads((WORK / "paired.json").read_text()) if (WORK / "paired.json").exists() else {}
    for name, entry in found.items():
        if not entry.get("paired") and name in pairs:
            entry["paired"] = pairs[name]
    order = [name for name in MODELS if name in found] + [name for name in found if name not in MODELS]
    machine_file = WORK / "machine.txt"
    if not machine_file.exists():
        machine_file.write_text(saved.get("machine") or _machine())
    return {name: found[name] for name in order}, machine_file.read_text()


def main() -> int:
    global PAGE, WORK, DAY  # a script's settings, set once here from the command line
    parser = argparse.ArgumentParser(description="Issue #55's measurement: INT8 decisions before and after.")
    parser.add_argument("models", nargs="*", default=list(MODELS))
    parser.add_argument("--before", type=Path, default=Path("/work/wt-before"),
                        help="a checkout of the code before the step rule (2f2eca5)")
    parser.add_argument("--redo", action="store_true", help="run models already in the results again")
    parser.add_argument("--unseen", type=int, help="unseen samples per model instead of the defaults")
    parser.add_argument("--table", action="store_true", help="re-render the page from the results")
    parser.add_argument("--targets", default=",".join(TARGETS), help="comma-separated targets (default: both)")
    parser.add_argument("--jobs", type=int, default=1, help="optimize runs of one model side by side (default 1)")
    parser.add_argument("--timeout", type=int, default=OPTIMIZE_TIMEOUT_S, help="seconds one optimize run may take")
    parser.add_argument("--page", type=Path, default=PAGE, help="the results page to write (default: %(default)s)")
    parser.add_argument("--work", type=Path, default=WORK, help="where files and results go (default: %(default)s)")
    parser.add_argument("--day", default=DAY, help="the date the page names (default: %(default)s)")
    parser.add_argument("--pair", action="store_true", help="judge measured models' files again for the paired "
                        "differences, where their results lack them")
    args = parser.parse_args()
    PAGE, WORK, DAY = args.page, args.work, args.day
    WORK.mkdir(parents=True, exist_ok=True)
    results, machine = load_results()
    if args.pair:  # kept in a file of their own, so that a measuring run writing results meanwhile loses none
        pairs = WORK / "paired.json"
        found = json.loads(pairs.read_text()) if pairs.exists() else {}
        for name in args.models:
            if name in results and not results[name].get("paired") and name not in found:
                pair_again(name, results[name])
                found[name] = results[name]["paired"]
                pairs.write_text(json.dumps(found, indent=1) + "\n")
    elif not args.table:
        for name in args.models:
            if name in results and not args.redo:
                print(f"{name}: already measured (--redo to run again)", flush=True)
                continue
            # one file per model, so that two runs measuring different models never overwrite each other's
            entry = run_model(name, args.before.resolve(), args.unseen, targets=tuple(args.targets.split(",")),
                              jobs=args.jobs, timeout=args.timeout)
            (WORK / name / "result.json").write_text(json.dumps(entry, indent=1) + "\n")
            results, machine = load_results()
            write_page(results, machine, partial=True)
        results, machine = load_results()
    write_page(results, machine, partial=False)
    print(PAGE.read_text())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
