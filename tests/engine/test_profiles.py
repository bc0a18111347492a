"""Several optimisation profiles: --profiles parsed and planned before TensorRT is touched, and the runtime's choice
of the profile that holds a request's shapes (the pure half of the TensorRT backend)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import error_line
from trtpipe.engine import EngineOptions
from trtpipe.engine.build import planned_profile, planned_profiles
from trtpipe.engine.specs import InputInfo, ProfileShapes, parse_profiles, plan_profiles
from trtpipe.errors import BadInput
from trtpipe.options import OptionValueError, to_plain
from trtpipe.runtime.tensorrt.profiles import choose_profile, covered_max_batch, profiles_from_table

TWO = "input:1x1x32x32:8x1x32x32:32x1x32x32,input:33x1x32x32:64x1x32x32:128x1x32x32"


def test_profiles_parse_into_min_opt_max_per_input() -> None:
    first, second = parse_profiles(TWO)
    assert first == {"input": ((1, 1, 32, 32), (8, 1, 32, 32), (32, 1, 32, 32))}
    assert second["input"][2] == (128, 1, 32, 32)
    (both,) = parse_profiles("image:1x3x64x64:2x3x64x64:4x3x64x64+scale:1x2")  # '+' joins one profile's inputs
    assert both["scale"] == ((1, 2), (1, 2), (1, 2))  # one shape: min = opt = max
    (named,) = parse_profiles("ns:input:1x2:2x2:3x2")  # names may hold ':'
    assert list(named) == ["ns:input"]


@pytest.mark.parametrize(("text", "message"), [
    ("input", "has no shapes, not 1 or 3"),
    ("input:1x2:3x4", "has 2 shapes"),
    ("input:1x2+input:3x4", "gives input 'input' twice"),
    ("", "no profiles given"),
    (":1x2", "names no input"),
])
def test_profiles_that_do_not_parse_say_how_to_write_them(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_profiles(text)


def test_profiles_round_trip_through_the_options_object() -> None:
    """The CLI's text, a TOML list and the parsed value give the same options; to_plain writes JSON."""
    from_text = EngineOptions(profiles=TWO)
    assert EngineOptions(profiles=from_text.profiles).profiles == from_text.profiles
    assert EngineOptions(profiles=TWO.split(",")).profiles == from_text.profiles  # a TOML list of strings
    assert [str(p) for p in from_text.profiles] == TWO.split(",")
    assert to_plain(from_text)["profiles"][1] == {"input": [[33, 1, 32, 32], [64, 1, 32, 32], [128, 1, 32, 32]]}
    with pytest.raises(OptionValueError, match="'profiles'"):
        EngineOptions(profiles="input:1x2:3x4")


def test_every_dynamic_input_is_named_in_every_profile() -> None:
    inputs = [InputInfo("image", (None, 3, 64, 64)), InputInfo("scale", (None, 2)), InputInfo("table", (4, 4))]
    (profile,) = plan_profiles(inputs, parse_profiles("image:1x3x64x64:2x3x64x64:4x3x64x64+scale:1x2:2x2:4x2"))
    assert [p.name for p in profile] == ["image", "scale", "table"]  # a static input needs no mention
    assert profile[2] == ProfileShapes("table", (4, 4), (4, 4), (4, 4))
    with pytest.raises(BadInput, match=r"Profile 2 \(image:5x3x64x64\) does not give scale"):
        plan_profiles(inputs, parse_profiles("image:1x3x64x64+scale:1x2,image:5x3x64x64"))
    with pytest.raises(BadInput, match=r"Profile 1 .*need min <= opt <= max"):
        plan_profiles(inputs[:1], parse_profiles("image:4x3x64x64:2x3x64x64:8x3x64x64"))
    with pytest.raises(BadInput, match=r"Profile 1 .*does not fit input 'image'"):
        plan_profiles(inputs[:1], parse_profiles("image:1x1x64x64"))


def test_the_build_plans_every_profile_and_refuses_mixed_shape_options(digits_onnx: Path) -> None:
    profiles = planned_profiles(digits_onnx, EngineOptions(profiles=TWO))
    assert [[(p.min[0], p.opt[0], p.max[0]) for p in profile] for profile in profiles] == [[(1, 8, 32)],
                                                                                            [(33, 64, 128)]]
    assert planned_profile(digits_onnx, EngineOptions(profiles=TWO)) == profiles[0]
    assert len(planned_profiles(digits_onnx, EngineOptions())) == 1  # the one of --shapes & co, as before
    with pytest.raises(BadInput, match="--max-shapes would describe one more"):
        planned_profiles(digits_onnx, EngineOptions(profiles=TWO, max_shapes={"input": (64, 1, 32, 32)}))


def test_build_checks_profiles_before_looking_for_tensorrt(digits_onnx: Path, tmp_path: Path, run_cli) -> None:  # type: ignore[no-untyped-def]
    result = run_cli("build", digits_onnx, "-o", tmp_path / "m.plan", "--profiles", "input:1x1x32x32:8x1x32x32")
    assert result.exit_code == 2 and "has 2 shapes" in result.output
    result = run_cli("build", digits_onnx, "-o", tmp_path / "m.plan", "--profiles", "input:1x3x32x32")
    assert result.exit_code == 1 and "Profile 1 (input:1x3x32x32)" in error_line(result.output)
    assert not (tmp_path / "m.plan").exists()


def _engine(*ranges: tuple[int, int]) -> list:  # type: ignore[type-arg]
    """Profiles of a digits-like engine with these batch ranges, as TensorRT reports them."""
    return profiles_from_table([{"input": ((low, 1, 32, 32), (high, 1, 32, 32), (high, 1, 32, 32))}
                                for low, high in ranges])


def test_the_first_profile_that_holds_the_shapes_runs_them() -> None:
    profiles = _engine((1, 32), (33, 128), (16, 64))
    assert choose_profile(profiles, {"input": (8, 1, 32, 32)}) == 0
    assert choose_profile(profiles, {"input": (40, 1, 32, 32)}) == 1  # the first that holds it, in build order
    assert choose_profile(profiles, {"input": (32, 1, 32, 32)}) == 0  # a bound is inside its range
    two_inputs = profiles_from_table([{"a": ((1, 2), (1, 2), (4, 2)), "b": ((1, 5), (1, 5), (4, 5))},
                                      {"a": ((5, 2), (5, 2), (8, 2)), "b": ((5, 5), (5, 5), (8, 5))}])
    assert choose_profile(two_inputs, {"a": (6, 2), "b": (6, 5)}) == 1
    with pytest.raises(BadInput, match="fit none"):
        choose_profile(two_inputs, {"a": (2, 2), "b": (6, 5)})  # each input in another profile is no profile


def test_shapes_no_profile_holds_are_refused_naming_every_profile() -> None:
    with pytest.raises(BadInput) as raised:
        choose_profile(_engine((1, 32), (33, 128)), {"input": (200, 1, 32, 32)}, "m.plan")
    assert raised.value.message == (
        "m.plan: input shapes input 200x1x32x32 fit none of its optimisation profiles (profile 0: input "
        "1x1x32x32 to 32x1x32x32; profile 1: input 33x1x32x32 to 128x1x32x32): run within one of them, or rebuild "
        "with --profiles covering them.")
    with pytest.raises(BadInput, match=r"\(profile 0: input 1x1x32x32 to 32x1x32x32\): run within it, or rebuild "
                                       r"with --min-shapes/--max-shapes"):
        choose_profile(_engine((1, 32)), {"input": (64, 1, 32, 32)})
    with pytest.raises(BadInput, match="fit none"):
        choose_profile(_engine((1, 32)), {"input": (8, 1, 32)})  # another rank is in no range


def test_chunks_stay_within_the_batches_every_profile_together_covers() -> None:
    assert covered_max_batch(_engine((1, 32))) == 32
    assert covered_max_batch(_engine((1, 32), (33, 128))) == 128
    assert covered_max_batch(_engine((33, 128), (1, 40))) == 128  # order of building does not matter
    assert covered_max_batch(_engine((1, 32), (64, 128))) == 32  # a remainder of 40 would fit neither
    assert covered_max_batch(profiles_from_table([{}])) is None  # an engine without inputs


def test_a_rejected_profile_of_several_is_named_by_its_index() -> None:
    from trtpipe.engine.builder import profile_failure_message

    profile = [ProfileShapes("input", (33, 1, 32, 32), (64, 1, 32, 32), (128, 1, 32, 32))]
    message = profile_failure_message(profile, ["max < opt"], 1, 2)
    assert message.startswith("TensorRT rejected optimisation profile 1 of 2 (input min (33, 1, 32, 32)")
    assert "max < opt" in message and message.endswith("Check --profiles against the ONNX inputs.")
