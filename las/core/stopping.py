"""Stop requests: SIGINT (Ctrl-C) and SIGTERM (how SLURM, Kubernetes and `timeout` stop jobs).

Neither interrupts training where it stands — half way through an optimizer step the model and
its optimizer disagree, and the random state has been drawn from — they ask it to stop at the next
batch boundary, where everything can be saved and resumed bit-exactly. A second signal stops at
once (KeyboardInterrupt at the next boundary between Python statements), without saving.

While a run trains, the signals are also blocked on the main thread. A signal handled on a thread
that is inside oneDNN's CPU LSTM corrupts the heap (PyTorch 2.11: "corrupted size vs. prev_size",
in about one of three runs interrupted mid-batch; docs/archive/experiments.md#faults). Blocked there, they
are taken by another thread (Python then runs the handler on the main thread between statements)
or wait, pending, until `requested` collects them at the next batch boundary.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Callable, Iterator
from types import FrameType
from typing import Any

STOP_SIGNALS = {signal.SIGINT, signal.SIGTERM}


class StopRequests:
    """A context in which SIGINT and SIGTERM are recorded in `received` instead of acting."""

    def __init__(self) -> None:
        self.received: signal.Signals | None = None
        self.previous: dict[int, Any] = {}

    def __enter__(self) -> StopRequests:
        if threading.current_thread() is threading.main_thread():  # Python allows handlers only there
            for number in STOP_SIGNALS:
                self.previous[number] = signal.signal(number, self.handle)
                signal.siginterrupt(number, False)  # restart the system calls it lands in, not fail them
            signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
        return self

    def __exit__(self, *_: object) -> None:
        if not self.previous:
            return
        while pending := signal.sigpending() & STOP_SIGNALS:  # the run ends anyway: drop them
            signal.sigwait(pending)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)
        for number, handler in self.previous.items():
            signal.signal(number, handler)
        self.previous.clear()

    def handle(self, number: int, _: FrameType | None = None) -> None:
        if self.received is not None:
            raise KeyboardInterrupt
        self.received = signal.Signals(number)

    @property
    def requested(self) -> bool:
        """Whether a stop was asked for; takes the signals left pending on the blocked main thread."""
        if self.previous:
            while pending := signal.sigpending() & STOP_SIGNALS:
                self.handle(signal.sigwait(pending))
        return self.received is not None


@contextlib.contextmanager
def deferred_interrupts() -> Iterator[Callable[[], None]]:
    """For loops outside training (decoding): SIGINT and SIGTERM blocked on the main thread, for
    the reason above — another thread takes them, and Python raises KeyboardInterrupt on the main
    thread between statements, never inside native code — and a check to call between batches
    that stops if one is left pending (when no other thread could take it). Inside training,
    where StopRequests blocks them already, the check leaves them to it."""
    if threading.current_thread() is not threading.main_thread():
        yield lambda: None
        return
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
    owner = not (STOP_SIGNALS & previous)

    def check() -> None:
        if owner and (pending := signal.sigpending() & STOP_SIGNALS):
            signal.sigwait(pending)
            raise KeyboardInterrupt

    try:
        yield check
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)
