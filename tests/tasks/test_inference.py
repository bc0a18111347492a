"""A task is inferred only where the outputs show it, and always named with its decoder: a detector's head must
decode to plausible boxes (else generic, with the line naming --task and --postprocess), YOLOX's raw grid head is
decoded on its grids, and a CTC recognizer's per-timestep scores get the sequence measure (exact lines and
characters, each with its interval)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from trtpipe.comparison import compare
from trtpipe.errors import BadInput
from trtpipe.tasks import infer_task
from trtpipe.tasks.detect import decode_yolov5, decode_yolox, read_as, yolox_decoder
from trtpipe.tasks.sequence import edit_distance, greedy
from trtpipe.vocab import Task


def test_shapes_alone_choose_classify_and_dense_and_say_so() -> None:
    classify = infer_task([np.zeros((8, 1000))])
    assert classify.task is Task.CLASSIFY and "one output [8, 1000], read as class scores" in classify.line()
    assert infer_task([np.zeros((2, 1, 8, 8))]).task is Task.DENSE
    two = infer_task([np.zeros((1, 84, 8400)), np.zeros((1, 32, 16, 16))])  # two heads: the user says which
    assert two.task is Task.GENERIC and "--task" in two.line() and "--postprocess" in two.line()
    assert infer_task([np.zeros((4, 3, 32))]).task is Task.GENERIC


def _yolox_head(cells: dict[int, tuple[float, float, float, float, float, float]], anchors: int = 84) -> np.ndarray:
    """A raw YOLOX head [1, anchors, 6] (one class) for a 64x64 input (strides 8/16/32: 64 + 16 + 4 cells): the
    given anchors' (x offset, y offset, log w, log h in strides, objectness, class score), the rest faint boxes."""
    head = np.zeros((1, anchors, 6), np.float32)
    for anchor, row in cells.items():
        head[0, anchor] = row
    return head


def test_a_yolox_grid_head_is_decoded_on_its_grids_and_named() -> None:
    """Stride-8 cell at row 2, column 3 (anchor 2 * 8 + 3 = 19) with offsets (0.5, 0.25) and sizes exp(log 2) and
    exp(log 3) strides: centre ((3 + 0.5) * 8, (2 + 0.25) * 8) = (28, 18), size 16 x 24: the box (20, 6)-(36, 30).
    YOLOv5's reading of the same numbers is a box 0.69 x 1.1 px: implausible, so not chosen."""
    head = _yolox_head({19: (0.5, 0.25, np.log(2), np.log(3), 0.9, 0.8),
                        64 + 5: (0.0, 0.0, np.log(1.5), np.log(1.5), 0.6, 0.7)})  # stride 16, row 1, col 1
    (found,) = decode_yolox([head])
    np.testing.assert_allclose(found.boxes[0], [20, 6, 36, 30], atol=1e-5)
    assert found.scores[0] == pytest.approx(0.72)
    np.testing.assert_allclose(found.boxes[1], [4, 4, 28, 28], atol=1e-5)  # centre (16, 16), 24 px a side
    (same,) = yolox_decoder(64, 64)([head])
    np.testing.assert_array_equal(same.boxes, found.boxes)
    (misread,) = decode_yolov5([head])
    assert misread.boxes[0, 2] - misread.boxes[0, 0] < 1  # what the yolov5 decoder made of it
    inference = infer_task([head])
    assert inference.task is Task.DETECT and inference.decoder == "yolox"
    assert "decoded as yolox" in inference.line() and "not yolov5" in inference.line()
    moved = head.copy()
    moved[0, 64 + 5, 0] = 1.0  # the second box shifts a whole stride (16 px) right
    result = compare(head, moved)
    # One class, two boxes: the first matched, the shifted one (IoU 8 x 24 / (2 x 576 - 192) = 0.2) not: AP 1/2.
    assert result.task is Task.DETECT and result.agreement == pytest.approx(0.5)
    assert result.inference is not None and result.inference.startswith("Task: detect, decoded as yolox")
    assert compare(head, head).agreement == 1.0
    # Given the task, the decoder is still chosen by the boxes, and named.
    given = compare(head, head, task=Task.DETECT)
    assert given.agreement == 1.0 and given.inference is not None and "decoded as yolox" in given.inference


def test_a_yolox_head_at_a_known_non_square_size() -> None:
    anchors = (32 // 8) * (64 // 8) + (32 // 16) * (64 // 16) + (32 // 32) * (64 // 32)  # 32 + 8 + 2
    head = _yolox_head({9: (0.0, 0.0, 0.0, 0.0, 1.0, 1.0)}, anchors)  # stride 8, row 1, col 1: centre (8, 8)
    assert not read_as("yolox", [head]).plausible  # 42 anchors are no square input's grids
    assert "not those of a square input" in read_as("yolox", [head]).evidence
    (found,) = yolox_decoder(32, 64)([head])
    np.testing.assert_allclose(found.boxes[0], [4, 4, 12, 12])
    assert infer_task([head], image_size=(32, 64)).decoder == "yolox"


def _implausible_detector(path: Path) -> Path:
    """A graph whose one output is shaped as a YOLO head, [N, 6, 200], but holds sigmoids of the input everywhere:
    every decoder reads boxes under a pixel."""
    node = [helper.make_node("Sigmoid", ["x"], ["s"]), helper.make_node("Tile", ["s", "reps"], ["out"])]
    graph = helper.make_graph(node, "faint", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 6, 20])],
                              [helper.make_tensor_value_info("out", TensorProto.FLOAT, ["N", 6, 200])],
                              [helper.make_tensor("reps", TensorProto.INT64, [3], [1, 1, 10])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(model)
    onnx.save(model, path)
    return path


def test_a_head_no_decoder_reads_plausibly_is_generic_with_the_line(tmp_path: Path, run_cli) -> None:  # type: ignore[no-untyped-def]
    import onnxruntime as ort

    path = _implausible_detector(tmp_path / "faint.onnx")
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    outputs = session.run(None, {"x": np.random.default_rng(0).standard_normal((4, 6, 20)).astype(np.float32)})
    inference = infer_task(outputs)
    assert inference.task is Task.GENERIC and inference.decoder is None
    line = inference.line()
    assert "could not recognise the detector's head" in line and "yolov8: its best boxes" in line
    assert "--task" in line and "--postprocess MODULE:FN" in line and "\n" not in line
    result = compare(outputs, outputs)
    assert result.task is Task.GENERIC and result.agreement is None and result.inference == line
    # Asked for as a detector, its measure names what it could not read rather than print a figure of it.
    asked = compare(outputs, outputs, task=Task.DETECT)
    assert asked.agreement is None and asked.note is not None and "--postprocess" in asked.note
    # optimize says it in one line, and refuses --task detect with the fix.
    written = run_cli("optimize", path, "-o", tmp_path / "out.onnx", "--precision", "fp16",
                      "--input-shape", "2x6x20")
    assert written.exit_code == 0, written.output
    assert "Task: generic (inferred: could not recognise the detector's head" in " ".join(written.output.split())
    refused = run_cli("optimize", path, "-o", tmp_path / "out2.onnx", "--precision", "fp16", "--input-shape",
                      "2x6x20", "--task", "detect")
    assert refused.exit_code != 0 and "give --postprocess MODULE:FN" in " ".join(refused.output.split())


def test_ctc_greedy_decoding_and_both_figures_by_hand() -> None:
    """Blank 0. Line 1 reads (1, 1, 2) in both; line 2 reads (3, 4) in FP32 and (3, 5) in the candidate: one of two
    characters differs. Exact lines 1 of 2; characters (3 + 1) of (3 + 2) = 80 %."""
    best = np.array([[0, 1, 1, 0, 1, 2], [3, 3, 0, 4, 0, 0]])
    candidate_best = np.array([[1, 0, 1, 2, 2, 0], [0, 3, 0, 5, 5, 0]])
    scores, candidate = np.eye(6)[best], np.eye(6)[candidate_best]  # one-hot probabilities [2, 6, 6]
    scores[..., 0] += 0.5  # ... and the blank a little likelier where it is not the best, as a real CTC head's
    assert greedy(scores, 0) == [(1, 1, 2), (3, 4)]
    assert edit_distance((3, 4), (3, 5)) == 1 and edit_distance((), (1, 2)) == 2 and edit_distance((1, 2), (2,)) == 1
    result = compare(scores, candidate, task=Task.SEQUENCE)
    assert result.task is Task.SEQUENCE and result.agreement_name == "exact-line agreement"
    assert result.agreement == pytest.approx(0.5) and result.figures["char_agreement"] == pytest.approx(0.8)
    assert result.agreement_interval is not None and result.agreement_interval.contains(0.5)
    characters = result.figure_intervals["char_agreement"]
    assert characters.low < 0.8 <= characters.high and characters.units == 2
    assert "per-character agreement 80.00% (95% CI" in result.line()
    with pytest.raises(BadInput, match="reads no labels"):
        compare(scores, candidate, np.zeros(2), task=Task.SEQUENCE)


def test_a_ctc_head_of_logits_with_the_blank_last_is_inferred() -> None:
    rng = np.random.default_rng(0)
    logits = rng.standard_normal((3, 30, 40))
    logits[:, ::2, 39] += 8  # the blank (last) wins every other timestep
    characters = rng.integers(0, 39, size=(3, 15))
    logits[:, 1::2][np.arange(3)[:, None], np.arange(15), characters] += 8
    inference = infer_task([logits])
    assert inference.task is Task.SEQUENCE and "class 39 (the CTC blank)" in inference.line()
    assert compare(logits, logits).agreement == 1.0
    # Rows of a box head (x, y, w, h, scores...) put one column first at most anchors, and one other column first
    # at the rest: no blank with characters between, so not a recognizer.
    boxes = np.zeros((1, 30, 40))
    boxes[0, :, 0], boxes[0, ::3, 1] = 100.0, 200.0
    assert infer_task([boxes]).task is Task.GENERIC


RECOGNIZER = importlib.util.find_spec("rapidocr_onnxruntime")


@pytest.mark.skipif(RECOGNIZER is None, reason="rapidocr-onnxruntime is not installed (make install installs it)")
def test_the_pp_ocr_recognizer_is_a_sequence_model_not_a_detector() -> None:
    """PP-OCRv4's text recognizer (output [N, 40, 6625] of per-timestep character probabilities) reading rendered
    lines: inferred as a CTC recognizer, FP32 against itself 100 % on both figures with intervals, and a candidate
    whose every line loses its last character keeps most characters but no exact line."""
    import onnxruntime as ort
    from PIL import Image, ImageDraw

    from trtpipe.models.packaged import _font

    assert RECOGNIZER is not None and RECOGNIZER.origin is not None
    path = next((Path(RECOGNIZER.origin).parent / "models").glob("*rec*.onnx"))
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    lines = []
    for text in ("the model 123", "calibration", "latency 45 ms", "engine"):
        image = Image.new("RGB", (320, 48), (255, 255, 255))
        ImageDraw.Draw(image).text((4, 8), text, fill=(0, 0, 0), font=_font(26))
        lines.append((np.asarray(image, np.float32).transpose(2, 0, 1) / 255 - 0.5) / 0.5)
    (scores,) = session.run(None, {session.get_inputs()[0].name: np.stack(lines)})
    inference = infer_task([scores])
    assert inference.task is Task.SEQUENCE and "class 0 (the CTC blank)" in inference.line()
    same = compare(scores, scores)
    assert same.task is Task.SEQUENCE and same.agreement == 1.0 and same.figures["char_agreement"] == 1.0
    assert same.agreement_interval is not None and same.agreement_interval.low < 1.0
    read = greedy(scores, 0)
    assert all(len(line) >= 5 for line in read)  # it reads the lines
    shortened = scores.copy()
    for index, best in enumerate(scores.argmax(-1)):
        last = int(np.flatnonzero(best != 0)[-1])  # the last character's run of timesteps ends here...
        while last > 0 and best[last - 1] == best[last]:
            last -= 1  # ... and starts here
        shortened[index, last:] = np.eye(scores.shape[2])[0]  # the blank from there on
    result = compare(scores, shortened)
    assert result.agreement == 0.0 and 0.7 < result.figures["char_agreement"] < 1.0


def test_a_time_major_recognizer_is_read_with_its_timesteps_and_named_in_its_own_layout() -> None:
    """Logits [T, N, C] arrive samples first ([N, T, C], joined on their batch axis); the line counts the timesteps,
    not the samples, and shows the model's own layout."""
    rng = np.random.default_rng(0)
    scores = rng.standard_normal((8, 20, 37))
    scores[..., 0] += 2.5  # the blank leads at about half the timesteps
    inference = infer_task([scores], batch_axes=[1])
    assert inference.task is Task.SEQUENCE
    assert inference.reason.startswith("output [20, 8, 37] (batch on axis 1) holds logits over 37 classes at each "
                                       "of 20 timesteps")


def test_a_first_output_without_a_batch_axis_names_no_task() -> None:
    inference = infer_task([np.zeros((5, 4)), np.zeros((8, 10))], batch_axes=[None, 0])
    assert inference.task is Task.GENERIC and "the first output has no batch axis" in inference.reason
