"""How long a dispatch that spends its whole selector budget holds the broker, per kind of work.

    .venv/bin/python bench/speed/selector_work.py [--rounds 5]

For each kind of work a selector's evaluation can do (operations alone;
concatenation, equality, ordering, ``LIKE`` with ``_``, reading a number,
``IN``, each over a 30,000-character header), evaluates it on the broker's
default budgets (``Limits.max_selector_work``,
``max_selector_dispatch_work``) until one dispatch's budget is spent, and
prints the time that took (the best of ``--rounds``: on a shared machine the
minimum is the cost) and the time per work unit. The largest figure is how
long one message can hold the broker, whatever its subscribers select; the
per-unit figures check the weights in ``trio_stomp/broker/_selector_eval.py``
(``OPERATION_WORK``, ``CONVERT_WORK``) and the ``LIKE`` weight in
``_selector.py``. Not a test: a table to read (with ``uptime`` beside it).
"""

from __future__ import annotations

import argparse
import os
import time

from trio_stomp.broker._message import new_message
from trio_stomp.broker._selector import compile_selector
from trio_stomp.broker._selector_work import DISPATCH_WORK, SelectorMeter

LONG = "y" * 30_000
KINDS = {
    "operations": (" OR ".join(f"a = 'x{i}'" for i in range(400)), [("a", "zz")]),
    "concatenate": (" OR ".join(["h + h = 'q'"] * 150), [("h", LONG)]),
    "equal": (" OR ".join(["h = g"] * 300), [("h", LONG), ("g", LONG[:-1] + "z")]),
    "order": (" OR ".join(["h > g"] * 300), [("h", LONG), ("g", LONG[:-1] + "z")]),
    "LIKE with _": (" OR ".join(["h LIKE '%y_z%'"] * 20), [("h", LONG)]),
    "read a number": (" OR ".join(["h > 1.5"] * 300), [("h", "-" + "1" * 30_000)]),
    "IN": (" OR ".join(["h IN ('a', 'b')"] * 300), [("h", LONG)]),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    print(f"load average {os.getloadavg()[0]:.2f}; dispatch budget {DISPATCH_WORK:,} units")
    print(f"{'work':14} {'units':>10} {'ms':>7} {'ns/unit':>8}")
    for name, (text, headers) in KINDS.items():
        selector = compile_selector(text, max_length=10**6)
        message = new_message("id", "/topic/t", tuple(headers), b"")
        meter = SelectorMeter()
        best = spent = 0.0
        for _ in range(args.rounds):
            meter.start()
            start = time.perf_counter()
            while meter.left > max(selector.work, 1000):
                meter.evaluate(selector, message)
            took = time.perf_counter() - start
            if not best or took < best:
                best, spent = took, DISPATCH_WORK - meter.left
        print(f"{name:14} {spent:>10,.0f} {best * 1e3:>7.2f} {best / spent * 1e9:>8.2f}")


if __name__ == "__main__":
    main()
