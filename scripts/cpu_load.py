"""Load the CPU in bursts, like `stress --cpu N`, for a bounded time: run beside `trtpipe bench`, `make demo` or the
README's tour to see that their figures hold on a busy machine (docs/guides/bench.md, 'Figures on a busy machine').

    python scripts/cpu_load.py --seconds 120 &      # every core, bursts of ~0.5 s busy and ~0.5 s idle, for 2 min
    trtpipe bench digits_resnet models/digits.onnx --batch 1,32 --duration 4 --threads 2

Each of ``--procs`` processes spins on arithmetic for a burst, then sleeps for a pause, both drawn at random around
their means (seeded), so the bursts land at no fixed phase of the bench's rounds. Everything stops by itself after
``--seconds`` (at most an hour), when this script is interrupted or terminated, or when its parent is gone.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import random
import signal
import sys
import time
from types import FrameType

MAX_SECONDS = 3600.0


def burn(deadline: float, burst: float, pause: float, seed: int, parent: int) -> None:
    """One worker: busy for ~``burst`` s, idle for ~``pause`` s, until ``deadline`` or until its parent is gone."""
    rng = random.Random(seed)
    value = 1.0
    while time.monotonic() < deadline and os.getppid() == parent:
        busy_until = min(deadline, time.monotonic() + burst * rng.uniform(0.5, 1.5))
        while time.monotonic() < busy_until:
            for _ in range(10_000):
                value = value * 1.0000001 + 1e-9
        if pause > 0:
            time.sleep(max(0.0, min(deadline - time.monotonic(), pause * rng.uniform(0.5, 1.5))))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--seconds", type=float, default=60.0, help=f"how long to run, at most {MAX_SECONDS:.0f}")
    parser.add_argument("--procs", type=int, default=os.cpu_count() or 1, help="busy processes (default: every core)")
    parser.add_argument("--burst", type=float, default=0.5, help="mean seconds of each busy spell")
    parser.add_argument("--pause", type=float, default=0.5, help="mean seconds idle between them (0: busy throughout)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the spells' lengths")
    args = parser.parse_args(argv)
    if not 0 < args.seconds <= MAX_SECONDS:
        parser.error(f"--seconds must be above 0 and at most {MAX_SECONDS:.0f}")
    if args.procs < 1 or args.burst <= 0 or args.pause < 0:
        parser.error("--procs must be at least 1, --burst above 0 and --pause 0 or more")
    deadline = time.monotonic() + args.seconds
    workers = [multiprocessing.Process(target=burn, args=(deadline, args.burst, args.pause, args.seed + i,
                                                           os.getpid()), daemon=True) for i in range(args.procs)]

    def stop(signum: int, frame: FrameType | None) -> None:
        raise SystemExit(0)

    signal.signal(signal.SIGTERM, stop)
    print(f"cpu_load: {args.procs} processes, bursts of ~{args.burst:g} s busy and ~{args.pause:g} s idle, for "
          f"{args.seconds:g} s (stops by itself; Ctrl-C stops it sooner)", file=sys.stderr, flush=True)
    try:
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join(max(0.0, deadline - time.monotonic()) + 5.0)
    except KeyboardInterrupt:
        pass
    finally:
        for worker in workers:
            if worker.is_alive():
                worker.terminate()
        for worker in workers:
            if worker.pid is not None:
                worker.join(5.0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
