"""The pipeline file: a TOML document checked key by key, so a typo is named with its line, not ignored.

    [model]     source (required), name, arch, input_shape, trust_checkpoint
    [convert]   opset, dynamic_batch
    [data]      calib, eval, calib_method, calib_samples     (defaults for every variant)
    [[variants]] name (required), precision, target, calib, eval, calib_method, calib_samples,
                max_accuracy_drop, fuse
    [build]     enabled, workspace, opt_level, hardware_compat, version_compat
    [bench]     batches, threads, warmup, iters, duration
    [select]    latency_budget_ms, max_accuracy_drop, batch
    [output]    repository, reports, triton
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trtpipe.errors import BadInput

_NUMBER = (int, float)
SCHEMA: dict[str, dict[str, tuple[type | tuple[type, ...], str]]] = {
    "model": {"source": (str, "a string"), "name": (str, "a string"), "arch": (str, "a string"),
              "input_shape": (str, "a string like 1x3x224x224"), "trust_checkpoint": (bool, "true or false")},
    "convert": {"opset": (int, "an integer"), "dynamic_batch": (bool, "true or false")},
    "data": {"calib": (str, "a string"), "eval": (str, "a string"), "calib_method": (str, "a string"),
             "calib_samples": (int, "an integer")},
    "variants": {"name": (str, "a string"), "precision": (str, "fp32, fp16 or int8"), "target": (str, "a string"),
                 "calib": (str, "a string"), "eval": (str, "a string"), "calib_method": (str, "a string"),
                 "calib_samples": (int, "an integer"), "max_accuracy_drop": (_NUMBER, "a number"),
                 "fuse": (bool, "true or false")},
    "build": {"enabled": (bool, "true or false"), "workspace": (str, "a size like 4GiB"),
              "opt_level": (int, "an integer"), "hardware_compat": (str, "a string"),
              "version_compat": (bool, "true or false")},
    "bench": {"batches": (list, "a list of integers"), "threads": (int, "an integer"), "warmup": (int, "an integer"),
              "iters": (int, "an integer"), "duration": (_NUMBER, "a number")},
    "select": {"latency_budget_ms": (_NUMBER, "a number"), "max_accuracy_drop": (_NUMBER, "a number"),
               "batch": (int, "an integer")},
    "output": {"repository": (str, "a path"), "reports": (str, "a path"), "triton": (str, "a path")},
}


@dataclass
class Variant:
    name: str
    precision: str = "fp32"
    target: str | None = None
    calib: str | None = None
    eval: str | None = None
    calib_method: str = "minmax"
    calib_samples: int | None = None
    max_accuracy_drop: float | None = None
    fuse: bool = True


@dataclass
class Pipeline:
    source: str
    name: str
    arch: str | None = None
    input_shape: tuple[int, ...] | None = None
    trust_checkpoint: bool = False
    opset: int = 18
    dynamic_batch: bool = True
    variants: list[Variant] = field(default_factory=list)
    build: dict[str, Any] = field(default_factory=lambda: {"enabled": True})
    batches: tuple[int, ...] = (1, 8, 32)
    threads: int | None = None
    warmup: int = 5
    iters: int | None = None
    duration: float = 3.0
    latency_budget_ms: float | None = None
    max_accuracy_drop: float | None = None
    select_batch: int = 1
    repository: Path = Path("models")
    reports: Path = Path("reports")
    triton: Path | None = None
    path: Path | None = None


def _line_of(text: str, section: str, key: str) -> int | None:
    """The line where ``key`` is set inside ``section`` (tomllib reports no positions for valid TOML)."""
    current = None
    for number, line in enumerate(text.splitlines(), start=1):
        header = re.match(r"^\s*\[\[?\s*([\w.-]+)\s*\]\]?", line)
        if header:
            current = header.group(1)
            if key == current and section == "":
                return number
            continue
        if current == section and re.match(rf"^\s*{re.escape(key)}\s*=", line):
            return number
    return None


def _where(path: Path, text: str, section: str, key: str) -> str:
    line = _line_of(text, section, key)
    return f"{path}:{line}" if line else str(path)


def _check_table(path: Path, text: str, section: str, table: dict[str, Any]) -> None:
    schema = SCHEMA[section]
    for key, value in table.items():
        if key not in schema:
            known = ", ".join(schema)
            raise BadInput(f"{_where(path, text, section, key)}: unknown key '{key}' in [{section}] "
                           f"(known: {known}).")
        expected, words = schema[key]
        # TOML's true/false are Python bools, which are ints too: a bool is never a number here.
        ok = not (isinstance(value, bool) and expected in (int, _NUMBER)) and isinstance(value, expected)
        if not ok:
            raise BadInput(f"{_where(path, text, section, key)}: '{key}' in [{section}] must be {words}, not "
                           f"{type(value).__name__} {value!r}.")


def load_pipeline(path: Path) -> Pipeline:
    from trtpipe.shapes import parse_shape

    path = Path(path)
    if not path.is_file():
        raise BadInput(f"Pipeline file {path} does not exist.")
    text = path.read_text()
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        raise BadInput(f"{path} is not valid TOML: {error}.") from None
    for section, value in data.items():
        if section not in SCHEMA:
            raise BadInput(f"{_where(path, text, '', section)}: unknown section [{section}] (known: "
                           f"{', '.join(SCHEMA)}).")
        tables = value if section == "variants" else [value]
        if not isinstance(tables, list) or not all(isinstance(t, dict) for t in tables):
            kind = "[[variants]] tables" if section == "variants" else f"a [{section}] table"
            raise BadInput(f"{_where(path, text, '', section)}: '{section}' must be {kind}.")
        for table in tables:
            _check_table(path, text, section, table)
    model = data.get("model", {})
    if "source" not in model:
        raise BadInput(f"{path}: [model] needs 'source' (a registry name, checkpoint or module:factory).")
    try:
        shape = parse_shape(model["input_shape"]) if "input_shape" in model else None
    except ValueError as error:
        raise BadInput(f"{_where(path, text, 'model', 'input_shape')}: {error}.") from None
    source = model["source"]
    default_name = Path(source).stem if ("/" in source or "." in Path(source).name) else source
    pipeline = Pipeline(source=source, name=model.get("name", re.sub(r"[^A-Za-z0-9_.-]", "_", default_name)),
                        arch=model.get("arch"), input_shape=shape, trust_checkpoint=model.get("trust_checkpoint",
                                                                                              False), path=path)
    convert = data.get("convert", {})
    pipeline.opset = convert.get("opset", pipeline.opset)
    pipeline.dynamic_batch = convert.get("dynamic_batch", True)
    defaults = data.get("data", {})
    names = set()
    for table in data.get("variants", []):
        if "name" not in table:
            raise BadInput(f"{path}: every [[variants]] needs a 'name'.")
        variant = Variant(**{**{k: v for k, v in defaults.items()}, **table})
        if variant.name in names or not re.match(r"^[A-Za-z0-9_.-]+$", variant.name):
            raise BadInput(f"{_where(path, text, 'variants', 'name')}: variant name '{variant.name}' is repeated or "
                           "not made of letters, digits, '_', '-', '.'.")
        names.add(variant.name)
        if variant.precision not in ("fp32", "fp16", "int8"):
            raise BadInput(f"{_where(path, text, 'variants', 'precision')}: variant '{variant.name}' has precision "
                           f"'{variant.precision}'; choose fp32, fp16 or int8.")
        if variant.precision in ("fp16", "int8") and not variant.calib:
            raise BadInput(f"{path}: variant '{variant.name}' ({variant.precision}) needs calibration data: set "
                           "'calib' in it or in [data].")
        if variant.max_accuracy_drop is not None and not variant.eval:
            raise BadInput(f"{path}: variant '{variant.name}' sets max_accuracy_drop but has no 'eval' data.")
        pipeline.variants.append(variant)
    pipeline.build = {"enabled": True, **data.get("build", {})}
    bench = data.get("bench", {})
    if "batches" in bench and not (bench["batches"] and all(isinstance(b, int) and not isinstance(b, bool)
                                                            and b > 0 for b in bench["batches"])):
        raise BadInput(f"{_where(path, text, 'bench', 'batches')}: 'batches' must be a list of positive integers.")
    pipeline.batches = tuple(sorted(set(bench.get("batches", pipeline.batches))))
    pipeline.threads = bench.get("threads")
    pipeline.warmup = bench.get("warmup", pipeline.warmup)
    pipeline.iters = bench.get("iters")
    pipeline.duration = float(bench.get("duration", pipeline.duration))
    select = data.get("select", {})
    pipeline.latency_budget_ms = select.get("latency_budget_ms")
    pipeline.max_accuracy_drop = select.get("max_accuracy_drop")
    pipeline.select_batch = select.get("batch", min(pipeline.batches))
    output = data.get("output", {})
    base = path.parent
    pipeline.repository = (base / output["repository"]) if "repository" in output else Path("models")
    pipeline.reports = (base / output["reports"]) if "reports" in output else Path("reports")
    pipeline.triton = (base / output["triton"]) if "triton" in output else None
    return pipeline


def default_pipeline(source: str) -> Pipeline:
    """``trtpipe run MODEL``: fused FP32 and, with data, FP16 and CPU INT8 of a model, benched at batch 1/8."""
    pipeline = Pipeline(source=source, name=re.sub(r"[^A-Za-z0-9_.-]", "_", Path(source).stem or source),
                        batches=(1, 8))
    calib = "digits" if source == "digits_resnet" else None
    pipeline.variants = [Variant("fused")]
    if calib:
        pipeline.variants += [Variant("fp16", "fp16", calib=calib, eval=calib),
                              Variant("int8_cpu", "int8", "cpu", calib=calib, eval=calib, max_accuracy_drop=0.5)]
    return pipeline
