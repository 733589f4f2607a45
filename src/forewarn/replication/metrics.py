"""Prometheus metrics of a shared forewarn (``GET /metrics`` on the control port), with the official client.

The request paths count in plain ints (``Node.counts``): a prometheus_client Counter takes a lock per increment,
which the metadata hot path should not pay. A custom collector turns the counts into metric families when Prometheus
scrapes; command latencies are kept as plain floats by the service and moved into a Histogram at each scrape.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Protocol

from prometheus_client import CollectorRegistry, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from prometheus_client.registry import Collector

from forewarn.replication.counts import Counts
from forewarn.replication.shared import LEADER, SharedService


class Node(Protocol):
    """What the metrics read of a shared process (``replication.node.Node``)."""

    service: SharedService
    counts: Counts

    def health(self) -> dict[str, Any]: ...


_REGISTRIES: dict[int, tuple[CollectorRegistry, Histogram]] = {}


class NodeCollector(Collector):
    def __init__(self, node: Node):
        self.node = node

    def collect(self) -> Iterator[Metric]:
        node = self.node
        requests = CounterMetricFamily(
            "forewarn_requests", "Requests answered, by surface and HTTP status", labels=["surface", "status"]
        )
        for (surface, status), count in sorted(node.counts.requests.items()):
            requests.add_metric([surface, str(status)], count)
        yield requests
        health = node.health()
        role = GaugeMetricFamily("forewarn_leader", "1 when this process is the leader, 0 for a replica")
        role.add_metric([], 1 if node.service.role == LEADER else 0)
        yield role
        changes = health["lag"]["changes"]
        lag = GaugeMetricFamily(
            "forewarn_replication_lag_changes", "Commits the leader published that this replica does not hold yet"
        )
        lag.add_metric([], 0 if changes is None else changes)
        yield lag
        seconds = GaugeMetricFamily(
            "forewarn_replication_lag_seconds", "Seconds since this replica first saw a commit it does not hold yet"
        )
        seconds.add_metric([], health["lag"]["seconds"])
        yield seconds
        failovers = CounterMetricFamily("forewarn_failovers", "Times this process took over as the leader")
        failovers.add_metric([], node.counts.failovers)
        yield failovers
        refreshes = CounterMetricFamily("forewarn_replica_refreshes", "Refreshes that took the leader's commits")
        refreshes.add_metric([], node.counts.refreshes)
        yield refreshes
        full = CounterMetricFamily(
            "forewarn_replica_full_reloads",
            "Refreshes that loaded the whole state (the journal could not tell what changed); the rest read only the "
            "rows the leader's commits touched",
        )
        full.add_metric([], node.counts.full_reloads)
        yield full
        refresh = CounterMetricFamily(
            "forewarn_replica_refresh_seconds", "Time spent reading the leader's commits and applying them"
        )
        refresh.add_metric([], node.counts.refresh_seconds)
        yield refresh
        reachable = GaugeMetricFamily("forewarn_database_reachable", "1 when the database answered last time")
        reachable.add_metric([], 1 if health["database"]["reachable"] else 0)
        yield reachable


def exposition(node: Node) -> tuple[str, bytes]:
    """The text Prometheus scrapes, and its content type."""
    found = _REGISTRIES.get(id(node))
    if found is None:
        registry = CollectorRegistry(auto_describe=False)
        registry.register(NodeCollector(node))
        histogram = Histogram(
            "forewarn_command_seconds",
            "Time to run and commit one command on the leader",
            registry=registry,
            buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0),
        )
        found = _REGISTRIES[id(node)] = (registry, histogram)
    registry, histogram = found
    latencies, node.service.command_seconds = node.service.command_seconds, []
    for seconds in latencies:
        histogram.observe(seconds)
    return CONTENT_TYPE_LATEST, generate_latest(registry)
