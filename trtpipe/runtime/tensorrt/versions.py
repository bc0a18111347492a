"""The TensorRT version each feature trtpipe uses first appeared in, checked before the feature is used.

``trtpipe[gpu]`` asks for ``tensorrt>=10.12`` (strong typing), but an older TensorRT may already be installed,
and a feature newer than it would otherwise fail deep inside a build
(``HardwareCompatibilityLevel.SAME_COMPUTE_CAPABILITY`` is an AttributeError on 10.0-10.8). Pure
functions of the version string, so every row is tested with made-up versions on machines without TensorRT.

Where each row comes from:

- A Python binding's first version: the first ``release/X.Y`` branch of NVIDIA/TensorRT whose
  ``python/src/infer/pyCore.cpp`` binds the name (the release branches from 7.2 to 11.0 were read; there are no
  8.1/8.3 branches, so "8.2" means "by 8.2").
- ``SAME_COMPUTE_CAPABILITY``: also the TensorRT 10.9.0 release notes ("Added a new hardware compatibility level,
  kSAME_COMPUTE_CAPABILITY"), https://docs.nvidia.com/deeplearning/tensorrt/latest/getting-started/release-notes-10/
  10.9.0.html.
- Strongly typed builds: the ``STRONGLY_TYPED`` flag is bound from 9.0, but strong typing is complete only from
  10.12 (NVIDIA/TensorRT ``.agents/skills/trt-strong-typing-migration/SKILL.md``: "strong typing is fully available
  from 10.12 onward"; the 10.12.0 release notes deprecate weak typing,
  https://docs.nvidia.com/deeplearning/tensorrt/latest/getting-started/release-notes-10/10.12.0.html). Every
  engine trtpipe builds is strongly typed, so a build needs 10.12.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum

from trtpipe.artifact.records.engine import HardwareCompat
from trtpipe.errors import TrtpipeError


class TrtFeature(StrEnum):
    """A TensorRT feature trtpipe uses, named as the user knows it."""

    STRONGLY_TYPED_BUILD = "strongly typed engine builds"
    SAME_COMPUTE_CAPABILITY = "--hardware-compat same-cc (HardwareCompatibilityLevel.SAME_COMPUTE_CAPABILITY)"
    AMPERE_PLUS = "--hardware-compat ampere+ (HardwareCompatibilityLevel.AMPERE_PLUS)"
    VERSION_COMPATIBLE = "--version-compat (BuilderFlag.VERSION_COMPATIBLE, Runtime.engine_host_code_allowed)"
    OPT_LEVEL = "--opt-level (IBuilderConfig.builder_optimization_level)"
    PROGRESS_MONITOR = "build progress (IProgressMonitor)"
    TIMING_CACHE = "timing caches (create_timing_cache, ITimingCache.combine)"
    MEMORY_POOL_LIMIT = "--workspace (IBuilderConfig.set_memory_pool_limit)"
    ENGINE_INSPECTOR = "layer information (create_engine_inspector, ProfilingVerbosity.DETAILED)"
    TENSOR_IO = "named-tensor execution (set_tensor_address, set_input_shape, execute_async_v3)"


@dataclass(frozen=True)
class Since:
    version: tuple[int, int]
    source: str


FIRST_VERSION: dict[TrtFeature, Since] = {
    TrtFeature.STRONGLY_TYPED_BUILD: Since((10, 12), "trt-strong-typing-migration skill; 10.12.0 release notes"),
    TrtFeature.SAME_COMPUTE_CAPABILITY: Since((10, 9), "10.9.0 release notes; release/10.9 pyCore.cpp"),
    TrtFeature.AMPERE_PLUS: Since((8, 6), "release/8.6 pyCore.cpp"),
    TrtFeature.VERSION_COMPATIBLE: Since((8, 6), "release/8.6 pyCore.cpp"),
    TrtFeature.OPT_LEVEL: Since((8, 6), "release/8.6 pyCore.cpp"),
    TrtFeature.PROGRESS_MONITOR: Since((9, 0), "release/9.0 pyCore.cpp"),
    TrtFeature.TIMING_CACHE: Since((8, 0), "release/8.0 pyCore.cpp"),
    TrtFeature.MEMORY_POOL_LIMIT: Since((8, 4), "release/8.4 pyCore.cpp"),
    TrtFeature.ENGINE_INSPECTOR: Since((8, 2), "release/8.2 pyCore.cpp"),
    TrtFeature.TENSOR_IO: Since((8, 5), "release/8.5 pyCore.cpp"),
}

# What every build and every engine run uses, whatever the options.
BUILD_FEATURES = (TrtFeature.STRONGLY_TYPED_BUILD, TrtFeature.TIMING_CACHE, TrtFeature.ENGINE_INSPECTOR,
                  TrtFeature.TENSOR_IO)
RUN_FEATURES = (TrtFeature.TENSOR_IO,)
_HARDWARE = {HardwareCompat.SAME_CC: TrtFeature.SAME_COMPUTE_CAPABILITY, HardwareCompat.AMPERE_PLUS:
             TrtFeature.AMPERE_PLUS}


def parse_version(text: str) -> tuple[int, ...]:
    """'10.13.0.35' -> (10, 13, 0, 35); '11.4.0.post1' -> (11, 4, 0): the leading numeric parts."""
    parts = []
    for part in str(text).strip().split("."):
        match = re.match(r"\d+", part)
        if not match:
            break
        parts.append(int(match.group()))
        if match.group() != part:
            break
    return tuple(parts)


def build_features(*, hardware_compat: HardwareCompat, version_compat: bool, opt_level: int | None,
                   workspace: int | None) -> list[TrtFeature]:
    """The features a build with these options uses."""
    features = list(BUILD_FEATURES)
    if hardware_compat in _HARDWARE:
        features.append(_HARDWARE[hardware_compat])
    if version_compat:
        features.append(TrtFeature.VERSION_COMPATIBLE)
    if opt_level is not None:
        features.append(TrtFeature.OPT_LEVEL)
    if workspace is not None:
        features.append(TrtFeature.MEMORY_POOL_LIMIT)
    return features


def missing_features(features: Iterable[TrtFeature], version: str) -> list[TrtFeature]:
    """The features ``version`` lacks, newest requirement first. An unreadable version is not refused here: the
    TensorRT call itself will say more than a guess would."""
    have = parse_version(version)
    if len(have) < 2:
        return []
    lacking = {f for f in features if have[:2] < FIRST_VERSION[f].version}
    return sorted(lacking, key=lambda f: (FIRST_VERSION[f].version, f.value), reverse=True)


def require(features: Iterable[TrtFeature], version: str, purpose: str) -> None:
    """Raise TrtpipeError (one line: the version needed, what needs it, what is here) when ``version`` is older
    than a feature in ``features``."""
    lacking = missing_features(features, version)
    if not lacking:
        return
    needed = FIRST_VERSION[lacking[0]].version
    needed_text = f"{needed[0]}.{needed[1]}"
    what = "; ".join(f"{f.value}: {'.'.join(map(str, FIRST_VERSION[f].version))}" for f in lacking)
    raise TrtpipeError(f"{purpose} needs TensorRT {needed_text} or newer ({what}); this machine has TensorRT "
                       f"{version}: pip install -U 'tensorrt>={needed_text}' (from NVIDIA's package index).")
