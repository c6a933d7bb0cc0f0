"""``[bridge] http``: ``/metrics`` (Prometheus text), ``/healthz`` and ``/readyz``.

The server is the http family's shared listener (:mod:`bridges.endpoints.http.listener`):
webhook routes on the same address share it, each on its own path.

Counters cost the routes nothing: they are the :class:`~bridges.RouteStats`
fields the engine keeps anyway, read when ``/metrics`` is scraped (a custom
collector). Histograms are fed once per batch through
:attr:`~bridges.RouteStats.observe`. A route that a reload replaced leaves
its counts to its successor of the same name, so counters never go back.

Metrics (label ``route`` on each ``bridges_route_*``):

- ``bridges_route_received_total``: messages taken from the source.
- ``bridges_route_written_total``: written to the sink (durable) and acked.
- ``bridges_route_acked_total``: acked to the source (written, dead-lettered or filtered).
- ``bridges_route_nacked_total``, ``bridges_route_dead_lettered_total``,
  ``bridges_route_filtered_total``, ``bridges_route_handed_back_total``
  (in flight when the route stopped or restarted).
- ``bridges_route_retries_total``: batch writes retried;
  ``bridges_route_restarts_total``: the route reconnected after a failure.
- ``bridges_route_batches_total``; ``bridges_route_batch_size`` (histogram);
  ``bridges_route_write_seconds`` (histogram: one sink write);
  ``bridges_route_durable_seconds`` (histogram: from a batch's first message
  being ready to the sink confirming it durable).
- ``bridges_route_in_flight``: messages taken and not yet settled.
- ``bridges_route_state{state=...}``: 1 for the route's state (starting,
  running, retrying, stopped), else 0. ``bridges_route_stuck``: 1 when stuck.
- ``bridges_embedded_queue_depth``: messages waiting in the embedded broker's
  queue the route reads, for routes that read from it.
- ``bridges_embedded_held{destination=...}``: what each destination of the
  embedded broker holds (queued + unacknowledged), read by a route or not:
  what a stop now would keep or lose (see :class:`~bridges.service.Stopped`).
- ``bridges_duplicates_dropped_total{destination=...}``: SENDs the embedded
  broker's duplicate window dropped as repeats of a ``bridge-id`` it had
  accepted for that destination (``[broker] duplicate_window``); each drop is
  also logged at INFO, sampled.
- ``bridges_http_refused_total{route=...,reason=...}``: webhook requests an
  ``http`` source refused before queueing them, by reason (``max_pending``,
  ``max_per_peer``, ``evicted``, ``min_body_rate``, ``body_timeout``,
  ``max_body``, ``unauthorized``: :mod:`bridges.endpoints.http.admission`);
  read from a source's ``refused`` counts, for routes whose source has them.
- ``bridges_source_lost_total{route=...}``: records a source could no longer
  read, skipped (a ``kafka`` source's records deleted by retention before
  its group read them); read from a source's ``lost`` count, for routes
  whose source has one.
- ``bridges_event_loop_lag_seconds``, ``bridges_healthy``.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator, Mapping
from typing import Any, Final

import trio
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from trio_stomp.broker import Broker

from .._config import Config
from .._convert import ConfigError, Problem
from .._endpoint import Context
from .._engine import Route
from .._flow import COUNTERS
from .._redact import redact
from .._shared import Shared
from ..endpoints.http.listener import Receive, Scope, Send, listen, respond
from ..endpoints.stomp import EMBEDDED_BROKER
from ._embedded import volatile_backlog
from ._health import route_state
from ._service import Service

log = logging.getLogger("bridges.service")

#: RouteStats counter (and metric ``bridges_route_<counter>_total``) -> help.
HELP: Final = {
    "received": "Messages taken from the source.",
    "written": "Messages written to the sink (durable) and acked.",
    "nacked": "Messages nacked to the source after the last attempt.",
    "dead_lettered": "Messages written to the dead-letter sink and acked.",
    "filtered": "Messages a transform dropped (acked).",
    "handed_back": "In-flight messages handed back when the route stopped.",
    "retries": "Batch writes retried.",
    "restarts": "Times the route reconnected after a failure.",
    "batches": "Batches written to the sink.",
}
STATES: Final = ("starting", "running", "retrying", "stopped")
BATCH_BUCKETS: Final = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 5000)
SECONDS_BUCKETS: Final = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)


class RouteMetrics:
    """The process's metrics: a Prometheus registry over the service's (live) routes."""

    def __init__(self, service: Service, broker: Broker | None = None) -> None:
        self.service = service
        self.broker = broker
        self.registry = CollectorRegistry(auto_describe=False)
        self._retired: dict[str, dict[str, int]] = {}
        self._retired_refused: dict[str, dict[str, int]] = {}
        self._retired_lost: dict[str, int] = {}
        labels = ["route"]
        self.batch_size = Histogram(
            "bridges_route_batch_size",
            "Messages per batch written.",
            labels,
            registry=self.registry,
            buckets=BATCH_BUCKETS,
        )
        self.write_seconds = Histogram(
            "bridges_route_write_seconds",
            "Time of one batch write to the sink, s.",
            labels,
            registry=self.registry,
            buckets=SECONDS_BUCKETS,
        )
        self.durable_seconds = Histogram(
            "bridges_route_durable_seconds",
            "From a batch's first message ready to the sink confirming it durable, s.",
            labels,
            registry=self.registry,
            buckets=SECONDS_BUCKETS,
        )
        self.registry.register(self)  # (a collector: it has collect())
        for route in service.health.routes:
            self.follow(route)
        service.on_start.append(self.follow)
        service.on_retire.append(self.retire)

    def follow(self, route: Route) -> None:
        """Feed the histograms from ``route``'s batches."""
        size = self.batch_size.labels(route.name).observe
        write = self.write_seconds.labels(route.name).observe
        durable = self.durable_seconds.labels(route.name).observe
        now = trio.current_time

        def observe(count: int, started: float, since: float) -> None:
            done = now()
            size(count)
            write(done - started)
            durable(done - since)

        route.stats.observe = observe

    def retire(self, route: Route) -> None:
        """Keep the counts of a route that a reload replaced or removed."""
        totals = self._retired.setdefault(route.name, dict.fromkeys(COUNTERS, 0))
        for field in COUNTERS:
            totals[field] += getattr(route.stats, field)
        refused = _refused(route)
        if refused is not None:
            kept = self._retired_refused.setdefault(route.name, {})
            for reason, count in refused.items():
                kept[reason] = kept.get(reason, 0) + count
        lost = _lost(route)
        if lost is not None:
            self._retired_lost[route.name] = self._retired_lost.get(route.name, 0) + lost

    def collect(self) -> Iterator[Metric]:
        """The counters and gauges, read from the routes now (prometheus-client's Collector)."""
        routes = list(self.service.health.routes)
        health = self.service.health
        for field in COUNTERS:
            family = CounterMetricFamily(f"bridges_route_{field}", HELP[field], labels=["route"])
            for route in routes:
                family.add_metric([route.name], self._count(route, field))
            yield family
        acked = CounterMetricFamily(
            "bridges_route_acked", "Messages acked to the source.", labels=["route"]
        )
        for route in routes:
            fields = ("written", "dead_lettered", "filtered")
            acked.add_metric([route.name], sum(self._count(route, f) for f in fields))
        yield acked
        yield self._refusals(routes)
        yield self._losses(routes)
        yield from self._gauges(routes)
        yield GaugeMetricFamily(
            "bridges_event_loop_lag_seconds", "How late the last health tick was, s.", health.lag
        )
        yield GaugeMetricFamily(
            "bridges_healthy", "1 while the loop is responsive and no route is stuck.",
            1 if health.healthy else 0,
        )  # fmt: skip

    def _count(self, route: Route, field: str) -> int:
        retired = self._retired.get(route.name)
        base = retired[field] if retired is not None else 0
        count: int = getattr(route.stats, field)
        return base + count

    def _refusals(self, routes: list[Route]) -> Metric:
        family = CounterMetricFamily(
            "bridges_http_refused",
            "Webhook requests refused before they were queued, by reason.",
            labels=["route", "reason"],
        )
        for route in routes:
            refused = _refused(route)
            if refused is None:
                continue
            kept = self._retired_refused.get(route.name, {})
            for reason in sorted(refused.keys() | kept.keys()):
                count = refused.get(reason, 0) + kept.get(reason, 0)
                family.add_metric([route.name, reason], count)
        return family

    def _losses(self, routes: list[Route]) -> Metric:
        family = CounterMetricFamily(
            "bridges_source_lost",
            "Records the source could no longer read (deleted before it read them), skipped.",
            labels=["route"],
        )
        for route in routes:
            lost = _lost(route)
            if lost is not None:
                family.add_metric([route.name], lost + self._retired_lost.get(route.name, 0))
        return family

    def _gauges(self, routes: list[Route]) -> Iterator[Metric]:
        in_flight = GaugeMetricFamily(
            "bridges_route_in_flight", "Messages taken and not yet settled.", labels=["route"]
        )
        state = GaugeMetricFamily(
            "bridges_route_state", "1 for the route's state.", labels=["route", "state"]
        )
        stuck = GaugeMetricFamily(
            "bridges_route_stuck", "1 when the route is stuck.", labels=["route"]
        )
        depth = GaugeMetricFamily(
            "bridges_embedded_queue_depth",
            "Messages waiting in the embedded broker's queue the route reads.",
            labels=["route"],
        )
        stuck_now = set(self.service.health.stuck)
        for route in routes:
            in_flight.add_metric([route.name], route.in_flight)
            now = route_state(route)
            for name in STATES:
                state.add_metric([route.name, name], 1 if name == now else 0)
            stuck.add_metric([route.name], 1 if route.name in stuck_now else 0)
            backlog = volatile_backlog(route)
            if backlog is not None:
                depth.add_metric([route.name], backlog)
        yield from (in_flight, state, stuck, depth)
        if self.broker is not None:
            held = GaugeMetricFamily(
                "bridges_embedded_held",
                "Messages each destination of the embedded broker holds (queued + unacked); "
                "a durable topic subscription is DESTINATION durable:CLIENT_ID:NAME.",
                labels=["destination"],
            )
            for destination in self.broker.depths():
                held.add_metric([destination.label], destination.held)
            yield held
            dropped = CounterMetricFamily(
                "bridges_duplicates_dropped",
                "SENDs the embedded broker dropped as repeats of a bridge-id it accepted "
                "for that destination within its duplicate window.",
                labels=["destination"],
            )
            for name, count in sorted(self.broker.duplicates_dropped_by_destination.items()):
                dropped.add_metric([name], count)
            yield dropped

    async def metrics_app(self, scope: Scope, receive: Receive, send: Send) -> None:
        """``GET /metrics``: the Prometheus text format."""
        body = redact(generate_latest(self.registry).decode()).encode()
        headers = [(b"content-type", CONTENT_TYPE_LATEST.encode())]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    async def healthz_app(self, scope: Scope, receive: Receive, send: Send) -> None:
        """``GET /healthz``: 200 while healthy, else 503 saying why."""
        health = self.service.health
        if health.healthy:
            await respond(send, 200, b"ok\n")
            return
        why = [f"stuck: {name}" for name in health.stuck]
        if not health.responsive:
            why.append(f"event loop lag {health.lag:.1f} s")
        await respond(send, 503, redact("\n".join(why) + "\n").encode())

    async def readyz_app(self, scope: Scope, receive: Receive, send: Send) -> None:
        """``GET /readyz``: 200 when every route runs, else 503 listing those that do not."""
        waiting = self.service.health.not_ready()
        if not waiting:
            await respond(send, 200, b"ready\n")
        else:
            await respond(send, 503, redact("\n".join(waiting) + "\n").encode())


def _refused(route: Route) -> Mapping[str, int] | None:
    """A source's refusal counts by reason (the http source has them), or None."""
    refused: Any = getattr(route.source, "refused", None)
    return refused if isinstance(refused, Mapping) else None


def _lost(route: Route) -> int | None:
    """A source's count of records lost before it read them (the kafka source has one), or None."""
    lost: Any = getattr(route.source, "lost", None)
    return lost if isinstance(lost, int) and not isinstance(lost, bool) else None


async def serve_metrics(
    config: Config,
    service: Service,
    shared: Shared | None,
    task_status: trio.TaskStatus[str] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve ``/metrics``, ``/healthz`` and ``/readyz`` on ``[bridge] http`` until cancelled.

    Raises:
      ConfigError: the address cannot be listened on (``bridge.http``).
    """
    assert config.bridge.http is not None
    broker = shared.get(EMBEDDED_BROKER) if shared is not None else None
    metrics = RouteMetrics(service, broker if isinstance(broker, Broker) else None)
    context = Context(route="-", role="service", base_dir=config.base_dir, shared=shared)
    apps: list[tuple[str, Any]] = [
        ("/metrics", metrics.metrics_app),
        ("/healthz", metrics.healthz_app),
        ("/readyz", metrics.readyz_app),
    ]
    try:
        async with listen(context, config.bridge.http) as listener:
            with contextlib.ExitStack() as mounted:
                for path, app in apps:
                    mounted.enter_context(listener.mount(path, app))
                service.http_url = listener.url
                log.info("serving /metrics, /healthz and /readyz on %s", listener.url)
                task_status.started(listener.url)
                await trio.sleep_forever()
    except OSError as exc:
        problem = Problem(config.file, None, "bridge.http", exc.strerror or str(exc))
        raise ConfigError([problem]) from None
