"""A model repository in Triton's layout: ``<repo>/<name>/<version>/model.onnx`` (or ``model.plan``).

Each model is loaded on its own: one that fails (a corrupt file, an engine for another GPU) is reported not
ready, with the reason, and the others serve.
"""

from __future__ import annotations

import functools
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from trtpipe import console
from trtpipe.artifact.description import check_cpu
from trtpipe.embedding import Model, open_model
from trtpipe.errors import BadInput
from trtpipe.hardware import cpu_class
from trtpipe.runtime import describe_artifact
from trtpipe.serve.batching.axis import batch_axis_change, batches_on_axis_0
from trtpipe.serve.batching.batcher import BatchingOptions, MicroBatcher
from trtpipe.serve.batching.footprint import InstancesDoNotFit, MemoryBudget
from trtpipe.serve.batching.instances import ModelInstances, open_instances
from trtpipe.serve.options import ServeOptions
from trtpipe.serve.repository.serving import serving_options, serving_runtime
from trtpipe.vocab import ArtifactKind, Device

# Triton's default file names; an engine is preferred over the ONNX it was built from.
ARTIFACT_NAMES = tuple(f"model{suffix}" for kind in reversed(tuple(ArtifactKind)) for suffix in kind.suffixes)
SAFE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


@dataclass
class ServedModel:
    name: str
    version: str
    path: Path
    model: Model | None = None  # the first instance: its tensors describe every instance
    instances: ModelInstances | None = None  # what runs requests: ``--instances`` copies, the least busy first
    error: str | None = None
    batcher: MicroBatcher | None = None
    max_batch_size: int | None = None
    versions: list[str] = field(default_factory=list)
    in_flight: int = 0  # requests admitted without a batcher, counted under ``admission``
    # HTTP's event loop and gRPC's (a thread of its own) both admit requests: the count is taken under a lock
    admission: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    @property
    def ready(self) -> bool:
        return self.model is not None

    @property
    def platform(self) -> str:
        kind = ArtifactKind.for_path(self.path.name)
        from trtpipe.runtime.registry import triton_facts

        return triton_facts(kind.backend).platform if kind else ""


def discover(repository: Path) -> dict[str, list[tuple[str, Path]]]:
    """{model name: [(version, artifact)] sorted by version} for every model folder in the repository.

    A folder that is not served (a name that is not a safe model name or a version number, a symbolic link, a
    version holding no model file) is skipped with a warning naming it and why: a model that silently does not
    appear is harder to track down than one line at start-up."""
    if not repository.is_dir():
        raise BadInput(f"Model repository {repository} does not exist: run 'make demo' or 'trtpipe convert' into it.")
    found: dict[str, list[tuple[str, Path]]] = {}
    for model_dir in sorted(p for p in repository.iterdir() if p.is_dir()):
        if _unsafe(model_dir) or _linked(model_dir):
            continue
        versions = []
        for version_dir in sorted((p for p in model_dir.iterdir() if p.is_dir() and _is_version(p)),
                                  key=lambda p: int(p.name)):
            artifact = next((version_dir / n for n in ARTIFACT_NAMES if (version_dir / n).is_file()), None)
            if artifact is None:
                console.warn(f"{version_dir} holds no {' or '.join(ARTIFACT_NAMES)}: version skipped.")
            elif not _linked(version_dir) and not _linked(artifact):
                versions.append((version_dir.name, artifact))
        if versions:
            found[model_dir.name] = versions
    if not found:
        raise BadInput(f"Model repository {repository} holds no models (<name>/<version>/model.onnx or model.plan).")
    return found


VERSION = re.compile(r"^[0-9]+$")  # ASCII digits only: str.isdigit() also accepts '²', which int() refuses


def _unsafe(model_dir: Path) -> bool:
    """A model folder whose name cannot be a model name in URLs, logs and Triton's layout is not served."""
    name = model_dir.name
    if SAFE_NAME.match(name):
        return False
    why = ("a hidden folder (its name starts with '.')" if name.startswith(".")
           else "not a safe model name (letters, digits, '_', '.' and '-', starting with a letter or digit)")
    console.warn(f"{_shown(model_dir)} is {why}: skipped (rename it to serve it).")
    return True


def _is_version(version_dir: Path) -> bool:
    """A version folder is named by a number (Triton's layout); any other folder is skipped with a warning."""
    if VERSION.match(version_dir.name):
        return True
    console.warn(f"{_shown(version_dir)} is not a version folder (its name is not a number, as in "
                 f"{version_dir.parent.name}/1/model.onnx): skipped.")
    return False


def _shown(path: Path) -> str:
    """A path as the user can read it: control characters in a folder's name (a newline, an escape) escaped,
    so that a warning cannot forge other lines of the log."""
    text = str(path)
    return repr(text) if any(not c.isprintable() for c in text) else text


def batching_options(options: ServeOptions) -> BatchingOptions | None:
    """The micro-batcher's settings for ``options`` (None with batching off)."""
    if not options.batching:
        return None
    return BatchingOptions(options.max_batch_size, options.max_queue_delay_ms / 1000, options.preferred_batch_sizes,
                           options.max_queue)


# A library's source file, with its folders or without (ONNX Runtime writes "tensorprotoutils.cc:619" before the
# C++ function that failed), and the function's name after it when there is one.
_SOURCE_PATHS = re.compile(r"(?:[A-Za-z]:)?(?:/?[\w.+-]+/)*[\w.+-]+\.(?:cc|cpp|cxx|cu|h|hpp|inl|py|so)(?::\d+)?"
                           r"(?: (?:[\w]+::)+\w+(?= ))?")
_ABSOLUTE_PATHS = re.compile(r"(?<![\w.])/(?:[\w.+-]+/)+[\w.+-]*")


def public_message(error: BaseException, path: Path, shown: str) -> str:
    """An error's first line fit for a client: the artifact named by its repository path, and no absolute
    server path or library source path left in it."""
    text = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
    for spelled in {str(path.resolve()), str(path.absolute()), str(path)}:
        text = text.replace(spelled, shown)
    return _ABSOLUTE_PATHS.sub("<path>", _SOURCE_PATHS.sub("<source>", text))


def _linked(path: Path) -> bool:
    """A repository entry that is a symbolic link is not followed: it could lead anywhere on the machine."""
    if path.is_symlink():
        console.warn(f"{_shown(path)} is a symbolic link: skipped (copy the model into the repository instead).")
        return True
    return False


def load_repository(repository: Path, options: ServeOptions, on_batch: Callable[[str, int], None] | None = None,
                    on_instance_run: Callable[[str, str, int], None] | None = None,
                    ) -> dict[str, dict[str, ServedModel]]:
    """Load every version of every model, ``options.instances`` times each; returns {name: {version: ServedModel}}.

    ``on_batch(name, rows)`` is called after each batch a batcher ran; ``on_instance_run(name, version, index)``
    after each run an instance finished. Instances that do not fit in memory stop the loading (InstancesDoNotFit,
    naming how many fit), every model loaded so far closed: a server short of what it was asked for does not start.
    """
    batching, threads, serve_options = batching_options(options), options.threads, options
    budget = MemoryBudget(options.memory_budget_mb)
    served: dict[str, dict[str, ServedModel]] = {}
    for name, versions in discover(repository).items():
        served[name] = {}
        for version, path in versions:
            entry = ServedModel(name, version, path, versions=[v for v, _ in versions])
            try:
                description = describe_artifact(path)
                if serve_options.device is Device.CPU:  # before any instance opens: unsafe here is refused
                    check_cpu(description, cpu_class(), allow=serve_options.allow_cpu_mismatch)
                runtime = serving_runtime(description, serve_options.runtime)
                run_options = serving_options(runtime, threads, serve_options.device)
                entry.instances = open_instances(
                    functools.partial(open_model, description, run_options, runtime=runtime),
                    options.instances, rows=batching.max_batch_size if batching else 1, budget=budget,
                    label=f"{name} version {version}",
                    on_run=functools.partial(on_instance_run, name, version) if on_instance_run is not None else None)
                entry.model = entry.instances.first
                entry.max_batch_size = _max_batch(entry.model, batching)
                changed = batch_axis_change(entry.model) if batching and batches_on_axis_0(entry.model) else None
                if changed:  # joined requests could not be given their own rows back
                    console.warn(f"{name} version {version} is served without batching: {changed}.")
                elif batching and batches_on_axis_0(entry.model):
                    entry.batcher = MicroBatcher(
                        entry.instances.predict_all,
                        BatchingOptions(entry.max_batch_size or batching.max_batch_size, batching.max_delay_s,
                                        batching.preferred_batch_sizes, batching.max_queue),
                        on_batch=functools.partial(on_batch, name) if on_batch is not None else None,
                        name=f"{name} version {version}", workers=len(entry.instances),
                    )
                copies = f", {len(entry.instances)} instances" if len(entry.instances) > 1 else ""
                console.success(f"Loaded {name} version {version} ({entry.model.kind}, {entry.model.precision}"
                                f"{copies})")
            except InstancesDoNotFit:
                close_repository(served)
                raise
            except Exception as error:  # any failure: this model is not ready, the others still serve
                entry.error = public_message(error, path, f"{name}/{version}/{path.name}")
                console.warn(f"{name} version {version} is not ready: {entry.error}")
            served[name][version] = entry
    return served


def close_repository(served: dict[str, dict[str, ServedModel]]) -> None:
    """Stop every batcher and close every instance of ``served``."""
    for versions in served.values():
        for entry in versions.values():
            if entry.batcher is not None:
                entry.batcher.close()
            if entry.instances is not None:
                entry.instances.close()


def _max_batch(model: Model, batching: BatchingOptions | None) -> int | None:
    """A static batch is the maximum; a dynamic one is capped by the batching options (or a TensorRT profile)."""
    if not model.inputs or not model.inputs[0].shape:
        return None  # a scalar input: no batch axis
    first = model.inputs[0].shape[0]
    if isinstance(first, int):
        return first
    if batching and model.backend.max_batch:  # the largest batch the artifact takes (an AOTInductor package's range)
        return min(batching.max_batch_size, model.backend.max_batch)
    return batching.max_batch_size if batching else None
