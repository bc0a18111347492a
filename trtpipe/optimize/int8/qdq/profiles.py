"""What INT8 looks like for each deployment target.

- tensorrt: TensorRT's explicit-quantization placement (developer guide, "Q/DQ Layer-Placement
  Recommendations"; NVIDIA ModelOpt's ONNX quantizer does the same): signed symmetric INT8 activations and
  per-channel symmetric weights (zero points 0), Q/DQ on the *inputs* of weighted and pooling ops and never on
  their outputs, no bias quantization (TensorRT's DequantizeLayer takes int8/fp8/int4 only, not int32), and on a
  residual Add only the branch that is not a convolution's output, so TensorRT fuses the Add into that
  convolution's epilogue. TensorRT accumulates in int32 without saturation, so its accuracy is measured by
  running Q/DQ as float ops (ONNX Runtime with graph optimisation off), never through CPU integer kernels.
- cpu: unsigned activations with signed weights (U8S8), which x86 CPUs run fast. Without VNNI, x86's int8
  dot product (vpmaddubsw) saturates at 16 bits when weights use the full 8-bit range, so weights get 7 bits
  (reduce_range) there; the report says which was chosen and why. The CPU class the artifact is made for
  (``--cpu-class``, default the building machine's) decides, not the building machine: an 8-bit-weight artifact is
  recorded unsafe on the classes without VNNI (:func:`unsafe_classes`). ONNX Runtime and OpenVINO both fuse this
  placement into their integer kernels, so one recipe serves both CPU runtimes: OpenVINO runs it on the same
  kernels as NNCF's own placement, TensorRT's placement ran slower there, and NNCF's signed activations gained no
  speed and cost accuracy, so neither was adopted; graph outputs are left in float (quantize.py).
  Measured: docs/results/int8-design.md, 'Profiles: one placement for both CPU runtimes'.
- openvino: the cpu placement, with zero points 0 wherever no convolution reads the tensor (zero_points.py) and
  Q/DQ around upsampling (Resize) too, which is how OpenVINO runs an FPN's joins in int8. The two CPU runtimes want
  different things there: OpenVINO runs a zero point ahead of an elementwise join as a reference Convert plus a
  Subtract, and ONNX Runtime on x86 fuses a convolution into QLinearConv only when its input and output are uint8,
  so the openvino flavour is faster on OpenVINO and slower on ONNX Runtime than cpu's, where convolutions whose
  outputs only joins read fall back to float (measured: docs/results/int8-design.md, 'Profiles: one placement for
  both CPU runtimes'). A Concat's inputs take one scale and its output no Q/DQ of its own where OpenVINO allows it
  (concat_in_place.py): with the quantizer's own scales, OpenVINO requantized each input of DBNet's FPN fusion
  twice, where NNCF's graph does not. ONNX Runtime fuses a convolution into QLinearConv only with a Q/DQ right
  before it, so there the convolutions after such Concats run in float (measured: docs/results/int8-design.md,
  'Zero points and Concats in place'): the openvino file is the OpenVINO one.
- cpu also quantizes the input of a HardSwish a convolution writes (its pre-activation, over [-3, max]:
  saturation.py), since ONNX Runtime has no integer HardSwish and runs a convolution in integer only with a uint8
  output; the int8 pass keeps as many of them as measure within a point of float pre-activations
  (preactivations.py). OpenVINO and TensorRT fuse the HardSwish into the convolution with a float output, so their
  flavours never quantize it.
- cpu quantizes the Sigmoid and Mul of a SiLU a convolution writes (YOLOX, YOLOv5/v8, EfficientNet), which ONNX
  Runtime runs as QLinearSigmoid and QLinearMul, for the same reason: with the SiLU float, the convolution before it
  ran in float between its Q/DQ, and a YOLOX detector's INT8 file ran at 0.82x its FP32 file; with it quantized, at
  about 2.5x (placement.py, 'outside-swish'; docs/results/int8-design.md, 'SiLU on the cpu target').
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from trtpipe.artifact.records.sections import CpuRecord
from trtpipe.errors import BadInput
from trtpipe.vocab import CpuClass, Precision, Target


@dataclass(frozen=True)
class QuantProfile:
    target: Target
    signed_activations: bool
    symmetric_activations: bool
    reduce_range: bool
    reduce_range_reason: str
    op_types: tuple[str, ...] | None  # None: ONNX Runtime's default set
    # How the result must run to be measured faithfully: every op as written, Q/DQ as float ops (TensorRT's
    # arithmetic), or on the reference runtime's own (integer) kernels.
    measured_as_written: bool
    extra_options: dict[str, Any] = field(default_factory=dict)
    residual_branch_only: bool = False  # on an Add fed by a weighted op, drop that input's Q/DQ
    shared_concat_scales: bool = False  # every input of a quantized Concat takes one range (placement.py)
    zero_point_free_joins: bool = False  # activations no weighted op reads get zero point 0 (zero_points.py)
    concat_in_place: bool = False  # one scale into each quantized Concat, none after it (concat_in_place.py)
    integer_hardswish: bool = False  # HardSwish between uint8 Q/DQ as QLinearAdd/QLinearMul (integer_hardswish.py)
    integer_gains: bool = False  # scale_depthwise's gains, equalize's ReLU6 bounds in integer ops (integer_gains.py)
    cpu_class: CpuClass | None = None  # cpu and openvino: the CPU class its weights are chosen for

    @property
    def int8_outputs(self) -> bool:
        """Whether a quantized node writes its output through Q/DQ too (ONNX Runtime's QLinearConv needs it;
        TensorRT's placement never does)."""
        return not self.extra_options.get("OpTypesToExcludeOutputQuantization")

    def to_dict(self) -> dict[str, Any]:
        activations = "int8 symmetric" if self.signed_activations else "uint8"
        if self.zero_point_free_joins:
            activations += " into convolutions, int8 with zero point 0 elsewhere"
        return {"target": self.target, "activations": activations,
                "cpu_class": None if self.cpu_class is None else str(self.cpu_class),
                "weights": "int8 symmetric per-channel" + (" (7-bit)" if self.reduce_range else ""),
                "reduce_range": self.reduce_range, "reduce_range_reason": self.reduce_range_reason,
                "accuracy_measured_with": "Q/DQ as float ops (TensorRT arithmetic)"
                if self.measured_as_written else "ONNX Runtime CPU integer kernels"}


# Weighted ops (inputs quantized, TensorRT picks INT8 kernels), residual Adds and the ops TensorRT propagates
# scales through.
WEIGHTED_OPS = ("Conv", "ConvTranspose", "Gemm", "MatMul")
TENSORRT_OP_TYPES = (*WEIGHTED_OPS, "Add", "AveragePool", "GlobalAveragePool", "MaxPool", "Concat")
# The CPU's: the same joins, the activations ONNX Runtime folds into a QLinearConv's output, and HardSwish, whose
# input is the pre-activation QLinearConv must write in uint8 (preactivations.py decides whether it stays so); and
# SiLU's Sigmoid and Mul, which ONNX Runtime runs as QLinearSigmoid and QLinearMul, so that the convolution before
# them writes uint8 (placement.py's 'outside-swish' keeps every other Sigmoid and Mul float); and Split, whose
# outputs take its input's scale (ONNX Runtime's QDQSplit), so a multi-scale block's branches stay uint8: with it
# float, Res2Net-50's file dequantized before each of its 15 Splits and quantized all 60 outputs again, and its
# AveragePools (whose input a Split writes) ran in float: 0.91x quantize_static's file (95 % 0.89-0.92x, model-zoo
# sweep of 2026-12-01); and LeakyRelu, which ONNX Runtime runs as QLinearLeakyRelu, so that the convolution before
# it writes uint8: with it float, 38 of CSPResNet-50's 56 convolutions ran in float between their Q/DQ and its file
# ran at 0.60x its FP32 file and 0.21x quantize_static's (95 % 0.21-0.23x, 2026-12-01); and Slice, whose output
# takes its input's scale like Split's: a dual-path block slices a convolution's output into its residual and dense
# parts, and with Slice float, 26 of DPN-68's 72 convolutions wrote float and its 22 Concats ran in float (its INT8
# file was slower than FP32, where quantize_static's ran 1.27x); and Transpose, on its input's scale too, except on
# the way to a Softmax (placement.py's 'softmax-transpose'): ConvNeXt's channels-last LayerNorm sits between two
# Transposes, and with them float the depthwise convolution before each wrote float.
CPU_OP_TYPES = (*TENSORRT_OP_TYPES, "Relu", "Clip", "HardSwish", "Sigmoid", "Mul", "Split", "LeakyRelu", "Slice",
                "Transpose")
# OpenVINO's: upsampling too, so an FPN's Resize runs on int8 before its join rather than in float after it.
OPENVINO_OP_TYPES = (*TENSORRT_OP_TYPES, "Relu", "Clip", "Resize")


CPU_TARGETS = (Target.CPU, Target.OPENVINO)  # the INT8 flavours x86 integer kernels run, made for a CPU class


def profile_for(target: Target, cpu_class: CpuClass | None = None) -> QuantProfile:
    """The INT8 profile of ``target``; for cpu and openvino, for the CPU class ``cpu_class`` (None: this machine's),
    whose int8 arithmetic decides the weights' bits. TensorRT's has no CPU class."""
    if target is Target.TENSORRT:
        return QuantProfile(
            target, signed_activations=True, symmetric_activations=True, reduce_range=False,
            reduce_range_reason="TensorRT accumulates in int32: full 8-bit weights",
            op_types=TENSORRT_OP_TYPES,
            measured_as_written=True,
            extra_options={"ActivationSymmetric": True, "WeightSymmetric": True, "QuantizeBias": False,
                           "OpTypesToExcludeOutputQuantization": list(TENSORRT_OP_TYPES),
                           # ONNX Runtime writes Q/DQ on a MaxPool's or AveragePool's input only when that input
                           # is quantized already, which in this placement (no Q/DQ on a convolution's output) it
                           # never is: without this, every pool stayed float and TensorRT ran the convolution
                           # before it with a float output. ModelOpt sets the same for TensorRT (trt_guided_options
                           # in modelopt/onnx/quantization/ort_utils.py).
                           "ForceQuantizeNoInputCheck": True},
            residual_branch_only=True, shared_concat_scales=True,
        )
    if target in CPU_TARGETS:
        if cpu_class is None:
            from trtpipe.hardware import cpu_class as this_cpu

            cpu_class = this_cpu()
        vnni = cpu_class.vnni
        openvino = target is Target.OPENVINO
        return QuantProfile(
            target, signed_activations=False, symmetric_activations=False, reduce_range=not vnni,
            reduce_range_reason=f"made for {cpu_class}, which has VNNI: full 8-bit weights" if vnni else
            f"made for {cpu_class}, which lacks VNNI: 7-bit weights avoid 16-bit saturation in int8 dot products"
            + "; depthwise convolutions keep 8 bits (their kernels widen to 16 bits before multiplying)",
            op_types=OPENVINO_OP_TYPES if openvino else CPU_OP_TYPES, measured_as_written=False,
            extra_options={"ActivationSymmetric": False, "WeightSymmetric": True},
            zero_point_free_joins=openvino, concat_in_place=openvino, integer_hardswish=not openvino,
            integer_gains=not openvino,
            cpu_class=cpu_class,
        )
    raise BadInput(f"No INT8 profile for target '{target}'.")


def unsafe_classes(profile: QuantProfile) -> tuple[CpuClass, ...]:
    """The CPU classes an artifact of ``profile`` is known unsafe on without measuring it there: full 8-bit weights
    on a class without VNNI, whose u8 x s8 dot product (vpmaddubsw) adds two products into 16 bits and saturates
    (255 x 127 x 2 = 64770 > 32767), so outputs can be far off. 7-bit weights (at most 64: 255 x 64 x 2 = 32640)
    cannot saturate there."""
    if profile.cpu_class is None or profile.reduce_range:
        return ()
    return tuple(c for c in CpuClass if not c.vnni)


def cpu_record(profile: QuantProfile, measured_on: CpuClass, figure: dict[str, Any]) -> CpuRecord | None:
    """What the manifest records of a CPU-target profile: the class it was made for, the class its accuracy was
    measured on with ``figure``, and the classes it is known unsafe on; None for TensorRT's (no CPU class)."""
    if profile.cpu_class is None:
        return None
    return CpuRecord(profile.cpu_class, {measured_on: dict(figure)}, unsafe_classes(profile))


# What INT8 leaves float runs in this precision unless --high-precision says otherwise. tensorrt: FP16, as ModelOpt's
# default high_precision_dtype; a strongly typed network would otherwise run every unquantized layer in FP32, since
# ONNX Runtime's quantizer writes FP32 scales (high_precision.py). cpu: FP32, what the CPU runtimes compute in.
DEFAULT_HIGH_PRECISION = {Target.TENSORRT: Precision.FP16, Target.CPU: Precision.FP32, Target.OPENVINO: Precision.FP32}


def high_precision_for(target: Target, asked: Precision | None) -> Precision:
    """The precision of the layers INT8 leaves float: ``asked``, else the target's default; FP16 on cpu is refused
    (OptimizeOptions.validate refuses it where the target is given; here the target may have been the default)."""
    chosen = asked or DEFAULT_HIGH_PRECISION[target]
    if chosen is Precision.FP16 and target is not Target.TENSORRT:
        raise BadInput(f"--high-precision fp16 is for --target tensorrt, and the target is {target} (the default "
                       "without a CUDA GPU): give --target tensorrt, or drop --high-precision.")
    return chosen
