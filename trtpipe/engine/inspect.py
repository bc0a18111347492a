"""``trtpipe inspect``: an engine's layers as a table: what TensorRT fused, which ONNX nodes each layer runs, in
which precision and tensor formats, with which tactic.

Two sources, one table. **Layer information JSON** (what ``trtpipe build`` writes beside every engine as
``ENGINE.layers.json``, or what ``trtexec --exportLayerInfo=FILE --profilingVerbosity=detailed`` saves) is read
anywhere, without TensorRT; both TensorRT 10.x (``Format/Datatype``) and 11.x (``Format`` + ``Datatype``) layouts
are read by :mod:`trtpipe.engine.layers`. An **engine file** is deserialized with TensorRT and asked for the same
JSON through its engine inspector (at the profile's opt shapes where the sidecar records them, so formats are
known); that needs TensorRT and a GPU, imported when the command runs.

Deserializing an engine runs what is in it: NVIDIA's security guidance ("Engine Deserialization and the Trust
Boundary", https://docs.nvidia.com/deeplearning/tensorrt/latest/reference/security.html) says to deserialize only
engines you built yourself or received over a trusted, authenticated channel. So an engine is opened only when
its trtpipe sidecar is there and its SHA-256 matches the engine (trtpipe built it: the same check ``trtpipe.load``
makes), or when the user says ``--trust-engine``. A sidecar proves the pair was written together, not who wrote
it: an engine from elsewhere, with or without a sidecar, is the user's to vouch for.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.markup import escape
from rich.table import Table

from trtpipe import console
from trtpipe.artifact.records.engine import is_sidecar, sidecar_engine
from trtpipe.engine.layers import summarise, tensor_precision, tensor_type_text
from trtpipe.errors import BadInput
from trtpipe.files import require_file

PURPOSE = "Inspecting a TensorRT engine"
_REFORMAT = "Reformat"


_TAG = re.compile(r"\((k[A-Z0-9_]+)\)")
_WIDE = re.compile(r"\b(two|four|eight|sixteen|thirty-two)[ -]wide channel vectorized", re.IGNORECASE)
_CHANNEL_MULTIPLE = re.compile(r"channel major .*channel % (\d+) == 0", re.IGNORECASE)
_WIDTHS = {"two": 2, "four": 4, "eight": 8, "sixteen": 16, "thirty-two": 32}


def short_format(text: str) -> str:
    """The TensorFormat name a format text stands for: 11.x appends it ('... (kCHW32)'); 10.x's texts are read by
    their wording, which follows the TensorFormat members' descriptions in TensorRT's Python API reference
    (tensorrt.TensorFormat, https://docs.nvidia.com/deeplearning/tensorrt/latest/_static/python-api/infer/Graph/
    LayerBase.html: LINEAR "Row major linear format", CHW2 "Two wide channel vectorized row major format", CHW32
    "Thirty-two wide channel vectorized row major format"); the channels-last formats the inspector writes as
    'Channel major FP16 format where channel % 8 == 0' (kHWC8). A text none of those fits is kept as it is."""
    if tag := _TAG.search(text):
        return tag.group(1)
    if wide := _WIDE.search(text):
        return f"kCHW{_WIDTHS[wide.group(1).lower()]}"
    if multiple := _CHANNEL_MULTIPLE.search(text):
        return f"kHWC{multiple.group(1)}"
    if "row major linear" in text.lower():
        return "kLINEAR"
    return text


@dataclass(frozen=True)
class TensorFormat:
    name: str
    dims: tuple[int, ...]
    precision: str  # fp32, fp16, int8... ('unknown' when the inspector says N/A)
    format: str  # the inspector's layout text (11.x "Format"; 10.x "Format/Datatype", which names both)

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "dims": list(self.dims), "precision": self.precision, "format": self.format,
                "tensor_format": short_format(self.format)}


@dataclass(frozen=True)
class EngineLayer:
    index: int
    name: str
    layer_type: str
    onnx_nodes: tuple[str, ...]  # the ONNX nodes TensorRT fused into this layer
    precision: str  # of its first input, as trtpipe's precision checks read it
    compute: bool  # a convolution, deconvolution or matrix multiply
    inputs: tuple[TensorFormat, ...] = ()
    outputs: tuple[TensorFormat, ...] = ()
    tactic: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"index": self.index, "name": self.name, "type": self.layer_type, "onnx_nodes": list(self.onnx_nodes),
                "precision": self.precision, "compute": self.compute, "inputs": [t.to_dict() for t in self.inputs],
                "outputs": [t.to_dict() for t in self.outputs], "tactic": self.tactic}


@dataclass
class EngineLayers:
    source: str  # the file read
    layers: list[EngineLayer]
    layout: str  # which TensorRT layout the tensors use: "10.x", "11.x", or "names only"
    io: list[str] = field(default_factory=list)  # the engine's input and output tensors, where listed

    @property
    def compute_precisions(self) -> dict[str, int]:
        return dict(Counter(layer.precision for layer in self.layers if layer.compute))

    @property
    def reformats(self) -> int:
        return sum(layer.layer_type == _REFORMAT for layer in self.layers)

    def summary(self) -> str:
        compute = sum(layer.compute for layer in self.layers)
        counts = ", ".join(f"{p} {n}" for p, n in sorted(self.compute_precisions.items())) or "none"
        text = (f"{len(self.layers)} layers, {compute} compute ({counts}), {self.reformats} reformat; "
                f"TensorRT {self.layout} layer information")
        if self.layout == "names only":
            text += " (built below detailed profiling verbosity: no types, formats or tactics)"
        return text

    def to_dict(self) -> dict[str, Any]:
        return {"source": self.source, "layout": self.layout, "io": self.io, "summary": self.summary(),
                "compute_precisions": self.compute_precisions, "reformat_layers": self.reformats,
                "layers": [layer.to_dict() for layer in self.layers]}


def layer_table(information: Any, source: str) -> EngineLayers:
    """The layers of engine-inspector JSON (``{"Layers": [...], ...}``, either TensorRT layout)."""
    if isinstance(information, list):  # a bare layer list: accepted as the "Layers" it is
        information = {"Layers": information}
    if not isinstance(information, dict) or not isinstance(information.get("Layers"), list):
        raise BadInput(f"{source} is not TensorRT layer information (a JSON object with a \"Layers\" list, as "
                       "'trtpipe build' writes to ENGINE.layers.json and 'trtexec --exportLayerInfo' saves).")
    raw = information["Layers"]
    summaries = summarise(information)
    layers = []
    for index, (layer, summary) in enumerate(zip(raw, summaries, strict=True), start=1):
        details = layer if isinstance(layer, dict) else {}
        # A reformat is TensorRT's own layer: the name-splitting fallback of summarise() would call its name a node.
        nodes = () if summary.layer_type == _REFORMAT else summary.onnx_nodes
        layers.append(EngineLayer(index, summary.name, summary.layer_type, nodes, summary.precision,
                                  summary.compute, _tensors(details.get("Inputs")), _tensors(details.get("Outputs")),
                                  str(details.get("TacticName") or details.get("Tactic") or "")))
    return EngineLayers(source, layers, _layout(raw), _io(information))


def _tensors(items: Any) -> tuple[TensorFormat, ...]:
    if not isinstance(items, list):
        return ()
    found = []
    for item in items:
        if not isinstance(item, dict):
            continue
        dims = item.get("Dimensions")
        found.append(TensorFormat(str(item.get("Name", "")),
                                  tuple(int(d) for d in dims if isinstance(d, int)) if isinstance(dims, list) else (),
                                  tensor_precision(tensor_type_text(item)),
                                  str(item.get("Format") or item.get("Format/Datatype") or "")))
    return tuple(found)


def _layout(layers: list[Any]) -> str:
    tensors = [t for layer in layers if isinstance(layer, dict)
               for t in (layer.get("Inputs") or []) + (layer.get("Outputs") or []) if isinstance(t, dict)]
    if any("Format/Datatype" in t for t in tensors):
        return "10.x"
    if any("Datatype" in t or "DataType" in t or "Format" in t for t in tensors):
        return "11.x"
    return "names only" if layers and all(isinstance(layer, str) for layer in layers) else "unknown"


def _io(information: dict[str, Any]) -> list[str]:
    """The engine's IO tensor names: 10.x lists ``Bindings``; 11.x ``I/O Tensors`` objects."""
    bindings = information.get("Bindings")
    if isinstance(bindings, list):
        return [str(b) for b in bindings]
    tensors = information.get("I/O Tensors")
    if isinstance(tensors, list):
        return [f"{t.get('Name', '?')} ({t.get('IOMode', '?')}, {t.get('DataType') or t.get('Datatype') or '?'})"
                for t in tensors if isinstance(t, dict)]
    return []


# -- reading a file --------------------------------------------------------------------------------------------

def _looks_like_json(path: Path) -> bool:
    if path.suffix.lower() == ".json":
        return True
    with open(path, "rb") as handle:
        head = handle.read(64).lstrip()
    return head[:1] in (b"{", b"[")


def read_layer_info(path: Path) -> Any:
    """The JSON in ``path``; BadInput naming the file for anything else, and for an engine sidecar (which
    describes an engine but lists no layers)."""
    try:
        data = json.loads(Path(path).read_bytes().decode("utf-8"))
    except RecursionError:
        raise BadInput(f"{path} is not TensorRT layer information (JSON nested too deeply).") from None
    except (OSError, ValueError) as error:  # UnicodeDecodeError and JSONDecodeError are ValueErrors
        raise BadInput(f"{path} is not TensorRT layer information ({error}).") from None
    if is_sidecar(data):
        engine = sidecar_engine(Path(path))
        raise BadInput(f"{path} is the trtpipe sidecar of {engine.name}, which lists no layers: inspect "
                       f"{engine.name}.layers.json (written beside it by 'trtpipe build') or the engine itself.")
    return data


def inspect_file(path: Path, *, trust_engine: bool = False) -> EngineLayers:
    """The layer table of an engine-inspector JSON file, or of an engine (TensorRT, a GPU and, for an engine
    trtpipe did not build, ``trust_engine``)."""
    path = require_file(Path(path), "Engine or layer information file")
    if _looks_like_json(path):
        return layer_table(read_layer_info(path), str(path))
    return layer_table(engine_information(path, trust_engine=trust_engine), str(path))


def trusted_sidecar(engine: Path, *, trust_engine: bool) -> Any:
    """The engine's sidecar when it matches the engine (trtpipe built it), else None when the user vouches for
    the engine; BadInput otherwise, before anything is deserialized."""
    from trtpipe.artifact.records.engine import check_engine_file, read_sidecar, sidecar_path

    advice = (f"TensorRT engines are executable and must only be deserialized from trusted sources, so trtpipe opens "
              f"only engines it built; pass --trust-engine if you built {engine.name} or got it over a trusted "
              "channel, or inspect its layer information JSON instead (trtexec --exportLayerInfo).")
    if not sidecar_path(engine).is_file():
        if not trust_engine:
            raise BadInput(f"{engine} has no trtpipe sidecar ({sidecar_path(engine).name}). {advice}")
        return None
    try:
        sidecar = read_sidecar(engine)
        check_engine_file(engine, sidecar)
    except BadInput as error:
        if not trust_engine:
            raise BadInput(f"{error.message} {advice}") from None
        console.warn(f"{error.message} Deserializing it anyway, as --trust-engine asks.")
        return None
    return sidecar


def engine_information(engine: Path, *, trust_engine: bool = False) -> Any:
    """The engine inspector's JSON for ``engine``, deserialized with TensorRT (imported here)."""
    sidecar = trusted_sidecar(engine, trust_engine=trust_engine)
    from trtpipe.artifact.records.engine import check_compatibility
    from trtpipe.engine.builder import describe
    from trtpipe.engine.specs import ProfileShapes
    from trtpipe.runtime.tensorrt.loader import MESSAGES, import_tensorrt_runtime, require_cuda_gpu
    from trtpipe.runtime.tensorrt.versions import TrtFeature, require

    trt, lean = import_tensorrt_runtime(PURPOSE)
    version = str(getattr(trt, "__version__", ""))
    require([TrtFeature.ENGINE_INSPECTOR], version, PURPOSE)
    gpu_name, capability = require_cuda_gpu(PURPOSE)
    profile: list[ProfileShapes] = []
    if sidecar is not None:
        check_compatibility(sidecar, tensorrt_version=version, compute_capability=capability, gpu_name=gpu_name)
        first = sidecar.profiles[0] if sidecar.profiles else []
        profile = [ProfileShapes(str(s["input"]), tuple(s["min"]), tuple(s["opt"]), tuple(s["max"])) for s in first]
    # A version-compatible engine carries runtime code of its own, which only an engine trusted either way may run.
    host_code = lean or (sidecar.version_compatible if sidecar is not None else trust_engine)
    with MESSAGES.scope(f"inspect {engine.name}") as log:
        _, _, information = describe(trt, engine.read_bytes(), profile, log, version_compat=host_code)
    if sidecar is None:
        console.note("No sidecar records the engine's profile: formats of dynamic-shape layers may read N/A.")
    return information


# -- printing ----------------------------------------------------------------------------------------------------

def _formats(tensors: tuple[TensorFormat, ...]) -> str:
    """One line per tensor: its precision and format ('int8 kCHW32'; the precision alone when there is none)."""
    return "\n".join(f"{t.precision} {short_format(t.format)}" if t.format else t.precision for t in tensors)


def print_layers(table_data: EngineLayers, limit: int | None = None) -> None:
    """The table on stdout (compute layers' precision in bold), the summary on stderr."""
    table = Table(title=escape(f"{table_data.source}: {len(table_data.layers)} layers"), title_justify="left")
    for header in ("#", "layer", "type", "ONNX nodes", "precision", "input formats", "output formats", "tactic"):
        table.add_column(header, justify="right" if header == "#" else "left")
    shown = table_data.layers if limit is None else table_data.layers[:limit]
    for layer in shown:
        precision = f"[bold]{layer.precision}[/bold]" if layer.compute else layer.precision
        table.add_row(str(layer.index), escape(layer.name), escape(layer.layer_type),
                      escape(", ".join(layer.onnx_nodes)), precision, escape(_formats(layer.inputs)),
                      escape(_formats(layer.outputs)), escape(layer.tactic))
    console.out.print(table)
    if limit is not None and len(table_data.layers) > limit:
        console.note(f"... and {len(table_data.layers) - limit} more layers (--json has them all)")
    if table_data.io:
        console.note(f"IO tensors: {', '.join(table_data.io)}")
    console.success(table_data.summary())
