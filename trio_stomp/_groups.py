"""Exception groups at a public boundary."""

from __future__ import annotations


def unwrap_group(exc: BaseException) -> BaseException:
    """The one leaf exception of nested single-exception groups, else ``exc`` itself.

    A nursery wraps what its tasks raise in an :class:`ExceptionGroup`; when
    there is just one error the caller should see it as it was raised
    (``except ConnectionLost`` must work). A group of several stays a group.
    """
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    return exc
