"""Progress of a long job (a benchmark, the optimizer's stages) and the short summary it ends with.

On a terminal it is one live line that redraws (rich): the stage, tasks done / total as a bar, what runs now (a
task, a trial, a candidate) and the elapsed time; event lines (``log``) print above it. Where stdout is not a
terminal (a log file, CI, ``| tee``) every event is one plain line, so a log reads top to bottom::

    [   0:12] stage 1 prompt init: 0/6 - candidate planner#2
    [   1:40] stage 1 prompt init: 1/6 done - chem_react_lsr_01 0.741

The API, for any job (used by ``python -m benchmarks run`` and ``scripts/bench_harness.py``)::

    from harness.app.progress import Progress, print_summary

    with Progress("optimize") as progress:
        progress.stage("stage 1: prompt initialisation", total=6)   # a new bar; done goes back to 0
        progress.item("candidate planner#2")                         # what runs now (replaces the previous item)
        progress.advance(note="chem_react_lsr_01 0.741")             # one of the stage's tasks is done
        progress.log("stage 1 kept the rewrite of the Planner")      # a line that stays
    print_summary("frozen: the trained harness", [{"harness": "trained", "acc_0.01 ID": 0.75}],
                  notes=["report: outputs/optimize/<run>/report.md"])

Every method is safe to call from worker threads (executor callbacks); a ``Progress`` never raises on output.
"""

from __future__ import annotations

import sys
import threading
import time
from typing import Any, Mapping, Sequence

from rich.console import Console

__all__ = ["Progress", "print_summary", "format_seconds"]


def format_seconds(seconds: float) -> str:
    """``75.3`` -> ``"1 min 15 s"``, ``3725`` -> ``"1 h 2 min"``, ``9.2`` -> ``"9.2 s"``."""
    seconds = max(0.0, float(seconds))
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, secs = divmod(int(round(seconds)), 60)
    if minutes < 60:
        return f"{minutes} min {secs} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes} min"


def _clock(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    return f"{minutes:4d}:{secs:02d}"


def _elapsed_column() -> Any:
    from rich.progress import ProgressColumn
    from rich.text import Text

    class Elapsed(ProgressColumn):
        """The job's elapsed time (not the stage's), redrawn with the display."""

        def __init__(self, start: float) -> None:
            super().__init__()
            self.start = start

        def render(self, task: Any) -> Text:
            return Text(_clock(time.monotonic() - self.start).strip(), style="progress.elapsed")

    return Elapsed


class Progress:
    """A job's progress: ``stage`` -> ``item`` / ``advance`` / ``log`` ... -> ``close`` (or a ``with`` block).

    ``live``: None = rich's live display when ``console`` is a terminal, plain lines otherwise. ``console``:
    default a new ``rich.console.Console`` on stdout."""

    def __init__(self, title: str, *, console: Console | None = None, live: bool | None = None) -> None:
        self.title = title
        self.console = console or Console()
        self.live = self.console.is_terminal if live is None else bool(live)
        self.stage_name = ""
        self.done = 0
        self.total: int | None = None
        self.current = ""
        self._start = time.monotonic()
        self._lock = threading.RLock()
        self._bar: Any = None  # rich.progress.Progress while live
        self._bar_task: Any = None
        if self.live:
            from rich.progress import BarColumn, MofNCompleteColumn, SpinnerColumn, TextColumn
            from rich.progress import Progress as RichProgress

            self._bar = RichProgress(SpinnerColumn(), TextColumn("[bold]{task.fields[stage]}"), BarColumn(),
                                     MofNCompleteColumn(), TextColumn("{task.fields[item]}"), _elapsed_column()(self._start),
                                     console=self.console, transient=False)
            self._bar.start()

    @property
    def elapsed(self) -> float:
        """Seconds since the job started."""
        return time.monotonic() - self._start

    # -- events ----------------------------------------------------------------------------------------------
    def stage(self, name: str, total: int | None = None, done: int = 0) -> None:
        """A new stage with ``total`` tasks (None: unknown), ``done`` of them already finished (a resumed run)."""
        with self._lock:
            self.stage_name, self.total, self.done, self.current = name, total, done, ""
            if self._bar is not None:
                if self._bar_task is not None:
                    self._bar.update(self._bar_task, visible=False)
                self._bar_task = self._bar.add_task("", total=total, completed=done, stage=name, item="")
            else:
                self._line(self._status())

    def item(self, text: str) -> None:
        """What runs now: ``"task chem_react_lsr_01"``, ``"trial 3"``, ``"candidate planner#2"``."""
        with self._lock:
            self.current = text
            if self._bar is not None and self._bar_task is not None:
                self._bar.update(self._bar_task, item=text)
            elif self._bar is None:
                self._line(f"{self._status()} - {text}")

    def advance(self, n: int = 1, note: str = "") -> None:
        """``n`` tasks of the stage are done; ``note`` says what came of them (``"chem_react_lsr_01 acc 1/0"``)."""
        with self._lock:
            self.done += n
            if self._bar is not None and self._bar_task is not None:
                self._bar.update(self._bar_task, advance=n)
                if note:
                    self._bar.console.print(note, markup=False, highlight=False, soft_wrap=True)
            elif self._bar is None:
                self._line(f"{self._status()} done" + (f" - {note}" if note else ""))

    def log(self, text: str) -> None:
        """A line that stays (above the live display on a terminal)."""
        with self._lock:
            if self._bar is not None:
                self._bar.console.print(text, markup=False, highlight=False, soft_wrap=True)
            else:
                self._line(text)

    def close(self) -> None:
        """Stop the live display (the last state stays on screen); plain output needs nothing."""
        with self._lock:
            if self._bar is not None:
                self._bar.stop()
                self._bar = None

    def __enter__(self) -> "Progress":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- plain lines -----------------------------------------------------------------------------------------
    def _status(self) -> str:
        count = f"{self.done}/{self.total}" if self.total is not None else f"{self.done}"
        return f"{self.stage_name or self.title}: {count}"

    def _line(self, text: str) -> None:
        try:
            stream = self.console.file
            stream.write(f"[{_clock(self.elapsed)}] {text}\n")
            stream.flush()
        except (OSError, ValueError):  # a closed pipe must not end the job
            pass


def print_summary(title: str, rows: Sequence[Mapping[str, Any]], *, notes: Sequence[str] = (),
                  console: Console | None = None, digits: int = 3) -> None:
    """A job's closing words: ``title``, a small table (one row per mapping; columns in first-seen order; floats
    to ``digits`` decimals) and a few ``notes`` lines. A rich table on a terminal, a Markdown table otherwise
    (readable in a log and pasteable into notes)."""
    console = console or Console()
    columns: list[str] = []
    for row in rows:
        columns += [str(k) for k in row if str(k) not in columns]

    def cell(value: Any) -> str:
        if isinstance(value, float):
            return "nan" if value != value else f"{value:.{digits}f}"
        return "" if value is None else str(value)

    if console.is_terminal:
        from rich.table import Table

        table = Table(title=title, title_justify="left")
        for col in columns:
            table.add_column(col, justify="left" if col == columns[0] else "right")
        for row in rows:
            table.add_row(*(cell(row.get(col)) for col in columns))
        console.print(table if rows else f"[bold]{title}[/]")
        for note in notes:
            console.print(note, markup=False, highlight=False, soft_wrap=True)
        return
    lines = [title]
    if rows:
        lines += ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
        lines += ["| " + " | ".join(cell(row.get(col)) for col in columns) + " |" for row in rows]
    lines += list(notes)
    try:
        console.file.write("\n".join(lines) + "\n")
        console.file.flush()
    except (OSError, ValueError):
        print("\n".join(lines), file=sys.stderr)
