"""The time a suite has left, from the wall times of the rows its lanes finished.

Lanes judge side by side, so the time left is the rows left times a row's
time, over the lanes still busy, and never less than the task with the most
rows left takes on its one lane. A lane's first row paid the lane's start
(the judges' processes, the compile caches still cold) and says little of
the rows after it: the estimate waits for rows past each lane's first, and
says "estimating..." until it has them.

A suite judges its tasks quickest first (suite/schedule.py), so the rows of
tasks not started yet are slower, as a rule, than those finished: while
such rows are left the figure is a floor, and says "at least". Replayed on
four recorded passes on H100s (bench/eta_replay.py), the pace so far gave a
figure at or under the time truly left at 86-97 % of the rows, a median
0.35-0.70 of it.
"""

from __future__ import annotations

from typing import Any

MIN_ROWS = 2  # rows past their lane's first before any estimate


class Eta:
    """Time left in a suite judged on `lanes` lanes, updated row by row."""

    def __init__(self, rows_left: dict[str, int], lanes: int) -> None:
        self.rows_left = {task: count for task, count in rows_left.items() if count > 0}
        self.lanes = max(1, lanes)
        self._lanes_seen: set[Any] = set()
        self._tasks_seen: set[Any] = set()  # tasks with a row finished
        self._seconds: list[float] = []  # wall times of rows past their lane's first

    def finished(self, row: dict[str, Any]) -> None:
        """Count one row judged (its task's, on its lane, in its wall time)."""
        task = row.get("task")
        self._tasks_seen.add(task)
        if task in self.rows_left:
            self.rows_left[task] -= 1
            if self.rows_left[task] <= 0:
                del self.rows_left[task]
        lane = row.get("lane")
        if lane not in self._lanes_seen:
            self._lanes_seen.add(lane)  # the lane's first row: its start, not its pace
            return
        if row.get("wall_s") is not None:
            self._seconds.append(float(row["wall_s"]))

    def seconds_left(self) -> float | None:
        """Seconds left, or None until enough rows are in."""
        if not self.rows_left:
            return 0.0
        if len(self._seconds) < MIN_ROWS:
            return None
        per_row = sum(self._seconds) / len(self._seconds)
        rows = sum(self.rows_left.values())
        busy = min(self.lanes, len(self.rows_left))
        return max(rows * per_row / busy, max(self.rows_left.values()) * per_row)

    def floor(self) -> bool:
        """Whether rows of tasks not started yet are left: slower ones, quickest first."""
        return any(task not in self._tasks_seen for task in self.rows_left)

    def text(self) -> str:
        """"about 3 min left", "at least 40 s left", "a few seconds left", "estimating..."
        or "" once done."""
        seconds = self.seconds_left()
        if seconds is None:
            return "estimating..."
        if not self.rows_left:
            return ""
        how = "at least" if self.floor() else "about"
        if seconds < 10:  # rows in progress may take longer: no figure this small
            return f"{how} a few seconds left" if how == "at least" else "a few seconds left"
        return f"{how} {seconds / 60:.0f} min left" if seconds >= 90 else \
            f"{how} {seconds:.0f} s left"
