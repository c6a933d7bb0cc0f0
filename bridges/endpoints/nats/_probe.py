"""Ask JetStream whether a stream keeps what it acknowledges: its storage type.

A stream with ``storage: memory`` acknowledges a publish and loses it when
nats-server restarts; ``storage: file`` keeps it across a SIGKILL (the OS
holds what was written). What a power cut loses depends on the server's
``sync_interval`` (``jetstream { sync_interval: ... }``: 2 minutes by
default, ``always`` for an fsync per write), which a client cannot ask: the
answer says so.
"""

from __future__ import annotations

from typing import Any

import trio

from ..._guarantee import AT_MOST_ONCE, DURABLE, NOT_ASKED, PROBE_TIMEOUT, Guarantee

_POWER_CUT = (
    "a power cut loses what the server had not fsynced (its sync_interval: 2 min by default, "
    "which a client cannot ask)"
)


async def ask_storage(aio: Any, client: Any, stream: str = "", subject: str = "") -> Guarantee:
    """The storage of ``stream`` (or of the stream that stores ``subject``)."""
    try:
        with trio.fail_after(PROBE_TIMEOUT):
            js = await aio.call(client.jetstream)
            if not stream:
                stream = await aio.run(js.find_stream_name_by_subject, subject)
            info = await aio.run(js.stream_info, stream)
    except trio.TooSlowError:
        return Guarantee(NOT_ASKED, f"could not ask: no answer from JetStream in {PROBE_TIMEOUT} s")
    except Exception as exc:  # (no stream yet, no JetStream, not allowed: nats-py's errors)
        what = f"stream {stream}" if stream else f"the stream of {subject}"
        return Guarantee(NOT_ASKED, f"could not ask for {what}: {exc or type(exc).__name__}")
    storage = getattr(info.config.storage, "value", info.config.storage)
    if storage == "memory":
        return Guarantee(
            AT_MOST_ONCE,
            f"stream {stream} has storage: memory, lost when nats-server restarts "
            "(create it with storage: file)",
        )
    return Guarantee(DURABLE, f"stream {stream} has storage: {storage}; {_POWER_CUT}")
