"""Amazon EC2 (with AWS Health) as a plugin of the server (``forewarn/clouds/protocol.py``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from forewarn.aws.component import Ec2Component, StoredEc2
from forewarn.aws.records import EC2_RECORDS
from forewarn.clouds.protocol import Cloud, Footing
from forewarn.store.records import Records


@dataclass(frozen=True)
class AwsCloud:
    name: str = "aws"
    title: str = "Amazon EC2"
    records: Records = EC2_RECORDS

    def component(self, footing: Footing, stored: Any | None) -> Ec2Component:
        return Ec2Component(
            footing.fleet,
            footing.seed,
            footing.rules.ec2,
            footing.scheduler,
            footing.sequence,
            stored or StoredEc2(),
            footing.created_at,
        )


AWS: Cloud = AwsCloud()
