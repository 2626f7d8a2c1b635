"""A simulated step's timeline, kept compact.

The engine's events stay in the C result (40 bytes each: start, duration,
device, kind, lane, stage, micro-batch, layer, peer); :class:`Timeline` is a
read-only sequence over them that builds a Python tuple only for the events
read, a block at a time while iterating, and :meth:`Timeline.write_chrome_trace`
streams the Chrome trace to a file block by block.  So a timeline of n events
costs about 40 n bytes however it is used (``benchmarks/bench_timeline.py``
measures it), and reading it stops on Ctrl-C between blocks.
"""
from __future__ import annotations

import operator
import os
from typing import Any, Iterator, Sequence, overload

from . import _files

#: Events converted to Python at a time while iterating or writing a trace.
BLOCK = 4096

#: Chrome-trace thread of each engine lane.
LANES = {0: "compute", 1: "send next", 2: "send previous", 3: "gradient sync"}


class Timeline(Sequence):
    """The events of one simulated step, in generation order: each is a
    tuple ``(start, duration, device, kind, lane, stage, microbatch, peer)``
    (seconds; ``-1`` means none).  A sequence: ``len``, indexing, slicing
    and iteration build only the tuples asked for.  Equal to any sequence of
    the same tuples."""

    __slots__ = ("_raw", "_items")

    def __init__(self, raw: Any = None, items: Sequence[tuple] | None = None) -> None:
        # raw: the C result that owns the events; items: plain tuples
        # (an unpickled timeline)
        self._raw = raw
        self._items = None if raw is not None else tuple(items or ())

    def __len__(self) -> int:
        return self._raw.n_events if self._raw is not None else len(self._items)

    def _block(self, start: int, stop: int) -> list[tuple]:
        if self._raw is None:
            return list(self._items[start:stop])
        return self._raw.event_slice(start, stop, True)

    @overload
    def __getitem__(self, i: int) -> tuple: ...

    @overload
    def __getitem__(self, i: slice) -> list[tuple]: ...

    def __getitem__(self, i: Any) -> Any:
        n = len(self)
        if isinstance(i, slice):
            start, stop, step = i.indices(n)
            if step == 1:
                return self._block(start, stop)
            return [self[j] for j in range(start, stop, step)]
        j = operator.index(i)
        if j < 0:
            j += n
        if not 0 <= j < n:
            raise IndexError(f"timeline index {i} out of range (0 to {n - 1})")
        return self._block(j, j + 1)[0]

    def __iter__(self) -> Iterator[tuple]:
        n = len(self)
        for start in range(0, n, BLOCK):
            yield from self._block(start, min(n, start + BLOCK))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, (Timeline, list, tuple)):
            return NotImplemented
        if len(self) != len(other):
            return False
        return all(a == b for a, b in zip(self, other))

    __hash__ = None  # type: ignore[assignment]

    def __reduce__(self) -> tuple:
        return (Timeline, (None, tuple(self)))

    def __repr__(self) -> str:
        return f"Timeline({len(self)} events)"

    def chrome_trace_events(self, devices: int) -> Iterator[dict]:
        """The Chrome trace events: process and thread names, then one
        complete event per timeline event."""
        for d in range(devices):
            yield {"name": "process_name", "ph": "M", "pid": d, "args": {"name": f"device {d}"}}
            for lane, label in LANES.items():
                yield {"name": "thread_name", "ph": "M", "pid": d, "tid": lane,
                       "args": {"name": label}}
        for start, dur, dev, kind, lane, stage, mb, peer in self:
            args: dict[str, Any] = {"stage": stage}
            if mb >= 0:
                args["microbatch"] = mb
            if peer >= 0:
                args["to"] = peer
            yield {"name": kind if mb < 0 else f"{kind} {mb}", "cat": kind, "ph": "X",
                   "ts": start * 1e6, "dur": dur * 1e6, "pid": dev, "tid": lane, "args": args}

    def write_chrome_trace(self, path: str | os.PathLike, devices: int) -> None:
        """Stream the Chrome trace JSON to ``path`` a block of events at a
        time (atomically: a failed write leaves the old file)."""
        import json

        enc = json.JSONEncoder(allow_nan=False, separators=(", ", ": "))
        with _files.atomic_stream(path) as f:
            f.write('{"traceEvents": [')
            buf: list[str] = []
            first = True
            for ev in self.chrome_trace_events(devices):
                buf.append(enc.encode(ev))
                if len(buf) >= BLOCK:
                    f.write(("" if first else ", ") + ", ".join(buf))
                    first, buf = False, []
            if buf:
                f.write(("" if first else ", ") + ", ".join(buf))
            f.write('], "displayTimeUnit": "ms"}')
