"""A progress bar over the runs of a sweep, on stderr.

On a terminal it redraws one line; otherwise (CI logs, pipes) it prints a
line when a run starts and when its progress crosses a quarter, so logs
stay short but show that the sweep is alive.
"""

import sys
import time

WIDTH = 24


class Progress:
    """total runs; update() as rounds complete; message() for one-off lines."""

    def __init__(self, total, stream=None):
        self.total = total
        self.done = 0
        self.stream = stream or sys.stderr
        self.tty = hasattr(self.stream, "isatty") and self.stream.isatty()
        self.started = time.monotonic()
        self.label = ""
        self._last_quarter = -1

    def start_run(self, label):
        """A new run begins: label it and draw the bar at its start."""
        self.label = label
        self._last_quarter = -1
        self.update(0, 1)

    def update(self, step, steps):
        """Draw the bar: finished runs plus the current run's step/steps."""
        fraction = (self.done + (step / steps if steps else 0)) / self.total if self.total else 1.0
        filled = int(round(fraction * WIDTH))
        elapsed = time.monotonic() - self.started
        eta = f" eta {elapsed / fraction - elapsed:4.0f}s" if 0.02 < fraction < 1 else ""
        line = (f"[{'#' * filled}{'.' * (WIDTH - filled)}] run {min(self.done + 1, self.total)}/{self.total} "
                f"{self.label} {step}/{steps}{eta}")
        if self.tty:
            self.stream.write("\r\033[K" + line)
        else:
            quarter = int(4 * step / steps) if steps else 4
            if quarter == self._last_quarter:
                return
            self._last_quarter = quarter
            self.stream.write(line + "\n")
        self.stream.flush()

    def finish_run(self):
        """The current run is over."""
        self.done += 1

    def message(self, text):
        """Print text on its own line without breaking the bar."""
        self.stream.write(("\r\033[K" if self.tty else "") + text + "\n")
        self.stream.flush()

    def close(self):
        """End the bar's line on a terminal."""
        if self.tty:
            self.stream.write("\n")
            self.stream.flush()
