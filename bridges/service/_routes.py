"""Routes built from a config: once per process, and the same way for ``bridges check``.

Building a route runs its endpoints' constructors, which may touch the file
system (the file family checks that its folders can be written: ``statvfs``,
``access``) and block there: a network mount that does not answer hangs
them in the kernel. A running process therefore builds off its event loop,
at start (within :data:`BUILD_TIMEOUT` s) as at a reload: in a worker thread
(:func:`bridges.blocking`, abandoned on a deadline or a signal: building
creates nothing that must be undone), so the loop, its signals and
``/healthz`` never wait on it.
"""

from __future__ import annotations

from typing import Final

from .._config import Config, build_endpoint
from .._convert import ConfigError, Problem
from .._endpoint import Context
from .._engine import Route
from .._registry import Registry
from .._shared import Shared
from .._trace import traced

#: Bound on handing a route's in-flight envelopes back when it stops or
#: restarts, s: a nack that does not get through only means the source
#: delivers the message again (a broker does so once the connection closes).
#: Short, so that a frozen peer cannot hold up a stop (see :mod:`._process`).
RELEASE_TIMEOUT = 0.3

#: The longest ``bridges run`` may take to build its routes at start, s.
BUILD_TIMEOUT: Final = 10.0


def build_routes(
    config: Config, registry: Registry, *, shared: Shared | None = None, checking: bool = False
) -> list[Route]:
    """Construct every route of ``config`` (nothing connects yet).

    Args:
      shared: the process's shared resources (the embedded broker among
        them); None under ``bridges check`` and for routes run by hand.
      checking: build to validate only (endpoints create nothing).

    Raises:
      ConfigError: an endpoint or transform refused its settings.
    """
    problems: list[Problem] = []
    routes = []
    for spec in config.routes:

        def context(role: str, name: str = spec.name, in_flight: int = spec.in_flight) -> Context:
            return Context(
                route=name,
                role=role,
                base_dir=config.base_dir,
                embedded=config.broker.embedded,
                checking=checking,
                in_flight=in_flight,
                shared=shared,
            )

        before = len(problems)
        source = build_endpoint(spec.source, registry, context("source"), problems, config.file)
        sink = build_endpoint(spec.sink, registry, context("sink"), problems, config.file)
        dead_letter = (
            None
            if spec.dead_letter is None
            else build_endpoint(
                spec.dead_letter, registry, context("dead_letter"), problems, config.file
            )
        )
        transforms = [
            build_endpoint(t, registry, context("transform"), problems, config.file)
            for t in spec.transforms
        ]
        if len(problems) > before:
            continue
        routes.append(
            Route(
                spec.name,
                source,
                traced(sink),
                transforms=transforms,
                dead_letter=dead_letter,
                in_flight=spec.in_flight,
                batch_count=spec.batch.count,
                batch_time=spec.batch.time,
                retry=spec.retry,
                release_timeout=RELEASE_TIMEOUT,
            )
        )
    if problems:
        raise ConfigError(problems)
    return routes
