"""`reward_timeout`: a reward call that does not return within it stops the run, naming the call's first prompt.

In the main thread (the `evotune` command's loop, a Ray actor's method) the call runs where it was called, under a
real-time timer whose signal raises inside it, so a reward that uses the main thread's signals itself (math-verify's
own timeouts) still runs there; such a reward replaces the timer with its own while it runs. Elsewhere (a Python
caller's thread) the call runs on a daemon thread that is waited for at most the timeout and, if it never returns,
left behind: Python cannot stop a thread, but the run stops and the process can exit.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable
from typing import Any


class RewardTimeout(Exception):
    """The reward call ran past `reward_timeout` seconds."""


def call_with_timeout(function: Callable[..., Any], timeout: float | None, **kwargs: Any) -> Any:
    """`function(**kwargs)`, or RewardTimeout once it has run `timeout` seconds (None or 0: no limit)."""
    if not timeout:
        return function(**kwargs)
    if threading.current_thread() is threading.main_thread() and hasattr(signal, "setitimer"):
        return _on_a_timer(function, timeout, kwargs)
    return _on_a_thread(function, timeout, kwargs)


def _on_a_timer(function: Callable[..., Any], timeout: float, kwargs: dict[str, Any]) -> Any:
    def expired(signum: int, frame: Any) -> None:
        raise RewardTimeout

    previous = signal.signal(signal.SIGALRM, expired)
    signal.setitimer(signal.ITIMER_REAL, timeout)
    try:
        return function(**kwargs)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def _on_a_thread(function: Callable[..., Any], timeout: float, kwargs: dict[str, Any]) -> Any:
    outcome: dict[str, Any] = {}

    def run() -> None:
        try:
            outcome["value"] = function(**kwargs)
        except BaseException as error:  # noqa: BLE001 - handed to the caller's thread
            outcome["error"] = error

    thread = threading.Thread(target=run, name="evotune-reward", daemon=True)
    thread.start()
    thread.join(timeout)
    if thread.is_alive():
        raise RewardTimeout
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]
