"""The battery discriminates: the reference handler passes, and each broken variant fails the cases it breaks and
no other (tests/conformance/handlers/handler.py). A few cases per test, fast timing."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

from forewarn.conformance.plugin import Verdict

HANDLER = Path(__file__).parent / "handlers" / "handler.py"
SAMPLE = Path(__file__).parents[1] / "samples" / "azure_scheduled_events_sample.py"


@pytest.fixture
def handler(tmp_path):
    """The reference handler's command and its probes (it drains by writing STATE/MACHINE.drained)."""

    def command(broken: str = "") -> dict:
        argv = [sys.executable, str(HANDLER), "--endpoint", "{metadata_url}", "--machine", "{machine}"]
        argv += ["--state", "{state_dir}", "--broken", broken]
        return {
            "command": argv,
            "drained": 'test -f "$FOREWARN_STATE_DIR/$FOREWARN_MACHINE.drained"',
            "restored": 'test ! -f "$FOREWARN_STATE_DIR/$FOREWARN_MACHINE.drained"',
        }

    return command


def judged(forewarn_conformance, handler, cases, broken: str = "") -> Verdict:
    return forewarn_conformance(**handler(broken), clouds=["azure"], cases=cases)


def test_the_correct_handler_passes_with_its_cases_side_by_side(forewarn_conformance, handler):
    """Four cases, four at a time (tests/conformance/conftest.py): each passes, the results come in the order asked,
    and the run takes less than the sum of its cases (one at a time, it takes that sum and the servers' start)."""
    cases = ["own-freeze", "shared-event", "three-vm-event", "canceled-restored"]
    began = time.monotonic()
    verdict = judged(forewarn_conformance, handler, cases)
    verdict.assert_passes()
    assert [result.case.name for result in verdict.results] == cases
    assert time.monotonic() - began < sum(result.wall for result in verdict.results)  # one at a time: more


def test_an_approval_right_after_a_peers_drain_counts_that_drain(forewarn_conformance, handler):
    """The coordinating handlers approve the event naming three VMs within milliseconds of the last drain: the
    battery probes every machine as the approval goes on, so no drain is missed between two periodic probes."""
    given = handler()
    verdict = forewarn_conformance(
        [*given["command"], "--coordinate"], drained=given["drained"], clouds=["azure"], cases=["three-vm-event"]
    )
    verdict.assert_passes()
    [result] = verdict.results
    reasons = {grade.check: grade.reason for grade in result.grades}
    assert reasons["no_approval_before_all_drained"] == "every approval came after every named machine drained"


def test_the_correct_handler_survives_a_sigkill_mid_drain_and_throttling(forewarn_conformance, handler):
    verdict = judged(forewarn_conformance, handler, ["killed-mid-drain", "other-vm-event", "imds-throttled"])
    verdict.assert_passes()


@pytest.mark.parametrize(
    "broken, cases, failed",
    [
        ("approve-all", ["own-reboot", "other-vm-event"], ["own-reboot", "other-vm-event"]),
        ("never-approve", ["own-reboot", "other-vm-event"], ["own-reboot"]),
        ("ignore-freeze", ["own-freeze", "own-reboot"], ["own-freeze"]),
        ("other-vms", ["own-reboot", "other-vm-event"], ["other-vm-event"]),
        ("own-drain-only", ["own-reboot", "three-vm-event"], ["three-vm-event"]),
    ],
)
def test_each_broken_handler_fails_what_it_breaks(forewarn_conformance, handler, broken, cases, failed):
    verdict = judged(forewarn_conformance, handler, cases, broken)
    assert verdict.failed == failed, verdict.explain()
    assert all(verdict.grades[name] == "pass" for name in cases if name not in failed), verdict.explain()


def test_without_probes_the_drain_is_not_judged(forewarn_conformance, handler):
    given = handler()
    verdict = forewarn_conformance(given["command"], clouds=["azure"], cases=["own-freeze"])
    assert verdict.grades == {"own-freeze": "not judged"}
    [result] = verdict.results
    assert {g.check: g.grade for g in result.grades}["drained_in_time"] == "not judged"


def test_microsofts_sample_unmodified_through_http_proxy(forewarn_conformance):
    """The sample hard-codes http://169.254.169.254 and reads its menu from stdin: it reaches the battery's proxy
    through HTTP_PROXY (requests honours it), and `yes 1` keeps choosing "poll"."""
    command = ["sh", "-c", f'yes 1 | "{sys.executable}" "{SAMPLE}"']
    cases = ["own-freeze", "own-reboot", "other-vm-event", "imds-throttled"]
    verdict = forewarn_conformance(command, clouds=["azure"], cases=cases)
    grades = {r.case.name: {g.check: g.grade for g in r.grades} for r in verdict.results}
    assert grades["own-freeze"]["approved_before_not_before"] == "pass"  # a Freeze under 9 s: approved at once
    assert grades["own-reboot"]["approved_before_not_before"] == "fail"  # "TODO Custom handling": never approved
    assert grades["other-vm-event"]["not_approved"] == "fail"  # it approves a Freeze whatever VMs it names
    assert grades["own-reboot"]["noticed"] == "pass"
    assert grades["imds-throttled"]["stayed_up"] == "fail"  # a 429's body has no DocumentIncarnation: KeyError
