"""The EventBridge pattern language as the EventBridge User Guide's "Amazon EventBridge event patterns" and "Content
filtering in Amazon EventBridge event patterns" spell it, on the pure matcher (aws/eventbus.py)."""

from __future__ import annotations

import pytest

from forewarn.aws.eventbus import PatternInvalid, check_pattern, matches

SPOT = {
    "version": "0",
    "detail-type": "EC2 Spot Instance Interruption Warning",
    "source": "aws.ec2",
    "region": "us-east-1",
    "resources": ["arn:aws:ec2:us-east-1:123456789012:instance/i-0aaaaaaaaaaaaaaa1"],
    "detail": {"instance-id": "i-0aaaaaaaaaaaaaaa1", "instance-action": "terminate", "count": 5, "flag": None},
}


@pytest.mark.parametrize(
    ("pattern", "expected"),
    [
        ({"source": ["aws.ec2"]}, True),
        ({"source": ["aws.health", "aws.ec2"]}, True),  # any value of the list
        ({"source": ["aws.health"]}, False),
        ({"source": ["aws.ec2"], "detail-type": ["EC2 Instance Rebalance Recommendation"]}, False),  # every field
        ({"detail": {"instance-action": ["terminate"]}}, True),  # nested
        ({"detail": {"instance-action": ["stop"]}}, False),
        ({"region": [{"prefix": "us-"}]}, True),
        ({"region": [{"prefix": "eu-"}]}, False),
        ({"detail": {"instance-id": [{"suffix": "a1"}]}}, True),
        ({"detail-type": [{"equals-ignore-case": "ec2 spot instance interruption warning"}]}, True),
        ({"detail": {"instance-action": [{"anything-but": "stop"}]}}, True),
        ({"detail": {"instance-action": [{"anything-but": ["stop", "terminate"]}]}}, False),
        ({"region": [{"anything-but": {"prefix": "us-"}}]}, False),
        ({"detail": {"missing": [{"anything-but": "x"}]}}, False),  # anything-but needs the field
        ({"detail": {"count": [{"numeric": [">", 0, "<=", 5]}]}}, True),
        ({"detail": {"count": [{"numeric": ["<", 5]}]}}, False),
        ({"detail": {"count": [5.0]}}, True),  # numbers compare as numbers
        ({"detail": {"count": ["5"]}}, False),  # a string is not a number
        ({"detail": {"instance-id": [{"exists": True}]}}, True),
        ({"detail": {"missing": [{"exists": False}]}}, True),
        ({"detail": {"missing": [{"exists": True}]}}, False),
        ({"nothing": {"deeper": [{"exists": False}]}}, True),  # an absent object satisfies only exists: false
        ({"nothing": {"deeper": ["x"]}}, False),
        ({"detail": {"flag": [None]}}, True),  # null matches a null value
        ({"detail": {"missing": [None]}}, False),  # and not a missing field
        ({"resources": [{"prefix": "arn:aws:ec2:us-east-1:"}]}, True),  # any element of an array
    ],
)
def test_matching(pattern, expected):
    check_pattern(pattern)
    assert matches(pattern, SPOT) is expected


@pytest.mark.parametrize(
    "pattern",
    [
        {},
        [],
        {"source": "aws.ec2"},  # a leaf must be an array
        {"source": []},
        {"source": [{"wildcard-ish": "x"}]},
        {"source": [{"prefix": 1}]},
        {"detail": {"count": [{"numeric": [">", "1"]}]}},
        {"detail": {"count": [{"numeric": ["!", 1]}]}},
        {"detail": {"x": [{"exists": "yes"}]}},
        {"detail": {"x": [{"prefix": "a", "suffix": "b"}]}},
    ],
)
def test_refused_patterns(pattern):
    with pytest.raises(PatternInvalid):
        check_pattern(pattern)
