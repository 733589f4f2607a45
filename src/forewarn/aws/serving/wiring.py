"""How Amazon EC2 runs in a forewarn server (``forewarn/cloud.py``'s ``Serving``), from ``forewarn serve``'s options:
the EC2 Query API on its port (with SQS, EventBridge and Auto Scaling beside it), the instance metadata settings, AWS
Health's outbox and EventBridge's (with its SQS delivery policy), its banner lines."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from forewarn.aws.component import Ec2Component
from forewarn.aws.ec2_api.app import create_ec2_app
from forewarn.aws.ec2_api.backend import Ec2Backend
from forewarn.aws.eventbridge.delivery import QueueDelivery, bus_outbox
from forewarn.aws.fleet import ec2_fleet
from forewarn.aws.health.events import HealthSettings, health_outbox
from forewarn.aws.imds.metadata import Ec2Imds, Ec2ImdsSettings
from forewarn.aws.model import Ec2Instance
from forewarn.cloud import ApiPort, Banner, CloudSetupError, Listening, Serving
from forewarn.extras import SIGV4
from forewarn.net.browser_guard import BrowserGuard, HostNames
from forewarn.net.own_listeners import own_url

if TYPE_CHECKING:
    from forewarn.app.runtime import Maintenance
    from forewarn.store.base import SQLStore

EC2_API = "ec2_api"


class AwsServing(Serving):
    """``options``: a ``ServeConfig`` (read for EC2's settings only)."""

    machine_kind = "EC2 instance"

    def __init__(self, options: Any):
        self.options = options

    def apis(self) -> Sequence[ApiPort]:
        return (ApiPort(EC2_API, self.options.ec2_port, "the EC2 API"),)

    def exposure(self, host: str) -> Sequence[str]:
        if not self.options.ec2_port or self.options.ec2_credentials:
            return ()
        return (
            f"the EC2 API listens on {host} without --ec2-credential: anyone who can reach it can "
            "reschedule events and change event windows",
        )

    def metadata_settings(self) -> Ec2ImdsSettings:
        # --while-down, else what --imds-profile sets for every metadata surface (realistic: dropped)
        options = self.options
        while_down = options.while_down or ("drop" if options.imds_profile == "realistic" else "answer")
        return Ec2ImdsSettings(tokens=options.ec2_imds_tokens, while_down=while_down)

    def opened(self, store: SQLStore, fleet_sections: Mapping[str, tuple[str, Any]]) -> Sequence[Any]:
        if self.options.ec2_port and self.options.ec2_credentials and not SIGV4.installed():
            raise CloudSetupError(SIGV4.message, "--ec2-credential")
        # EventBridge's deliveries to SQS targets (and lifecycle hooks' to theirs), from the first catch-up on: what
        # happened while the server was down reaches the queues too.
        health = HealthSettings(targets=self.options.health_webhooks, entity=self.options.health_entity)
        return ((health_outbox(health),) if health.targets else ()) + (bus_outbox,)

    def attach(self, service: Maintenance, leads: bool) -> None:
        self.service = service

    def delivery_policies(self) -> Sequence[Any]:
        return (QueueDelivery(self.service),)

    def app(self, role: str, service: Maintenance, surface: Any, listening: Listening) -> Any:
        hosts = HostNames.for_server(listening.control[0], listening.allowed_hosts)
        return create_ec2_app(
            service, credentials=self.options.ec2_credentials, guard=BrowserGuard(hosts, json_api=False)
        )

    def views(self, service: Maintenance, surface: Any, listening: Listening) -> Mapping[str, Any]:
        backend = Ec2Backend(service)
        return {
            "ec2_metadata": metadata_answer(surface),
            "ec2_status": lambda instance_id: backend.view(instance_id, service.now()).xml(),
        }

    def client_urls(self, listening: Listening) -> Mapping[str, str]:
        address = listening.apis.get(EC2_API)
        return {} if address is None else {"ec2_url": own_url(address)}

    def machines(self, service: Maintenance) -> Sequence[Ec2Instance]:
        return list(ec2_fleet(service.settled_engine().fleet).instances.values())

    def current_host(self, service: Maintenance, machine: Any) -> str | None:
        if not isinstance(machine, Ec2Instance):
            return None
        state = service.settled_engine().component(Ec2Component).ec2_states.get(machine.instance_id)
        return machine.host if state is None else state.host

    def banner(self, service: Maintenance, listening: Listening) -> Banner:
        fleet = service.settled_engine().fleet
        count = len(ec2_fleet(fleet).instances)
        surfaces = []
        api = listening.apis.get(EC2_API)
        if api:
            surfaces.append(f"  EC2 API       http://{api[0]}:{api[1]}   (boto3/aws CLI endpoint_url; docs/aws-api.md)")
        if ec2_fleet(fleet).instances:
            imds = f"http://{listening.metadata[0]}:{listening.metadata[1]}"
            surfaces.append(f"  EC2 IMDS      {imds}/latest/meta-data/   (at each instance's own address or port)")
        return Banner(fleet=f"{count:,} EC2 instance{'' if count == 1 else 's'}", surfaces=surfaces)


def metadata_answer(ec2_imds: Ec2Imds) -> Callable[[str, str], tuple[int, bytes, str]]:
    def answer(instance_id: str, path: str) -> tuple[int, bytes, str]:
        status, body, content_type, _ = ec2_imds.answer(instance_id, path)
        return status, body, content_type.decode()

    return answer
