"""The webhook receiver killed under the http sink: nothing it answered 2xx is lost.

A small run of ``bench/crash/target_crash.py``: file inbox -> http sink ->
a receiver that fsyncs each body before its 204 (``_store_receiver.py``, its
own process), SIGKILLed once mid-stream and started again.
"""

from __future__ import annotations

from family_kit import target_crash_run


def test_receiver_sigkill_loses_nothing_answered() -> None:
    target_crash_run(["http"], [])
