"""SIGTERM (a scheduler's time limit, `kill`) as an exception raised where the run is, so its log says why it ended.

A checkpoint being saved is finished first (`held`): a signal in the middle of a save would otherwise leave the new
checkpoint beside the previous epoch's sidecar, which the next start discards (embinit.training.checkpoint).
"""

from __future__ import annotations

import contextlib
import signal
import threading
from typing import Iterator

_state = {"held": False, "pending": None}


class Terminated(SystemExit):
    """The run was ended by a signal; its exit status is the shell's 128 + the signal's number."""

    def __init__(self, signum: int):
        super().__init__(128 + signum)
        self.signal = signal.Signals(signum)


def _stop(signum: int, frame) -> None:
    if _state["held"]:
        _state["pending"] = signum
    else:
        raise Terminated(signum)


@contextlib.contextmanager
def terminated_on_sigterm() -> Iterator[None]:
    """Raise `Terminated` in the block when SIGTERM arrives (only in the main thread, where Python runs handlers);
    the previous handler is put back after."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, _stop)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
        _state.update(held=False, pending=None)


@contextlib.contextmanager
def held() -> Iterator[None]:
    """Finish the block before a SIGTERM that arrives inside it takes effect."""
    _state["held"] = True
    try:
        yield
    finally:
        _state["held"] = False
    if _state["pending"] is not None:
        raise Terminated(_state["pending"])
