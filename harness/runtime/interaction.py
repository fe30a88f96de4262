"""Talking to a running agent: queued user messages and pause / resume / stop, honoured at safe boundaries.

A :class:`RunControl` is shared by the run (which calls :meth:`checkpoint` between steps, never inside a tool
call or an SR run) and whoever steers it (the terminal, the web app). Why a boundary: a message or a pause in
the middle of a tool call would leave the conversation half-written; at a boundary the next prompt simply
carries the message. The first stop ends the run at the next boundary (the running tool finishes and its work
is kept); a second stop sets the run's cancel flag, which the SR workers watch, so a running engine is killed
within a few seconds.

Every message and control is recorded as a node of the run (kinds ``user_message`` and ``control``), so a
resumed or viewed run shows what the user said and when. Messages are recorded when delivered (beside the step
that sees them); controls when asked for; messages still queued when the run ends are recorded as undelivered.
"""

from __future__ import annotations

import threading
import time
from typing import Any, Callable

from harness.runtime.nodes import NodeKind, NodeType

USER_MESSAGE = NodeKind.of(NodeType.USER_MESSAGE)
CONTROL = NodeKind.of(NodeType.CONTROL)
MAX_MESSAGE_CHARS = 4000
Recorder = Callable[..., Any]  # record(kind, response=text, info={...}) -> node


class RunControl:
    """Message queue plus pause / stop flags of one run; thread-safe (see the module docstring)."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._queue: list[tuple[float, str]] = []
        self._paused = False
        self._stops = 0
        self._input_ended = False
        self._phase = "running"  # running | paused (parked at a boundary) | waiting (for the user's message)
        self._cancel: threading.Event | None = None
        self._record: Recorder | None = None
        self._budget: Any = None
        self._credited_until = 0.0  # held time up to here is already given back to the budget
        self._pending: list[tuple[str, str, dict[str, Any]]] = []  # controls asked before the run started

    # -- the run's side -------------------------------------------------------------------------------------
    def bind(self, cancel_event: threading.Event, record: Recorder, budget: Any = None) -> None:
        """Called by the run when it starts: where a second stop goes, how nodes are recorded, and the budget
        tracker whose clock stops while the user holds the run (``add_paused``)."""
        with self._cond:
            self._cancel, self._record, self._budget = cancel_event, record, budget
            pending, self._pending = self._pending, []
            if self._stops >= 2:
                cancel_event.set()
        for kind, text, info in pending:
            self._write(kind, text, info)

    def checkpoint(self, where: str = "") -> list[str]:
        """A safe boundary: park here while paused (until resume or stop), then hand over the queued messages
        (each recorded as a ``user_message`` node). Callers check :attr:`stop_requested` afterwards."""
        held = time.monotonic()
        with self._cond:
            while self._paused and not self._stops:
                self._phase = "paused"
                self._cond.wait(0.5)
            self._phase = "running"
            if not self._stops:  # a stopping run takes no more messages: close() records them undelivered
                taken, self._queue = self._queue, []
            else:
                taken = []
        self._held(held)
        for queued_at, text in taken:
            self._write(USER_MESSAGE, text, {"queued_at": round(queued_at, 3), "delivered_at": where})
        return [text for _, text in taken]

    def wait_for_message(self, where: str = "") -> list[str]:
        """The agent has nothing to do: wait for the user's next message (or a stop, or the end of the input).
        Returns the messages; an empty list means stop or no more input."""
        held = time.monotonic()
        with self._cond:
            while not self._queue and not self._stops and not self._input_ended:
                self._phase = "waiting"
                self._cond.wait(0.5)
            self._phase = "running"
        self._held(held)
        return self.checkpoint(where) if not self._stops else []

    def close(self) -> None:
        """The run is over: record what was never delivered."""
        with self._cond:
            left, self._queue = self._queue, []
        for queued_at, text in left:
            self._write(USER_MESSAGE, text, {"queued_at": round(queued_at, 3), "delivered": False})

    # -- the user's side ------------------------------------------------------------------------------------
    def send(self, text: str) -> None:
        """Queue a message for the next safe boundary."""
        text = str(text).strip()
        if not text:
            raise ValueError("empty message")
        if len(text) > MAX_MESSAGE_CHARS:
            raise ValueError(f"message longer than {MAX_MESSAGE_CHARS} characters")
        with self._cond:
            if self._stops:
                raise ValueError("the run is stopping")
            self._queue.append((time.time(), text))
            self._cond.notify_all()

    def pause(self) -> None:
        self._control("pause", lambda: setattr(self, "_paused", True))

    def resume(self) -> None:
        self._control("resume", lambda: setattr(self, "_paused", False))

    def stop(self) -> int:
        """First call: stop at the next boundary. Second: interrupt the running tool or SR run too."""
        def flag() -> None:
            self._stops += 1
            if self._stops >= 2 and self._cancel is not None:
                self._cancel.set()

        self._control("stop", flag)
        return self._stops

    def end_input(self) -> None:
        """No more messages will come (the terminal's input closed): waiting turns end the run."""
        with self._cond:
            self._input_ended = True
            self._cond.notify_all()

    # -- state ----------------------------------------------------------------------------------------------
    @property
    def stop_requested(self) -> bool:
        return self._stops > 0

    @property
    def paused(self) -> bool:
        return self._paused

    @property
    def phase(self) -> str:
        """``running``, ``paused`` (parked at a boundary) or ``waiting`` (for the user's next message)."""
        return self._phase

    @property
    def queued(self) -> int:
        with self._cond:
            return len(self._queue)

    def _control(self, action: str, change: Callable[[], None]) -> None:
        with self._cond:
            change()
            self._cond.notify_all()
            info = {"action": action, "stops": self._stops, "at": round(time.time(), 3)}
            if self._record is None:
                self._pending.append((CONTROL, action, info))
                return
        self._write(CONTROL, action, info)

    def _held(self, since: float) -> None:
        """Give the time a thread was held back to the budget; overlapping holds (two branches parked at once)
        are counted once."""
        now = time.monotonic()
        with self._cond:
            start = max(since, self._credited_until)
            self._credited_until = max(self._credited_until, now)
        if now - start > 0.01 and self._budget is not None and hasattr(self._budget, "add_paused"):
            self._budget.add_paused(now - start)

    def _write(self, kind: str, text: str, info: dict[str, Any]) -> None:
        if self._record is not None:
            self._record(kind, response=text, info=info)


def add_user_text(buffer: list[dict[str, Any]], texts: list[str]) -> None:
    """Put the user's messages into a conversation: onto its last user turn, or as a new one."""
    if not texts:
        return
    text = "Message from the user: " + "\n".join(texts)
    if buffer and buffer[-1].get("role") == "user" and isinstance(buffer[-1].get("content"), str):
        buffer[-1] = {**buffer[-1], "content": f"{buffer[-1]['content']}\n\n{text}"}
    else:
        buffer.append({"role": "user", "content": text})


def read_terminal(control: RunControl, stream: Any) -> threading.Thread:
    """Feed lines of ``stream`` (stdin) to ``control`` in a daemon thread: ``/pause``, ``/resume``, ``/stop`` are
    controls, any other line a message; the end of the input ends waiting turns."""

    def loop() -> None:
        for line in stream:
            line = line.strip()
            if not line:
                continue
            command = {"/pause": control.pause, "/resume": control.resume, "/stop": control.stop}.get(line)
            try:
                command() if command else control.send(line)
            except ValueError:
                pass
        control.end_input()

    thread = threading.Thread(target=loop, name="terminal-input", daemon=True)
    thread.start()
    return thread
