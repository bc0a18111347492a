"""The commit lock leaves no file behind (a model folder is copied whole into a Triton repository) and still keeps
writers of one path apart: real convert and optimize runs, and real processes contending for one lock."""

from __future__ import annotations

import multiprocessing
import os
from pathlib import Path

from trtpipe.files import commit_lock, lock_path


def _hidden(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.startswith("."))


def test_convert_and_optimize_leave_no_lock_file_in_the_model_folder(digits_onnx: Path, tmp_path: Path,
                                                                      run_cli) -> None:  # type: ignore[no-untyped-def]
    assert _hidden(digits_onnx.parent) == []  # convert's folder
    version = tmp_path / "digits" / "1"
    version.mkdir(parents=True)
    result = run_cli("optimize", digits_onnx, "-o", version / "model.onnx", "--precision", "fp16",
                     "--calib", "digits")
    assert result.exit_code == 0, result.output
    assert (version / "model.onnx").is_file()
    assert _hidden(version) == []


def _hold_repeatedly(path: str, inside: str, rounds: int, clashes: multiprocessing.Queue) -> None:  # type: ignore[type-arg]
    """Take the lock ``rounds`` times; inside it, claim ``inside`` exclusively (O_EXCL): a claim that fails means
    another process holds the lock at the same time."""
    count = 0
    for _ in range(rounds):
        with commit_lock(Path(path)):
            try:
                fd = os.open(inside, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
            except FileExistsError:
                count += 1
                continue
            os.write(fd, b"x")
            os.close(fd)
            os.unlink(inside)
    clashes.put(count)


def test_processes_taking_one_commit_lock_never_hold_it_at_once(tmp_path: Path) -> None:
    """The lock file is removed by each holder before it lets go; writers waiting on the removed file must not
    then hold it beside a writer that created the next one."""
    artifact = tmp_path / "model.onnx"
    clashes: multiprocessing.Queue = multiprocessing.get_context("fork").Queue()  # type: ignore[type-arg]
    workers = [multiprocessing.get_context("fork").Process(
        target=_hold_repeatedly, args=(str(artifact), str(tmp_path / "inside"), 300, clashes)) for _ in range(4)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(timeout=300)
        assert worker.exitcode == 0
    assert [clashes.get(timeout=10) for _ in workers] == [0, 0, 0, 0]
    assert not lock_path(artifact).exists()
