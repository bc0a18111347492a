"""How much of the machine other processes used while bench timed: the one interference that pairing cannot undo.

Rounds taken in turn put a burst on every row alike, but not with the same effect: a 1 ms call is preempted more
often than a 0.2 ms one, so a neighbour can shift a paired ratio by 10 % with every round agreeing (measured:
docs/results/busy-machine.md). pyperf warns when the system load is high for the same reason. Here the share of CPU
time that went to other processes during the timed rounds is read from the kernel's counters (``/proc/stat`` minus
this process's own CPU time); above :data:`BUSY_SHARE` every row of the run is unstable (stability.row_verdict),
and so every headline and choice made from it.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

from trtpipe.hardware import usable_cores

BUSY_SHARE = 0.15  # of the machine's CPU time, spent by other processes while the rounds ran
_STAT = Path("/proc/stat")


@dataclass(frozen=True)
class _Counters:
    wall_s: float
    busy_s: float  # every process's CPU time on the machine (user, nice, system, irq, softirq, steal)
    ours_s: float  # this process's (all its threads, and children it waited for)


def _read() -> _Counters | None:
    try:
        fields = _STAT.read_text().splitlines()[0].split()[1:]
    except (OSError, IndexError):
        return None  # not Linux: nothing to say
    ticks = [int(value) for value in fields]
    # user nice system idle iowait irq softirq steal (guest time is already inside user)
    busy = sum(ticks[:3]) + sum(ticks[5:8])
    own = os.times()
    return _Counters(time.monotonic(), busy / os.sysconf("SC_CLK_TCK"),
                     own.user + own.system + own.children_user + own.children_system)


class OtherLoad:
    """Counts other processes' CPU time between :meth:`start` and :meth:`stop`."""

    def __init__(self) -> None:
        self._start: _Counters | None = None
        self.share: float | None = None  # of the whole machine's CPU time, 0..1; None where it cannot be read

    def start(self) -> None:
        self._start = _read()

    def stop(self) -> float | None:
        end = _read()
        if self._start is None or end is None or end.wall_s <= self._start.wall_s:
            return None
        others = (end.busy_s - self._start.busy_s) - (end.ours_s - self._start.ours_s)
        capacity = (end.wall_s - self._start.wall_s) * (os.cpu_count() or usable_cores())
        self.share = min(1.0, max(0.0, others / capacity))
        return self.share

    @property
    def busy(self) -> bool:
        return self.share is not None and self.share > BUSY_SHARE
