"""What a build says when TensorRT fails or skips tactics, from TensorRT's own wording (no TensorRT needed)."""

from __future__ import annotations

from trtpipe.engine.builder import build_failure_message, profile_failure_message, skipped_tactics_notes
from trtpipe.engine.specs import ProfileShapes
from trtpipe.runtime.tensorrt.loader import ERROR, INFO, WARNING, TensorRTMessages

# TensorRT 10.x, as users report it (NVIDIA/TensorRT issues): the cause first, then the consequence.
NO_TACTIC = ("[optimizer.cpp::computeCosts::3710] Error Code 4: Internal Error (Could not find any implementation for "
             "node {ForeignNode[853...Softmax_136]} due to insufficient workspace. See verbose log for requested "
             "sizes.)")
NO_ENGINE = ("[builder.cpp::buildSerializedNetwork::609] Error Code 2: Internal Error (Assertion engine != nullptr "
             "failed.)")
WORKSPACE_NOTICE = ("Some tactics do not have sufficient workspace memory to run. Increasing workspace size will "
                    "enable more tactics, please check verbose output for requested sizes.")


def test_only_tensorrts_workspace_wording_blames_the_workspace() -> None:
    message = build_failure_message([NO_TACTIC, NO_ENGINE], 1 << 30)
    assert "within the workspace limit of 1GiB: retry with --workspace 2GiB" in message
    assert "Could not find any implementation" in message and "(and 1 more error(s))" in message
    # With TensorRT's default workspace (the GPU's memory) doubling is no advice.
    assert "--workspace 2" not in build_failure_message([NO_TACTIC], None)
    # Errors that merely mention memory or allocation are not the workspace's fault.
    for unrelated in ("Error Code 1: Cuda Runtime (out of memory)", "cudaMalloc failed in the allocation of weights",
                      "Error Code 4: Internal Error (network has dynamic inputs but no optimization profile; memory "
                      "pool configured)"):
        message = build_failure_message([unrelated, NO_ENGINE], 1 << 30)
        assert "workspace" not in message.split("TensorRT build failed:")[0] and unrelated in message
        assert message.startswith("The TensorRT build failed: ")


def test_a_build_that_skipped_tactics_for_lack_of_workspace_is_reported() -> None:
    messages = TensorRTMessages(show=lambda _: None)
    with messages.scope("build") as log:
        messages.log(INFO, WORKSPACE_NOTICE)
    notes = skipped_tactics_notes(log, 64 << 20)
    assert len(notes) == 1 and "64MiB workspace" in notes[0] and "--workspace 128MiB" in notes[0]
    with messages.scope("build") as quiet:
        messages.log(INFO, "Detected 1 inputs and 1 output network tensors.")
    assert skipped_tactics_notes(quiet, 64 << 20) == []


def test_tactics_skipped_for_lack_of_gpu_memory_are_summarised_once() -> None:
    messages = TensorRTMessages(show=lambda _: None)
    with messages.scope("build") as log:
        for size in (9385, 9380):
            messages.log(WARNING, f"Tactic Device request: {size}MB Available: 7649MB. Device memory is insufficient "
                                  "to use tactic.")
            messages.log(WARNING, f"Skipping tactic 3 due to insufficient memory on requested size of {size} detected "
                                  "for tactic 0x0000000000000004.\nTry decreasing the workspace size with "
                                  "IBuilderConfig::setMemoryPoolLimit().")
    notes = skipped_tactics_notes(log, None)
    assert len(notes) == 1 and "too little free memory (4 message(s)" in notes[0]


def test_a_rejected_profile_names_its_shapes_and_tensorrts_reason() -> None:
    messages = TensorRTMessages(show=lambda _: None)
    with messages.scope("build") as log:
        messages.log(ERROR, "IOptimizationProfile: input has no dimensions set for kOPT")
    profile = [ProfileShapes("input", (1, 3, 32, 32), (8, 3, 32, 32), (32, 3, 32, 32))]
    message = profile_failure_message(profile, log.errors())
    assert "rejected the optimisation profile (input min (1, 3, 32, 32)" in message
    assert "no dimensions set for kOPT" in message
