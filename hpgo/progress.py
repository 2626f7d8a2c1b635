"""A tiny tqdm-style progress line with an ETA, for long sweeps.

No dependency: one line on a text stream (stderr by default), redrawn in
place with a carriage return at most every ``min_interval`` seconds, e.g.::

    sweep [############..................] 26/65 cases  40%  00:05<00:08

:func:`interactive` decides the default of ``progress=None`` arguments: on
when the stream is a terminal or Python runs in a Jupyter kernel (where the
line is redrawn in the cell's output), off otherwise (scripts, CI, pipes).
"""
from __future__ import annotations

import sys
import time
from typing import Optional, TextIO

__all__ = ["Progress", "interactive", "wanted", "format_time"]


def _in_jupyter() -> bool:
    ipy = sys.modules.get("IPython")
    if ipy is None or "ipykernel" not in sys.modules:
        return False
    try:
        shell = ipy.get_ipython()  # type: ignore[attr-defined]
    except Exception:  # pragma: no cover - a broken IPython
        return False
    return shell is not None and type(shell).__name__ == "ZMQInteractiveShell"


def interactive(stream: Optional[TextIO] = None) -> bool:
    """True when ``stream`` (stderr by default) is a terminal or Python runs
    in a Jupyter kernel."""
    stream = sys.stderr if stream is None else stream
    try:
        if stream.isatty():
            return True
    except (AttributeError, ValueError):
        pass
    return _in_jupyter()


def wanted(progress: Optional[bool], stream: Optional[TextIO] = None) -> bool:
    """The ``progress=`` convention: True / False force it, None means
    :func:`interactive`."""
    if progress is None:
        return interactive(stream)
    if not isinstance(progress, bool):
        raise TypeError(f"progress must be True, False or None, not {type(progress).__name__}")
    return progress


def format_time(seconds: float) -> str:
    """00:05, 03:20, 1:02:03."""
    s = int(max(0.0, seconds) + 0.5)
    h, rem = divmod(s, 3600)
    m, s = divmod(rem, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m:02d}:{s:02d}"


class Progress:
    """A progress line over ``total`` steps: call :meth:`update` with the
    number done, :meth:`close` at the end (clears the line on a terminal,
    leaves the final state in a notebook).  Nothing is drawn before
    ``delay`` seconds have passed, so quick runs stay silent."""

    def __init__(self, total: int, *, stream: Optional[TextIO] = None, desc: str = "",
                 unit: str = "", width: int = 30, min_interval: float = 0.1,
                 delay: float = 0.0) -> None:
        self.total = max(0, int(total))
        self.stream = sys.stderr if stream is None else stream
        self.desc, self.unit, self.width = desc, unit, width
        self.min_interval = min_interval
        self.delay = delay
        self._drawn = False
        self.done = 0
        self.start = time.monotonic()
        self._last = -1.0
        self._jupyter = _in_jupyter() and not _isatty(self.stream)
        self._len = 0

    def line(self, done: int, now: Optional[float] = None) -> str:
        """The text of the line after ``done`` steps (no control characters)."""
        now = time.monotonic() if now is None else now
        frac = done / self.total if self.total else 1.0
        fill = int(round(frac * self.width))
        elapsed = now - self.start
        if done > 0 and done < self.total:
            eta = format_time(elapsed / done * (self.total - done))
        elif done >= self.total:
            eta = "00:00"
        else:
            eta = "?"
        head = f"{self.desc} " if self.desc else ""
        unit = f" {self.unit}" if self.unit else ""
        return (f"{head}[{'#' * fill}{'.' * (self.width - fill)}] {done}/{self.total}{unit} "
                f"{frac * 100:3.0f}%  {format_time(elapsed)}<{eta}")

    def update(self, done: int) -> None:
        self.done = done
        now = time.monotonic()
        if now - self.start < self.delay:
            return
        if done < self.total and done > 0 and now - self._last < self.min_interval:
            return
        self._drawn = True
        self._last = now
        text = self.line(done, now)
        if self._jupyter:
            # a notebook's output area honours "\r" but not ANSI erase: pad instead
            pad = " " * max(0, self._len - len(text))
            self.stream.write("\r" + text + pad)
        else:
            self.stream.write("\r" + text + "\x1b[K")
        self._len = len(text)
        self.stream.flush()

    def close(self) -> None:
        if not self._drawn:
            return
        if self._jupyter:
            self.stream.write("\n")
        else:
            self.stream.write("\r\x1b[K")
        self.stream.flush()


def _isatty(stream: TextIO) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False
