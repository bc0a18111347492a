"""When the TensorRT backend captures a CUDA graph, replays one, or launches plainly: pure bookkeeping, tested
without a GPU; the backend does the CUDA work each decision calls for.

Why one execution context per captured graph. A CUDA graph freezes the kernels and arguments of one
``execute_async_v3``; TensorRT applies a change of input shape, tensor address or profile to the context's state at
its next enqueue ("IExecutionContext will call this during the next subsequent instance of enqueueV3() if ... an
input binding is changed via setInputShape()", NvInferRuntime.h), which a replay never runs. So a context that ran
another shape since a graph was captured on it no longer holds the state that graph was captured with: replaying
several per-shape graphs on one context (what the backend did before) replays some of them against another shape's
state. trtexec captures one graph per execution context (sampleInference.cpp, ``Iteration::createEnqueueFunction``)
and Torch-TensorRT records a new graph whenever the input shape changes. Here each captured shape gets its own
execution context, set up once for that shape and never given another; plain launches use the backend's shared
context. The contexts run one at a time on the backend's one stream (TensorRT: "each execution context in
concurrent use must use a separate optimization profile"; these are never in concurrent use). A graph's context is
released with it (the least recently used goes first when more than :data:`GRAPH_CONTEXTS` shapes are captured:
each context holds its own activation memory).

When. The first launch of a shape is plain, on the shared context: a shape seen once (the last, smaller chunk of
an agreement run) never pays for a capture. The second launch of a shape captures, as trtexec does: one plain
enqueue on the new context first, then synchronise ("Avoid capturing initialization calls by executing the enqueue
function at least once before starting CUDA graph capture"), then the capture. That first enqueue computes the
call's outputs; the capture runs nothing. Later launches replay. A capture that fails (an engine whose kernels may
not be captured, e.g. data-dependent shapes) is reported once per shape and that shape runs plainly from then on,
as trtexec does ("CUDA graph capture failed. The inference will be launched without using CUDA graph.").
"""

from __future__ import annotations

import collections
from collections.abc import Callable, Hashable
from enum import Enum
from typing import Generic, TypeVar

GRAPH_CONTEXTS = 4  # captured shapes kept at once: bench's default sweep (1/8/32) and one more
Slot = TypeVar("Slot")


class Launch(Enum):
    """What a launch of one shape does."""

    PLAIN = "plain"  # execute_async_v3 on the shared context
    CAPTURE = "capture"  # a new context for the shape: one plain enqueue, synchronise, then capture its graph
    REPLAY = "replay"  # replay the shape's graph


class GraphCache(Generic[Slot]):
    """The captured graphs of one backend, each in its slot (graph, execution context) by shape key.

    ``release`` frees a slot's graph and context; it is called for a slot evicted to stay within ``capacity`` and
    for every slot on :meth:`clear`."""

    def __init__(self, release: Callable[[Slot], None], capacity: int = GRAPH_CONTEXTS, *,
                 enabled: bool = True) -> None:
        if capacity < 1:
            raise ValueError("a graph cache holds at least one graph")
        self.enabled = enabled
        self._release = release
        self._capacity = capacity
        self._slots: collections.OrderedDict[Hashable, Slot] = collections.OrderedDict()  # oldest use first
        self._seen: set[Hashable] = set()
        self._failed: dict[Hashable, str] = {}

    def plan(self, key: Hashable) -> Launch:
        """What the next launch of ``key`` does (and, for a plain first sight, remember the shape)."""
        if not self.enabled or key in self._failed:
            return Launch.PLAIN
        if key in self._slots:
            self._slots.move_to_end(key)
            return Launch.REPLAY
        if key in self._seen:
            return Launch.CAPTURE
        self._seen.add(key)
        return Launch.PLAIN

    def slot(self, key: Hashable) -> Slot:
        """The captured slot of ``key`` (after :meth:`plan` said REPLAY)."""
        return self._slots[key]

    def captured(self, key: Hashable, slot: Slot) -> None:
        """Keep ``slot`` for ``key``; release the least recently used beyond the capacity (its shape stays seen:
        its next launch captures again)."""
        self._slots[key] = slot
        self._slots.move_to_end(key)
        while len(self._slots) > self._capacity:
            _, oldest = self._slots.popitem(last=False)
            self._release(oldest)

    def failed(self, key: Hashable, reason: str) -> bool:
        """Record that ``key`` cannot be captured; True the first time (the caller warns once per shape)."""
        first = key not in self._failed
        self._failed[key] = reason
        return first

    def replays(self, key: Hashable) -> bool:
        """Whether launches of ``key`` replay a captured graph now."""
        return key in self._slots

    def failure(self, key: Hashable) -> str | None:
        return self._failed.get(key)

    def __len__(self) -> int:
        return len(self._slots)

    def clear(self) -> None:
        """Release every slot and forget every shape (the backend is closing)."""
        slots = list(self._slots.values())
        self._slots.clear()
        self._seen.clear()
        self._failed.clear()
        for slot in slots:
            self._release(slot)


class BoundState:
    """What one execution context was last set up for (profile, shapes and buffers of a shape key), so a launch
    calls ``set_optimization_profile_async``/``set_input_shape``/``set_tensor_address`` only when that changes:
    TensorRT re-applies bindings at the next enqueue whenever they are set ("layer resource updates"), so
    setting them again for every call of the same shape is work for nothing."""

    def __init__(self) -> None:
        self._key: Hashable | None = None
        self._profile: int | None = 0  # a new context has profile 0 ("The newly created execution context will be
        # assigned optimization profile 0", NvInferRuntime.h)

    def needs_profile(self, profile: int) -> bool:
        return self._profile != profile

    def needs_binding(self, key: Hashable) -> bool:
        return self._key != key

    def bound(self, key: Hashable, profile: int) -> None:
        self._key, self._profile = key, profile

    def forget(self) -> None:
        """The context's state is unknown (a call into it failed half-way): set everything again next time."""
        self._key, self._profile = None, None
