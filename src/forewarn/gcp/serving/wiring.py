"""How Compute Engine runs in a forewarn server (``forewarn/cloud.py``'s ``Serving``), from ``forewarn serve``'s
options: the Compute Engine API on its port, the ``--gce-timing`` rules, its banner lines."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from forewarn.cloud import ApiPort, Banner, Listening, Serving
from forewarn.gcp.component import GcpComponent
from forewarn.gcp.compute_api.app import create_compute_app
from forewarn.gcp.fleet import gce_fleet
from forewarn.gcp.metadata.server import GceMetadata, etag_of
from forewarn.gcp.model import GceInstance, GceRules
from forewarn.net.browser_guard import BrowserGuard, HostNames, listens_beyond_loopback

if TYPE_CHECKING:
    from forewarn.app.runtime import Maintenance

GCE_API = "gce_api"


class GcpServing(Serving):
    """``options``: a ``ServeConfig`` (read for Compute Engine's settings only)."""

    machine_kind = "GCE instance"

    def __init__(self, options: Any):
        self.options = options

    def apis(self) -> Sequence[ApiPort]:
        return (ApiPort(GCE_API, self.options.gce_port, "the Compute Engine API"),)

    def exposure(self, host: str) -> Sequence[str]:
        if not self.options.gce_port or not listens_beyond_loopback(host):
            return ()
        return (
            f"the Compute Engine API port listens on {host} and checks no credential: anyone who can reach it can "
            "start maintenance and change instances' scheduling (--gce-port 0 turns it off)",
        )

    def rules(self, rules: Any) -> Any:
        timings = self.options.gce_timings
        return rules.with_part(replace(rules.of(GceRules), **timings)) if timings else rules

    def app(self, role: str, service: Maintenance, surface: Any, listening: Listening) -> Any:
        hosts = HostNames.for_server(listening.control[0], listening.allowed_hosts)
        return create_compute_app(service, guard=BrowserGuard(hosts, json_api=True))

    def views(self, service: Maintenance, surface: Any, listening: Listening) -> Mapping[str, Any]:
        return {"gce_metadata": metadata_answer(surface)}

    def machines(self, service: Maintenance) -> Sequence[GceInstance]:
        return list(gce_fleet(service.settled_engine().fleet).instances.values())

    def current_host(self, service: Maintenance, machine: Any) -> str | None:
        if not isinstance(machine, GceInstance):
            return None
        state = service.settled_engine().component(GcpComponent).gce_states.get(machine.name)
        return machine.host if state is None else state.host

    def banner(self, service: Maintenance, listening: Listening) -> Banner:
        fleet = service.settled_engine().fleet
        count = len(gce_fleet(fleet).instances)
        surfaces = []
        api = listening.apis.get(GCE_API)
        if api and gce_fleet(fleet).instances:
            surfaces.append(
                f"  GCE API       http://{api[0]}:{api[1]}   (google-cloud-compute api_endpoint, anonymous credentials; "
                "docs/gcp.md)"
            )
        if gce_fleet(fleet).instances:
            imds = f"http://{listening.metadata[0]}:{listening.metadata[1]}"
            surfaces.append(
                f"  GCE metadata  {imds}/computeMetadata/v1/   (Metadata-Flavor: Google; at each instance's own address "
                "or port; docs/gcp.md)"
            )
        return Banner(fleet=f"{count:,} Compute Engine instance{'' if count == 1 else 's'}", surfaces=surfaces)


def metadata_answer(gce: GceMetadata) -> Callable[[str, str], tuple[int, bytes, str, str | None]]:
    def answer(name: str, path: str) -> tuple[int, bytes, str, str | None]:
        status, body, content_type, headers = gce.read(name, path)
        tag = etag_of((status, body, content_type, headers))
        return status, body, content_type.decode(), None if tag is None else tag.decode()

    return answer
