"""The pipeline file: a TOML document whose sections are the stages' options, checked key by key, so a typo or
a bad value is named with its file and line, never ignored and never a traceback.

Each section's keys, types, choices and defaults come from the options dataclass of its stage (the same one the
CLI flags come from):

    [model]       ModelOptions        source (required: a PyTorch model, an FP32 .onnx or a packaged model's
                                      name), name, arch, input_shape, trust_checkpoint
    [convert]     ConvertOptions
    [data]        OptimizeOptions     defaults for every variant
    [[variants]]  OptimizeOptions     plus name (required); with kind = "aoti", CompileOptions instead: an
                                      AOTInductor package compiled from the PyTorch model
    [build]       EngineOptions       plus enabled
    [bench]       BenchOptions
    [select]      SelectOptions
    [serve]       ServeOptions        batching written into the Triton export
    [output]      OutputOptions       paths relative to the current folder, or to ``trtpipe run --out``: never
                                      beside a pipeline file, which may lie inside the installed package
"""

from __future__ import annotations

import difflib
import re
import tomllib
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from trtpipe.bench.options import BenchOptions
from trtpipe.compile.options import CompileOptions
from trtpipe.convert.options import ConvertOptions
from trtpipe.engine.options import EngineOptions
from trtpipe.errors import BadInput
from trtpipe.models.data_spec import DataKind
from trtpipe.models.options import ModelOptions
from trtpipe.models.registry import factory_spec
from trtpipe.models.sources import natural_data
from trtpipe.optimize.options import OptimizeOptions
from trtpipe.options import OptionSpec, OptionValueError, coerce, from_mapping, option_fields
from trtpipe.pipeline.options import OutputOptions, SelectOptions
from trtpipe.serve.options import ServeOptions
from trtpipe.vocab import ArtifactKind, CalibMethod, Precision, Target

SECTIONS: dict[str, type] = {
    "model": ModelOptions, "convert": ConvertOptions, "data": OptimizeOptions, "variants": OptimizeOptions,
    "build": EngineOptions, "bench": BenchOptions, "select": SelectOptions, "serve": ServeOptions,
    "output": OutputOptions,
}
# Keys a section has beyond its options class: the pipeline's own.
EXTRA_KEYS: dict[str, dict[str, type]] = {"variants": {"name": str, "kind": str}, "build": {"enabled": bool}}
# What a [[variants]] table makes, by its ``kind``: an ONNX through optimize (the default), or an AOTInductor package
# compiled from the PyTorch model; each kind's keys are its options class's.
VARIANT_OPTIONS: dict[ArtifactKind, type] = {ArtifactKind.ONNX: OptimizeOptions, ArtifactKind.AOTI: CompileOptions}
_VARIANT_KIND = OptionSpec("What the variant is.", type=ArtifactKind, choices=tuple(VARIANT_OPTIONS))
SAFE_NAME = re.compile(r"^[A-Za-z0-9_.-]+$")


@dataclass
class Variant:
    name: str
    options: OptimizeOptions | CompileOptions = field(default_factory=OptimizeOptions)  # CompileOptions: AOTInductor


@dataclass
class Pipeline:
    model: ModelOptions
    convert: ConvertOptions = field(default_factory=ConvertOptions)
    variants: list[Variant] = field(default_factory=list)
    build: EngineOptions = field(default_factory=EngineOptions)
    build_enabled: bool = True
    bench: BenchOptions = field(default_factory=BenchOptions)
    select: SelectOptions = field(default_factory=SelectOptions)
    serve: ServeOptions = field(default_factory=ServeOptions)
    output: OutputOptions = field(default_factory=OutputOptions)
    path: Path | None = None

    @property
    def name(self) -> str:
        """The model's folder in the repository and the reports: ``[model] name``, else the factory's name
        (``seg.py:deeplab`` is ``deeplab``: two factories of one file are two models), else the registry name or
        the file's stem, as they always were."""
        if self.model.name:
            return self.model.name
        source = str(self.model.source)
        factory = factory_spec(source)
        path = Path(source)
        if factory is not None:
            stem = factory.factory
        elif path.suffix.lower() == ".onnx" and path.parent.name.isdigit():
            stem = path.parent.parent.name  # models/<name>/<version>/model.onnx is <name>
        else:
            stem = path.stem if ("/" in source or "." in path.name) else source
        return re.sub(r"[^A-Za-z0-9_.-]", "_", stem)


def section_keys(section: str, cls: type | None = None) -> list[str]:
    """Every key a section accepts (read into ``cls``; [[variants]] of any kind when None)."""
    classes = [cls] if cls else list(VARIANT_OPTIONS.values()) if section == "variants" else [SECTIONS[section]]
    names = [f.name for c in classes for f, _ in option_fields(c)]
    return [*EXTRA_KEYS.get(section, {}), *dict.fromkeys(names)]


def variant_options(table: dict[str, Any]) -> type:
    """The options class of a [[variants]] table, by its ``kind`` (an unknown kind is refused when it is read)."""
    try:
        return VARIANT_OPTIONS[coerce(_VARIANT_KIND, table.get("kind", str(ArtifactKind.ONNX)))]
    except ValueError:
        return OptimizeOptions


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


class _Source:
    """The file being read, to name places in it."""

    def __init__(self, path: Path, text: str) -> None:
        self.path, self.text = path, text

    def where(self, section: str, key: str) -> str:
        line = _line_of(self.text, section, key)
        return f"{self.path}:{line}" if line else str(self.path)

    def error(self, section: str, key: str, message: str) -> BadInput:
        return BadInput(f"{self.where(section, key)}: {message}")


def unknown_key_hint(key: str, known: list[str]) -> str:
    """The end of "unknown key 'duraton' in [bench]": ": did you mean 'duration'?" where a known key is close (a
    typo), else the known keys (what the section takes)."""
    close = difflib.get_close_matches(key, known, n=1, cutoff=0.6)
    return f": did you mean '{close[0]}'?" if close else f" (known: {', '.join(known)})."


def _options(source: _Source, section: str, table: dict[str, Any], base: Any = None, cls: type | None = None) -> Any:
    """The section's options object from its table (into ``cls``, else the section's class), every key checked
    against the options class."""
    cls = cls or SECTIONS[section]
    known = {f.name for f, _ in option_fields(cls)}
    extra = EXTRA_KEYS.get(section, {})
    for key, value in table.items():
        if key in extra:
            if not isinstance(value, extra[key]):
                raise source.error(section, key, f"'{key}' in [{section}] must be {extra[key].__name__}, not "
                                   f"{type(value).__name__} {value!r}.")
        elif key not in known:
            raise source.error(section, key, f"unknown key '{key}' in [{section}]"
                               f"{unknown_key_hint(key, section_keys(section, cls))}")
    try:
        return from_mapping(cls, {k: v for k, v in table.items() if k in known}, base=base)
    except OptionValueError as error:
        raise source.error(section, error.key, f"'{error.key}' in [{section}] {error.reason}.") from None


def apply_overrides(data: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """``section.key=value`` settings from the command line, over the file's; ``variants.key`` sets every
    variant. Values are written as on the command line and checked like the file's."""
    for item in overrides:
        target, sep, value = item.partition("=")
        section, dot, key = target.strip().partition(".")
        if not sep or not dot or not key:
            raise BadInput(f"--set '{item}' is not SECTION.KEY=VALUE (e.g. bench.duration=2).")
        if section not in SECTIONS:
            raise BadInput(f"--set '{item}': unknown section '{section}' (known: {', '.join(SECTIONS)}).")
        if key not in section_keys(section):
            raise BadInput(f"--set '{item}': unknown key '{key}' in [{section}]"
                           f"{unknown_key_hint(key, section_keys(section))}")
        parsed: Any = value.strip()
        if key in EXTRA_KEYS.get(section, {}) and EXTRA_KEYS[section][key] is bool:
            parsed = parsed.lower() in ("true", "1", "yes", "on")
        if section == "variants":  # each variant that has the key (an AOTInductor one has no calibration)
            for variant in data.setdefault("variants", []):
                if key in section_keys(section, variant_options(variant)):
                    variant[key] = parsed
        else:
            data.setdefault(section, {})[key] = parsed
    return data


def load_pipeline(path: Path, overrides: list[str] | None = None, out: Path | None = None) -> Pipeline:
    """The checked pipeline in ``path``; its [output] paths are relative to ``out`` (default: the current folder)."""
    path = Path(path)
    if not path.is_file():
        raise BadInput(f"Pipeline file {path} does not exist.")
    try:
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as error:
        raise BadInput(f"{path} is not UTF-8 text (byte {error.start}): save it as UTF-8.") from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        raise BadInput(f"{path} is not valid TOML: {error}.") from None
    return pipeline_from_data(data, _Source(path, text), base=path.parent, overrides=overrides, out=out)


def default_pipeline(source: str, overrides: list[str] | None = None, out: Path | None = None) -> Pipeline:
    """``trtpipe run MODEL``: fused FP32 and, with data, FP16 and CPU INT8 of a model, benched at batch 1/8."""
    data: dict[str, Any] = {"model": {"source": source}, "bench": {"batches": [1, 8]}, "variants": [{"name": "fused"}]}
    if source == "digits_resnet":
        calib = str(DataKind.DIGITS)
        data["variants"] += [
            {"name": str(Precision.FP16), "precision": str(Precision.FP16), "calib": calib, "eval": calib},
            {"name": "int8_cpu", "precision": str(Precision.INT8), "target": str(Target.CPU), "calib": calib,
             "eval": calib, "calib_method": str(CalibMethod.MINMAX), "max_accuracy_drop": 0.5},
        ]
    elif packaged_data(source):  # a packaged model brings its data: the variants calibrate and judge on it
        data["variants"] += [{"name": str(Precision.FP16), "precision": str(Precision.FP16)},
                             {"name": "int8_cpu", "precision": str(Precision.INT8), "target": str(Target.CPU)}]
    return pipeline_from_data(data, _Source(Path(f"<defaults for {source}>"), ""), base=Path(),
                              overrides=overrides, out=out)


def packaged_data(source: str) -> str | None:
    """The DATA spec of the inputs ``source`` brings of its own (a packaged model's natural inputs,
    ``packaged:NAME``), else None: the model's source says (:func:`trtpipe.models.sources.natural_data`)."""
    return natural_data(source)


def _with_natural_data(options: OptimizeOptions, natural: str) -> OptimizeOptions:
    """A packaged model's natural inputs where a variant names no data of its own: calibration for a precision
    that needs it, eval for one that changes the arithmetic (or has a budget to judge): bench judges every variant
    against the FP32 file anyway, and an FP32 variant's own eval would only repeat that."""
    judged = options.precision is not Precision.FP32 or options.max_accuracy_drop is not None
    return replace(options, calib=options.calib or (natural if options.precision.needs_calibration else None),
                   eval=options.eval or (natural if judged else None))


def beside(value: str | None, base: Path) -> str | None:
    """A relative file a pipeline file names (a factory's ``.py``, a checkpoint, an ONNX, calibration data), made
    absolute where it lies beside the pipeline file, so the file runs from any folder, as its [output] paths do;
    else ``value`` as written (a registry or packaged name, ``digits``, a path relative to the working folder)."""
    if not value:
        return value
    module, colon, attr = value.rpartition(":")
    if colon and module.endswith(".py") and not Path(value).exists():  # path/to/file.py:factory
        found = base / module
        return f"{found.resolve()}:{attr}" if not Path(module).is_absolute() and found.is_file() else value
    path = Path(value)
    if path.is_absolute() or not (base / path).exists():
        return value
    return str((base / path).resolve())


def pipeline_from_data(data: dict[str, Any], source: _Source, *, base: Path,
                       overrides: list[str] | None = None, out: Path | None = None) -> Pipeline:
    """A checked Pipeline from TOML-shaped ``data``; files it reads are found beside ``base`` (the pipeline file's
    folder), and the paths in [output], what it writes, are relative to ``out`` (default: the current folder), so a
    bundled example run from a checkout writes ``models/`` and ``reports/`` where the user is, not inside the
    package."""
    _check_sections(data, source)
    apply_overrides(data, overrides or [])
    model = _model_options(data, source, base)
    build_table = data.get("build", {})
    output = _options(source, "output", data.get("output", {}))
    root = out if out is not None else Path()
    output = replace(output, repository=root / output.repository, reports=root / output.reports,
                     triton=root / output.triton if output.triton else None)
    pipeline = Pipeline(
        model=model,
        convert=_options(source, "convert", data.get("convert", {})),
        build=_options(source, "build", build_table),
        build_enabled=build_table.get("enabled", True),
        bench=_options(source, "bench", data.get("bench", {})),
        select=_options(source, "select", data.get("select", {})),
        serve=_options(source, "serve", data.get("serve", {})),
        output=output,
        path=source.path if source.text else None,
    )
    defaults = _options(source, "data", data.get("data", {}))
    natural = packaged_data(str(model.source))
    for table in data.get("variants", []):
        pipeline.variants.append(_variant(source, table, pipeline.variants, defaults=defaults, natural=natural,
                                          base=base))
    return pipeline


def _check_sections(data: dict[str, Any], source: _Source) -> None:
    """Refuse an unknown section, and a section that is not a table ([[variants]]: a list of tables)."""
    for section, value in data.items():
        if section not in SECTIONS:
            raise source.error("", section, f"unknown section [{section}] (known: {', '.join(SECTIONS)}).")
        tables = value if section == "variants" else [value]
        if not isinstance(tables, list) or not all(isinstance(t, dict) for t in tables):
            kind = "[[variants]] tables" if section == "variants" else f"a [{section}] table"
            raise source.error("", section, f"'{section}' must be {kind}.")


def _model_options(data: dict[str, Any], source: _Source, base: Path) -> ModelOptions:
    """The [model] section, its source found beside a pipeline file; a model without a source is refused."""
    model = _options(source, "model", data.get("model", {}))
    if source.text:  # a pipeline file: what it names relative to itself is found from any folder
        model = replace(model, source=beside(model.source, base))
    if not model.source:
        raise BadInput(f"{source.path}: [model] needs 'source' (a registry name, checkpoint, module:factory, FP32 "
                       ".onnx file or packaged model name).")
    return model


def _variant(source: _Source, table: dict[str, Any], made: list[Variant], *, defaults: OptimizeOptions,
             natural: str | None, base: Path) -> Variant:
    """One [[variants]] table as a checked Variant: an AOTInductor one with its own keys, else optimize's options
    over [data]'s defaults, its files found beside a pipeline file, the packaged model's natural data where it has
    some; a repeated or unsafe name and invalid options are refused naming the variant."""
    if "name" not in table:
        raise BadInput(f"{source.path}: every [[variants]] needs a 'name'.")
    name = table["name"]
    if "kind" in table and _variant_kind(source, table) is ArtifactKind.AOTI:
        return _compiled_variant(source, table, name, made)
    options = _options(source, "variants", table, base=defaults)
    if source.text:
        options = replace(options, calib=beside(options.calib, base), eval=beside(options.eval, base))
    if natural:
        options = _with_natural_data(options, natural)
    if not SAFE_NAME.match(name) or any(v.name == name for v in made):
        raise source.error("variants", "name", f"variant name '{name}' is repeated or not made of letters, "
                           "digits, '_', '-', '.'.")
    if options.precision is Precision.FP32:
        options = replace(options, calib=None)  # nothing to calibrate: keeps the stage key independent of it
    try:
        options.validate()
    except BadInput as error:
        raise BadInput(f"{source.path}: variant '{name}': {error.message}") from None
    return Variant(name, options)


def _variant_kind(source: _Source, table: dict[str, Any]) -> ArtifactKind:
    try:
        return coerce(_VARIANT_KIND, table["kind"])
    except ValueError as error:
        raise source.error("variants", "kind", f"'kind' in [[variants]] {error}.") from None


def _compiled_variant(source: _Source, table: dict[str, Any], name: str, made: list[Variant]) -> Variant:
    """An AOTInductor variant: its keys are CompileOptions' ([data]'s calibration defaults are not its)."""
    options = _options(source, "variants", table, cls=CompileOptions)
    if not SAFE_NAME.match(name) or any(v.name == name for v in made):
        raise source.error("variants", "name", f"variant name '{name}' is repeated or not made of letters, "
                           "digits, '_', '-', '.'.")
    return Variant(name, options)
