"""``trio-stomp broker --data-dir DIR --list-subscriptions`` and ``--remove-subscription``.

They work on a stopped broker's store (see
:func:`trio_stomp.broker.list_durable_subscriptions`): a broker running on the
data dir holds its lock, and they fail with one line saying so and what to
do instead.
"""

from __future__ import annotations

import argparse
import sys

import trio

from ..util import printable
from ._common import EXIT_FAILED, UsageError, say

__all__ = ["add_subscription_options", "run_subscriptions"]


def add_subscription_options(parser: argparse.ArgumentParser) -> None:
    """The broker's ``--list-subscriptions`` and ``--remove-subscription``."""
    group = parser.add_mutually_exclusive_group()
    group.add_argument(
        "--list-subscriptions",
        action="store_true",
        help="list the durable topic subscriptions kept in --data-dir (client-id, name, "
        "topic, messages and bytes held; tab-separated, one a line) and exit, without "
        "starting the broker; a broker running on DIR holds its lock: stop it first",
    )
    group.add_argument(
        "--remove-subscription",
        nargs=2,
        metavar=("CLIENT_ID", "NAME"),
        help="remove the durable topic subscription CLIENT_ID NAME and the messages it "
        "holds from --data-dir and exit, without starting the broker (stop it first)",
    )


def run_subscriptions(args: argparse.Namespace) -> int | None:
    """Run ``--list-subscriptions`` or ``--remove-subscription``; None when neither was given."""
    if not args.list_subscriptions and args.remove_subscription is None:
        return None
    flag = "--list-subscriptions" if args.list_subscriptions else "--remove-subscription"
    if args.data_dir is None:
        raise UsageError(f"{flag} needs --data-dir")
    from ..broker import StoreError, StoreInUse

    try:
        if args.list_subscriptions:
            return trio.run(_list, args.data_dir, args.accept_damage)
        client_id, name = args.remove_subscription
        return trio.run(_remove, args.data_dir, client_id, name, args.accept_damage)
    except StoreInUse:
        raise UsageError(_in_use(args, flag), status=EXIT_FAILED) from None
    except StoreError as exc:
        raise UsageError(str(exc), status=EXIT_FAILED) from None


def _in_use(args: argparse.Namespace, flag: str) -> str:
    """What to say when a broker runs on the data dir, and what to do instead."""
    said = (
        f"a broker is running on the data dir {args.data_dir!r} (it holds the store's "
        f"lock): stop it, then run {flag} again"
    )
    if args.remove_subscription is None:
        return (
            f"{said}; while it runs, Broker.depths() in the program that runs it "
            "lists each durable subscription"
        )
    client_id, name = args.remove_subscription
    return (
        f"{said}, or remove it through the running broker: CONNECT with client-id "
        f"{client_id!r} and send UNSUBSCRIBE with activemq.subscriptionName {name!r}"
    )


def _field(text: str) -> str:
    """``text`` on one line of a tab-separated table: backslashes doubled, then
    tabs, line breaks and every other control character escaped."""
    return printable(text.replace("\\", "\\\\"))


async def _list(data_dir: str, accept_damage: bool) -> int:
    from ..broker import list_durable_subscriptions

    found = await list_durable_subscriptions(data_dir, accept_damage=accept_damage)
    print("client-id\tname\ttopic\tmessages\tbytes")
    for info in found:
        fields = (info.client_id, info.name, info.destination)
        print("\t".join([*map(_field, fields), str(info.messages), str(info.size)]))
    sys.stdout.flush()
    return 0


async def _remove(data_dir: str, client_id: str, name: str, accept_damage: bool) -> int:
    from ..broker import remove_durable_subscription

    try:
        count = await remove_durable_subscription(
            data_dir, client_id, name, accept_damage=accept_damage
        )
    except LookupError as exc:
        raise UsageError(str(exc.args[0]), status=EXIT_FAILED) from None
    say(
        f"removed durable subscription {name!r} of client-id {client_id!r} "
        f"and the {count} message(s) it held"
    )
    return 0
