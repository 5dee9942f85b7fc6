"""Stop requests: SIGINT (Ctrl-C) and SIGTERM (how SLURM, Kubernetes and `timeout` stop jobs).

Neither interrupts training where it stands — half way through an optimizer step the model and
its optimizer disagree, and the random state has been drawn from — they ask it to stop at the next
batch boundary, where everything can be saved and resumed bit-exactly. A second signal stops at
once (KeyboardInterrupt), without saving.
"""

from __future__ import annotations

import signal
import threading
from types import FrameType
from typing import Any

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class StopRequests:
    """A context in which SIGINT and SIGTERM are recorded in `received` instead of acting."""

    def __init__(self) -> None:
        self.received: signal.Signals | None = None
        self.previous: dict[int, Any] = {}

    def __enter__(self) -> StopRequests:
        if threading.current_thread() is threading.main_thread():  # Python allows handlers only there
            for number in STOP_SIGNALS:
                self.previous[number] = signal.signal(number, self.handle)
        return self

    def __exit__(self, *_: object) -> None:
        for number, handler in self.previous.items():
            signal.signal(number, handler)
        self.previous.clear()

    def handle(self, number: int, _: FrameType | None) -> None:
        if self.received is not None:
            raise KeyboardInterrupt
        self.received = signal.Signals(number)

    @property
    def requested(self) -> bool:
        return self.received is not None
