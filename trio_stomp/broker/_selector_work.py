"""What evaluating selectors may cost the broker, sans-IO: budgets per evaluation and per dispatch.

A selector's text is bounded (``max_selector_length``, ``max_selector_depth``,
the LIKE budget), but the *work* of evaluating it depends on the message too:
``a + a + a`` over a 60,000-character header builds strings of 180,000
characters, and one such selector of 4,000 characters cost 240 ms per
message, during which the broker (one thread) served nobody. So each
evaluation runs on a budget of work units (see
:meth:`~._selector.Selector.measure`: one unit per character of string
built, compared, converted or searched; each operation of the selector paid
up front), and may build no string longer than ``max_selector_string``.

A :class:`SelectorMeter` (one per broker) hands out the budgets:

- one evaluation gets at most ``max_selector_work`` units;
- one dispatch (the fan-out of one message on a topic, the offer of one new
  message on a queue, a queue's look through its backlog) spends at most
  ``max_selector_dispatch_work`` across every subscription it evaluates.
  Within a fan-out, each evaluation gets at most a fair share of what the
  dispatch has left (what is left over the evaluations still to come), so
  the first subscriptions cannot spend what the later ones need: a selector
  that overspends costs its own subscription, not its neighbours'.

An evaluation that runs out is a non-match for that message: on a topic the
subscription does not get it; on a queue it stays for another consumer.
It is counted (:attr:`SelectorMeter.exhausted`, the broker's
``selector_work_exhausted``, and per subscription) and logged once per
subscription. Why not an ERROR to the subscriber: what an evaluation costs
depends on the message, which any producer chooses; an ERROR would let a
producer disconnect every consumer whose selector reads a header it can
make long. A non-match is also what ActiveMQ gives for an evaluation it
fails.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from ._message import Message
    from ._selector import Selector

__all__ = ["SelectorMeter"]

log = logging.getLogger("trio_stomp.broker")

#: The defaults of :class:`~trio_stomp.broker.Limits`: ``max_selector_work``,
#: ``max_selector_dispatch_work``, ``max_selector_string``.
EVALUATION_WORK: Final = 1_000_000
DISPATCH_WORK: Final = 4_000_000
LONGEST_STRING: Final = 65_536


class SelectorMeter:
    """The selector work budgets of one broker (see the module's docstring).

    Args:
      evaluation: the most work units one evaluation may spend.
      dispatch: the most work units one dispatch may spend across subscriptions.
      longest: the longest string an evaluation may build, in characters.
    """

    __slots__ = ("dispatch", "evaluation", "exhausted", "left", "longest", "short", "spent")

    def __init__(
        self,
        evaluation: int = EVALUATION_WORK,
        dispatch: int = DISPATCH_WORK,
        longest: int = LONGEST_STRING,
    ) -> None:
        self.evaluation = evaluation
        self.dispatch = dispatch
        self.longest = longest
        #: Work units left in the current dispatch.
        self.left = dispatch
        #: Evaluations that ran out (each one a non-match), since the start.
        self.exhausted = 0
        #: Work units spent by every evaluation since the start (a turn's
        #: measure of work: see :mod:`._intake`).
        self.spent = 0
        #: True when, in this dispatch, an evaluation got less than a full
        #: budget and ran out: a later dispatch may select that message.
        self.short = False

    def start(self) -> None:
        """A dispatch begins: its budget is whole again."""
        self.left = self.dispatch
        self.short = False

    def evaluate(self, selector: Selector, message: Message, share: int = 1) -> bool | None:
        """Whether ``selector`` selects ``message``; None when it ran out of work.

        Args:
          share: how many evaluations this dispatch still has to make,
            this one included: this one gets at most that share of what is
            left.
        """
        allowance = min(self.evaluation, self.left // max(share, 1))
        verdict, spent = selector.measure(
            message.headers,
            message_id=message.message_id,
            redelivered=message.redelivered,
            allowance=allowance,
            longest=self.longest,
        )
        self.left -= spent
        self.spent += spent
        if verdict is None:
            self.exhausted += 1
            if allowance < self.evaluation:
                self.short = True
        return verdict

    def report(self, selector: Selector, subscription: str, destination: str) -> None:
        """Log a subscription's first evaluation that ran out (the later ones are counted)."""
        log.warning(
            "the selector of subscription %r to %r ran out of work (more than "
            "max_selector_work=%d units, or a string longer than max_selector_string=%d "
            "characters): the message is not selected for it, and later ones are "
            "counted, not logged; selector: %r",
            subscription,
            destination,
            self.evaluation,
            self.longest,
            selector.text[:200],
        )
