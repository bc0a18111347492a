"""What long work says while it runs: off a terminal, a line every few seconds with the time left; nothing but
warnings and results under --quiet."""

from __future__ import annotations

import pytest

from trtpipe import console


def test_off_a_terminal_long_work_says_where_it_is_and_the_time_left(monkeypatch: pytest.MonkeyPatch,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(console, "HEARTBEAT_S", 0.0)
    beat = console.Heartbeat("bench rounds 2-20", 4)
    for _ in range(4):
        beat.tick()
    lines = [line for line in capsys.readouterr().err.splitlines() if "bench rounds 2-20" in line]
    assert lines[0].endswith("1 of 4 done, about 0 s left") and len(lines) == 3  # the last step says nothing


def test_every_progress_bar_beats_off_a_terminal(monkeypatch: pytest.MonkeyPatch,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    """Calibration, learned steps and judging draw rich bars, which a log never shows: each bar's task also says
    where it is in a line off a terminal (a U-Net's INT8 run was minutes of silence in CI's log)."""
    monkeypatch.setattr(console, "HEARTBEAT_S", 0.0)
    with console.progress() as bar:
        task = bar.add_task("Calibrating (entropy)", total=3)
        for _ in range(3):
            bar.advance(task)
    with console.tracked("Judging on 4 samples of [photos]", 4) as done:
        done(2)
        done(2)
    err = capsys.readouterr().err
    assert "Calibrating (entropy): 1 of 3 done" in err and "Judging on 4 samples of [photos]: 2 of 4 done" in err


def test_quiet_keeps_warnings_and_drops_notes_and_heartbeats(monkeypatch: pytest.MonkeyPatch,
                                                             capsys: pytest.CaptureFixture[str], run_cli) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setattr(console, "HEARTBEAT_S", 0.0)
    console.set_quiet(True)
    try:
        console.note("a note")
        console.warn("a warning", record=False)
        beat = console.Heartbeat("work", 3)
        beat.tick()
        assert console.progress().disable
    finally:
        console.set_quiet(False)
    err = capsys.readouterr().err
    assert "a note" not in err and "a warning" in err and "work:" not in err
    assert "-q, --quiet" in run_cli("--help").output


def test_nested_warning_recorders_each_keep_their_own_lines() -> None:
    """A report's recorder around a stage's own (bench around a check): an inner one ending while both hold the
    same lines must not take the outer one's place (a GPU bench ended in a ValueError so), and the outer one keeps
    recording after it."""
    from trtpipe import console

    with console.recording_warnings() as outer:
        with console.recording_warnings() as inner:
            console.warn("both")
        console.warn("outer only")
    assert outer == ["both", "outer only"] and inner == ["both"]
