"""When the TensorRT backend captures, replays or launches plainly (trtpipe.runtime.tensorrt.graphs): the
bookkeeping behind one CUDA graph per shape, each on an execution context of its own. The CUDA half runs in
tests/engine/test_gpu_runtime.py."""

from __future__ import annotations

import pytest

from trtpipe.runtime.tensorrt.graphs import GRAPH_CONTEXTS, BoundState, GraphCache, Launch

A, B, C = ((1, 3, 8, 8),), ((4, 3, 8, 8),), ((8, 3, 8, 8),)


def _cache(capacity: int = GRAPH_CONTEXTS, *, enabled: bool = True) -> tuple[GraphCache[str], list[str]]:
    released: list[str] = []
    return GraphCache(released.append, capacity, enabled=enabled), released


def test_a_shape_runs_plainly_once_then_is_captured_then_replayed() -> None:
    cache, _ = _cache()
    assert cache.plan(A) is Launch.PLAIN  # first sight: the shared context, no capture for a one-off shape
    assert cache.plan(A) is Launch.CAPTURE  # second: its own context, a warm-up enqueue, then the capture
    cache.captured(A, "graph A")
    assert cache.plan(A) is Launch.REPLAY and cache.slot(A) == "graph A" and cache.replays(A)


def test_each_shape_keeps_its_own_graph_when_shapes_alternate() -> None:
    """The defect this replaces: several shapes' graphs replayed on one context. Each key now has its own slot,
    and switching shapes neither drops nor re-captures the other's graph."""
    cache, released = _cache()
    for key in (A, B):
        cache.plan(key)
        assert cache.plan(key) is Launch.CAPTURE
        cache.captured(key, f"graph {key[0][0]}")
    for key in (A, B, A, B):
        assert cache.plan(key) is Launch.REPLAY
    assert cache.slot(A) == "graph 1" and cache.slot(B) == "graph 4" and not released


def test_the_least_recently_used_graph_is_released_beyond_the_capacity() -> None:
    cache, released = _cache(capacity=2)
    for key in (A, B):
        cache.plan(key), cache.plan(key)
        cache.captured(key, f"graph {key[0][0]}")
    cache.plan(A)  # A replayed: B is now the least recently used
    cache.plan(C), cache.plan(C)
    cache.captured(C, "graph 8")
    assert released == ["graph 4"] and len(cache) == 2
    assert cache.plan(B) is Launch.CAPTURE  # seen before: captured again at once, without a plain first run


def test_a_failed_capture_is_reported_once_and_the_shape_runs_plainly() -> None:
    cache, _ = _cache()
    cache.plan(A), cache.plan(A)
    assert cache.failed(A, "operation not permitted when stream is capturing")  # the caller warns
    assert not cache.failed(A, "again")  # never twice for one shape
    assert [cache.plan(A) for _ in range(3)] == [Launch.PLAIN] * 3 and cache.failure(A) == "again"
    assert cache.plan(B) is Launch.PLAIN and cache.plan(B) is Launch.CAPTURE  # other shapes are still captured


def test_without_cuda_graphs_every_launch_is_plain() -> None:
    cache, _ = _cache(enabled=False)
    assert {cache.plan(A) for _ in range(3)} == {Launch.PLAIN}


def test_closing_releases_every_graph_and_forgets_every_shape() -> None:
    cache, released = _cache()
    cache.plan(A), cache.plan(A)
    cache.captured(A, "graph 1")
    cache.clear()
    assert released == ["graph 1"] and len(cache) == 0 and cache.plan(A) is Launch.PLAIN
    with pytest.raises(ValueError, match="at least one"):
        GraphCache(released.append, 0)


def test_a_context_is_set_up_again_only_when_its_shape_or_profile_changes() -> None:
    state = BoundState()
    assert not state.needs_profile(0)  # a new context runs profile 0
    assert state.needs_profile(1) and state.needs_binding(A)
    state.bound(A, 1)
    assert not state.needs_binding(A) and not state.needs_profile(1)
    assert state.needs_binding(B)  # shapes changed: shapes and addresses are set again
    state.forget()  # a call into the context failed half-way: nothing it holds is trusted
    assert state.needs_binding(A) and state.needs_profile(1) and state.needs_profile(0)
