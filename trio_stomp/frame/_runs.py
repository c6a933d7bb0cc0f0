"""Runs of MESSAGE frames: what a client hands each subscription in one step."""

from __future__ import annotations

from collections.abc import Sequence

from ._frame import Frame
from ._parser import Event

Run = list[Frame]


def message_runs(events: Sequence[Event]) -> list[Frame | Run]:
    """The frames of ``events`` in order, heart-beats left out, with each run of
    consecutive MESSAGE frames of one ``subscription`` in one list (a MESSAGE
    without one, which some 1.0 brokers send, is a run of its own).

    A client delivers a run to its subscription at once (one wake-up of its
    consumer) and acts on any other frame in its turn. The compiled codec
    builds the runs in C: this is the loop a client runs per message.
    """
    out: list[Frame | Run] = []
    run: Run = []
    key: str | None = None
    for event in events:
        if not isinstance(event, Frame):
            continue
        if event.command != "MESSAGE":
            if run:
                out.append(run)
                run = []
            out.append(event)
            continue
        subscription = event.headers.get("subscription")
        if run and (subscription != key or subscription is None):
            out.append(run)
            run = []
        key = subscription
        run.append(event)
    if run:
        out.append(run)
    return out
