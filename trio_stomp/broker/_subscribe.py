"""What a SUBSCRIBE asks for, sans-IO: its id, ack mode, prefetch window and selector.

Checked before the session changes anything, so a SUBSCRIBE that breaks a
rule or a limit is an ERROR that leaves the session as it was.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import NamedTuple

from ..frame import ACK_MODES, AckMode, Headers
from ._config import Limits
from ._destinations import prefetch_window
from ._selector import Selector, subscription_selector
from ._transactions import ClientError


class SubscribeOptions(NamedTuple):
    """A SUBSCRIBE's choices (see :class:`~._destinations.Subscription`)."""

    id: str
    ack_mode: AckMode
    window: int | None
    selector: Selector | None


def subscribe_options(
    headers: Headers, destination: str, version: str, taken: Mapping[str, object], limits: Limits
) -> SubscribeOptions:
    """Read and check a SUBSCRIBE to ``destination`` (``taken``: the session's
    subscription ids, ``len`` of which counts against ``max_subscriptions``).

    Raises:
      ClientError: a missing id (1.1, 1.2), a duplicate id, too many
        subscriptions, an unknown ack mode, a bad prefetch header or selector.
    """
    sub_id = headers.get("id")
    if sub_id is None:
        if version != "1.0":
            raise ClientError("SUBSCRIBE without id")
        sub_id = destination
    if sub_id in taken:
        raise ClientError("duplicate subscription id", f"subscription {sub_id!r} already exists")
    if len(taken) >= limits.max_subscriptions:
        raise ClientError("too many subscriptions", f"the limit is {limits.max_subscriptions}")
    ack_mode = headers.get("ack", "auto")
    if ack_mode not in ACK_MODES:
        raise ClientError("invalid ack mode", "ack must be auto, client or client-individual")
    try:
        window = prefetch_window(headers, ack_mode, limits.default_prefetch)
        selector = subscription_selector(
            headers.get("selector"),
            max_length=limits.max_selector_length,
            max_depth=limits.max_selector_depth,
        )
    except ValueError as exc:
        raise ClientError(*exc.args) from None
    return SubscribeOptions(sub_id, ack_mode, window, selector)
