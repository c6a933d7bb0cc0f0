"""How the ``kafka`` source is a member of its consumer group: its session, static membership.

Session: the group coordinator gives a member's partitions to another once
it has heard nothing from it for ``session.timeout.ms``. A member that
leaves cleanly (``close``) says so and is replaced at once; one that is
killed is noticed only when its session expires, and a restarted process is
a new member: its partitions come back only then (Kafka's default, 45 s).

Static membership (``group.instance.id``, KIP-345): a member that joins with
the instance id of one the coordinator still holds *replaces* it, with its
partitions, at once and without a rebalance. So a killed and restarted
bridge resumes in a second or two. Two processes with one instance id fence
each other (the older one's next request fails: ``FENCED_INSTANCE_ID``, a
fatal error that stops its source), so the id must be unique per running
instance: it is never derived from the route (the same name on two hosts).
The price: a static member's clean stop does not leave the group either, so
its partitions wait ``session_timeout`` before another member reads them.

No I/O here: settings and checks only.
"""

from __future__ import annotations

import re
from typing import Any, Final

from bridges import InvalidSetting

#: Kafka's bounds on a member's session timeout (its brokers' defaults of
#: ``group.min.session.timeout.ms`` and ``group.max.session.timeout.ms``), s.
MIN_SESSION: Final = 6.0
MAX_SESSION: Final = 1800.0
#: librdkafka's default heartbeat interval, ms (a third of the session at most).
_HEARTBEAT_MS: Final = 3000
#: librdkafka's default ``max.poll.interval.ms`` (it must be >= the session timeout).
_MAX_POLL_MS: Final = 300_000
#: Kafka's rule for a ``group.instance.id`` (as for topic names).
_INSTANCE_ID: Final = re.compile(r"[A-Za-z0-9._-]{1,249}")


def check_instance_id(instance_id: str | None) -> None:
    """Raises InvalidSetting for an id Kafka refuses (1 to 249 of ``A-Z a-z 0-9 . _ -``)."""
    if instance_id is None:
        return
    if not _INSTANCE_ID.fullmatch(instance_id) or instance_id in (".", ".."):
        raise InvalidSetting(
            "instance_id",
            f"{instance_id[:60]!r} is not a valid group.instance.id "
            "(1 to 249 of A-Z a-z 0-9 . _ -)",
        )


def group_settings(session_timeout: float, instance_id: str | None) -> dict[str, Any]:
    """librdkafka's consumer settings for the membership (see the module)."""
    session_ms = round(session_timeout * 1000)
    settings: dict[str, Any] = {
        "session.timeout.ms": session_ms,
        "heartbeat.interval.ms": min(_HEARTBEAT_MS, session_ms // 3),
        "max.poll.interval.ms": max(_MAX_POLL_MS, session_ms),
    }
    if instance_id is not None:
        settings["group.instance.id"] = instance_id
    return settings
