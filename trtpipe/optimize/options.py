"""What optimize can be told: precision and target, graph passes, calibration and evaluation data, the
accuracy budget and image preprocessing. One declaration feeds `trtpipe optimize`, the API and [[variants]]."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from trtpipe.errors import BadInput
from trtpipe.models.options import POSTPROCESS_HELP, TASK_HELP
from trtpipe.optimize.passes.registry import graph_pass_names, parse_passes
from trtpipe.options import Options, option
from trtpipe.shapes import (
    format_input_dtypes,
    format_input_ranges,
    format_input_shapes,
    parse_floats,
    parse_input_dtypes,
    parse_input_ranges,
    parse_input_shapes,
)
from trtpipe.vocab import CalibMethod, ChannelOrder, CpuClass, Precision, Quality, Target, Task

DATA_HELP = ("digits, photos (packaged natural photos: pip install 'trtpipe[pretrained]'), FILE.npy/.npz, an image "
             "folder, or random (calibration only: speed tests)")


def _format_floats(values: tuple[float, ...]) -> str:
    return ",".join(f"{v:g}" for v in values)


@dataclass
class OptimizeOptions(Options):
    precision: Precision = option(Precision.FP32, "Precision written into the graph.", type=Precision,
                                  choices=Precision.optimize_choices)
    target: Target | None = option(None, "INT8 flavour: tensorrt (S8S8 symmetric), cpu (U8S8, for ONNX "
                                   "Runtime) or openvino (U8S8 into convolutions, zero points 0 elsewhere). Default: "
                                   "tensorrt with a GPU, else cpu.", type=Target)
    cpu_class: CpuClass | None = option(None, "INT8 for cpu and openvino: the CPU class the artifact will run on, "
                                        "which chooses its weights: 7-bit for portable and avx2 (no VNNI: 8-bit "
                                        "weights saturate there), 8-bit for avx-vnni, avx512-vnni and amx. Recorded "
                                        "in the manifest; load, bench and serve check it. Default: this machine's.",
                                        type=CpuClass)
    passes: tuple[str, ...] = option(("fuse",), "Graph passes run before the precision pass, in order, comma-"
                                     "separated, or 'none'.", parse=parse_passes, format=",".join, metavar="LIST",
                                     choices=graph_pass_names)
    task: Task | None = option(None, TASK_HELP.replace("Default:", "Default: the source's manifest, else"),
                               type=Task, choices=Task.every)
    postprocess: str | None = option(None, POSTPROCESS_HELP, metavar="MODULE:FN")
    input_shape: dict[str, tuple[int, ...]] | None = option(
        None, "Input shapes to calibrate and check at, filling the graph's dynamic axes: 1x3x224x224 (the only or "
        "first input) or image:1x3x640x640,scale:1x2. The written graph keeps its dynamic axes.",
        parse=parse_input_shapes, format=format_input_shapes, metavar="[NAME:]SHAPE,...")
    input_dtype: dict[str, str] | None = option(
        None, "Input dtypes, checked against the graph's: uint8 or image:uint8,scale:float32.",
        parse=parse_input_dtypes, format=format_input_dtypes, metavar="[NAME:]DTYPE,...")
    input_range: dict[str, tuple[float, float]] | None = option(
        None, "The range each input's values live in, for --calib random and random probes: 0..255 or "
        "image:0..255,scale:0.5..2 (default: the source's manifest, else uint8/int8's full range, else N(0, 1)).",
        parse=parse_input_ranges, format=format_input_ranges, metavar="[NAME:]LOW..HIGH,...")
    keep_io_fp32: bool = option(True, "FP16, and INT8 with --high-precision fp16: keep graph inputs and "
                                      "outputs FP32 (--no-keep-io-fp32: FP16 inputs and outputs, for a caller "
                                      "that feeds FP16 on the GPU).", type=bool)
    dynamic_batch: bool = option(False, "Make a static batch-1 ONNX take any batch first, where its graph allows "
                                 "(ONNX shape inference and a batch-2 run decide; one line says why not).",
                                 type=bool)
    calib: str | None = option(None, f"Calibration data: {DATA_HELP}.", metavar="DATA")
    calib_method: CalibMethod = option(CalibMethod.MINMAX, "How INT8 activation ranges are chosen.",
                                       type=CalibMethod)
    calib_samples: int | None = option(None, "Use the first N calibration samples (default: all, or for INT8 the "
                                       "first ones that keep a large model near its 5-minute time budget, said in "
                                       "one line). A count given here is always used.", type=int, minimum=1,
                                       metavar="N")
    calib_cache: Path | None = option(None, "Calibration range cache (default: OUT.calib.json).", type=Path)
    eval: str | None = option(None, "Labelled data to measure accuracy on: digits, FILE.npz with labels, or a folder "
                              "with one subfolder per class. Default: a seeded share of --calib held out from "
                              "calibration (new draws of photos, packaged:NAME and random).", metavar="DATA")
    quality: Quality | None = option(None, "INT8 recipe: fast (placement rules, depthwise scaling), balanced (+ "
                                     "equalization, bias correction), best (+ AdaRound: minutes). Default: balanced, "
                                     "or fast when the calibration data is too few for it.", type=Quality)
    bias_correction: bool = option(False, "INT8: remove, layer by layer, the output mean shift quantization causes "
                                   "(empirical bias correction on 64 calibration samples).", type=bool)
    adaround: bool = option(False, "INT8: learn each weight's rounding, layer by layer, so layer outputs match FP32 "
                            "(AdaRound on 64 calibration samples; minutes on a CPU).", type=bool)
    adaround_iterations: int = option(100, "AdaRound: optimisation steps per layer (more: slower, closer to FP32).",
                                      type=int, minimum=1, metavar="N")
    high_precision: Precision | None = option(
        None, "INT8: the precision of the layers left unquantized (SiLU, HardSwish, an SE block's Sigmoid and Mul, "
        "Resize): fp16 (tensorrt only: they and the Q/DQ scales around them in FP16; overflow-prone nodes and "
        "post-processing stay FP32) or fp32. Default: fp16 for --target tensorrt, fp32 for cpu and openvino.",
        type=Precision,
        choices=(Precision.FP32.value, Precision.FP16.value))
    max_accuracy_drop: float | None = option(None, "Points of the task's measure vs FP32 the result may lose "
                                             "(top-1 agreement, mAP@0.5, F1, pixel agreement), judged on the 95% "
                                             "interval of the drop: within where its upper bound is; over where its "
                                             "lower bound is beyond (the most sensitive layers then fall back to FP32 "
                                             "until it holds); else too few samples to decide, said with about how "
                                             "many would.", type=float, minimum=0, metavar="PP")
    max_fp32_nodes: int | None = option(None, "Most nodes the accuracy budget may keep in FP32 (default: half of the "
                                        "quantised nodes).", type=int, minimum=0, metavar="N")
    resize: int | None = option(None, "Image folders: short side before the center crop.", type=int, minimum=1)
    mean: tuple[float, ...] | None = option(None, "Image folders: per-channel mean, e.g. 0.485,0.456,0.406.",
                                            parse=parse_floats, format=_format_floats, metavar="LIST")
    std: tuple[float, ...] | None = option(None, "Image folders: per-channel std, e.g. 0.229,0.224,0.225.",
                                           parse=parse_floats, format=_format_floats, metavar="LIST")
    channel_order: ChannelOrder = option(ChannelOrder.RGB, "Image folders: channel order the model expects.",
                                         type=ChannelOrder)

    def validate(self) -> None:
        """Refuse combinations that cannot work, before any data is read."""
        if self.precision is Precision.INT8 and not self.calib:  # FP16's range check has defaults (optimize.stage)
            raise BadInput("INT8 calibration needs --calib DATA: 'digits', a .npy/.npz file, a folder of images, or "
                           "'random' (speed tests only).")
        if self.high_precision is Precision.FP16 and self.target not in (None, Target.TENSORRT):
            raise BadInput(f"--high-precision fp16 is for --target tensorrt, not {self.target}: the CPU runtimes run "
                           "INT8's float layers in FP32 (ONNX Runtime's CPU provider has few FP16 kernels). Drop it, "
                           "or give --target tensorrt.")
        if self.max_accuracy_drop is not None and not self.eval and not self.calib:
            raise BadInput("--max-accuracy-drop needs data to measure accuracy on: --eval DATA (labelled), or --calib "
                           "DATA (a share of it is held out to judge).")
