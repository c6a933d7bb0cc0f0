"""Ask a Redis server whether it keeps what it acknowledges: ``CONFIG GET appendonly``.

Without the append-only file (``appendonly no``) Redis holds the streams in
memory and in RDB snapshots: an XADD it answered is lost when it is killed
before the next snapshot. With it, ``appendfsync`` decides what a power cut
loses (``always``: nothing; ``everysec``, the default: up to a second;
``no``: what the OS had not written, up to ~30 s); a SIGKILL of Redis alone
loses nothing either way (the OS holds what was written). A server may
disable or rename CONFIG (managed services do): then the answer is "could
not ask", never an error.
"""

from __future__ import annotations

import coredis
import coredis.exceptions
import trio

from ..._guarantee import AT_MOST_ONCE, DURABLE, NOT_ASKED, PROBE_TIMEOUT, Guarantee


def _text(value: object) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


async def ask_persistence(client: coredis.Redis[bytes]) -> Guarantee:
    """What the server keeps across its restart, from its ``appendonly`` and ``appendfsync``."""
    try:
        with trio.fail_after(PROBE_TIMEOUT):
            answer = await client.config_get(["appendonly", "appendfsync"])
    except trio.TooSlowError:
        return Guarantee(NOT_ASKED, f"could not ask: no answer to CONFIG GET in {PROBE_TIMEOUT} s")
    except coredis.exceptions.RedisError as exc:  # (CONFIG disabled, renamed, or not allowed)
        return Guarantee(NOT_ASKED, f"could not ask: CONFIG GET failed: {exc}")
    settings = {_text(key).lower(): _text(value).lower() for key, value in answer.items()}
    appendonly = settings.get("appendonly")
    fsync = settings.get("appendfsync", "?")
    if appendonly is None:
        return Guarantee(NOT_ASKED, "could not ask: CONFIG GET appendonly returned nothing")
    if appendonly != "yes":
        return Guarantee(
            AT_MOST_ONCE,
            "appendonly no: Redis keeps the streams in memory and snapshots, and a SIGKILL "
            "loses what it acknowledged since the last snapshot (set appendonly yes)",
        )
    power = {
        "always": "a power cut loses nothing",
        "everysec": "a power cut loses up to 1 s",
        "no": "a power cut loses what the OS had not written (up to ~30 s)",
    }.get(fsync, "a power cut: see appendfsync")
    return Guarantee(DURABLE, f"appendonly yes, appendfsync {fsync}: {power}")
