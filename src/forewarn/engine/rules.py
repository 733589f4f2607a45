"""The rules a server runs with: Azure's (``azure/rules.py``), EC2's (``aws/model.py``) and Compute Engine's (``gcp/model.py``), in one object that the
command line builds and the engine hands to each component."""

from __future__ import annotations

from dataclasses import dataclass, field

from forewarn.aws.model import Ec2Rules, check_ec2_rules
from forewarn.azure.rules import AzureRules, check_azure_rules
from forewarn.gcp.model import GceRules, check_gce_rules


@dataclass(frozen=True)
class Rules(AzureRules):
    ec2: Ec2Rules = field(default_factory=Ec2Rules)
    gce: GceRules = field(default_factory=GceRules)


def check_rules(rules: Rules) -> Rules:
    """Every rule within the bounds every event is held to (a refused rule raises ``Invalid``)."""
    check_azure_rules(rules)
    check_ec2_rules(rules.ec2)
    check_gce_rules(rules.gce)
    return rules
