"""Case files are read with their errors named; the reports (scorecard, JSON, JUnit, HTML) say each grade."""

from __future__ import annotations

from xml.etree import ElementTree

import pytest
from click.testing import CliRunner

from forewarn.cli.main import cli
from forewarn.conformance import battery
from forewarn.conformance.cases import CaseFileError, load_cases
from forewarn.conformance.model import FAIL, NOT_JUDGED, PASS, Case, CaseResult, Grade
from forewarn.conformance.report import as_json, failed, html_page, junit, scorecard


def case(name: str, required: bool = True) -> Case:
    return Case(name, "azure", f"title of {name}", ["WestNO_0"], [], [], "a page", 10.0, 1.0, required)


RESULTS = [
    CaseResult(case("good"), PASS, [Grade("noticed", PASS, "read it 0.4 s after")], 3.0),
    CaseResult(case("bad"), FAIL, [Grade("not_approved", FAIL, "WestNO_0 approved X & <Y>")], 4.0),
    CaseResult(
        case("unknown"), NOT_JUDGED, [Grade("drained_in_time", NOT_JUDGED, "no --drained probe was given")], 5.0
    ),
]


def test_the_shipped_azure_cases_load_in_both_timings():
    fast = {c.name: c for c, _ in battery(["azure"], "fast")}
    realistic = {c.name: c for c, _ in battery(["azure"], "realistic")}
    assert fast.keys() == realistic.keys() >= {"own-freeze", "own-preempt", "other-vm-event", "killed-mid-drain"}
    assert fast["own-reboot"].steps[0].body["notice"] == "6s"
    assert realistic["own-reboot"].steps[0].body["notice"] == "15m"


def test_a_case_file_error_names_the_case(tmp_path):
    file = tmp_path / "mine.yaml"
    file.write_text("cases:\n  - {name: x, title: t, source: s, machines: [a], checks: [drained_quickly]}\n")
    with pytest.raises(CaseFileError, match=r"mine.yaml: cases\[0\].checks\[0\]: unknown check 'drained_quickly'"):
        load_cases(file, "azure", "fast")
    file.write_text("cases:\n  - {name: x, title: t, machines: [a], checks: []}\n")
    with pytest.raises(CaseFileError, match="'source' is missing"):
        load_cases(file, "azure", "fast")


def test_an_unknown_case_or_cloud_is_refused():
    with pytest.raises(CaseFileError, match="no cases for cloud 'nimbus'"):
        battery(["nimbus"])
    result = CliRunner().invoke(cli, ["conformance", "run", "--cases", "no-such", "--", "true"])
    assert result.exit_code == 1 and "no case 'no-such'" in result.output


def test_scorecard_and_exit_status():
    text = scorecard(RESULTS, "fast", 12.0)
    assert "FAIL  azure  bad" in text and "1 passed, 1 failed, 1 not judged of 3 cases in 12 s" in text
    assert "give --drained CMD" in text
    assert failed(RESULTS)
    assert not failed([RESULTS[0], CaseResult(case("optional", required=False), FAIL, [], 1.0)])


def test_json_junit_and_html():
    data = as_json(RESULTS, "fast", 12.0)
    assert data["summary"] == {PASS: 1, FAIL: 1, NOT_JUDGED: 1}
    assert data["cases"][1]["checks"][0]["grade"] == FAIL
    suite = ElementTree.fromstring(junit(RESULTS, 12.0))
    assert (suite.get("tests"), suite.get("failures"), suite.get("skipped")) == ("3", "1", "1")
    assert suite.find("testcase[@name='bad']/failure") is not None
    assert suite.find("testcase[@name='unknown']/skipped") is not None
    page = html_page(RESULTS, "fast", 12.0)
    assert "X &amp; &lt;Y&gt;" in page and "<script" not in page and "http" not in page


def test_list_shows_each_case_with_its_source():
    result = CliRunner().invoke(cli, ["conformance", "list", "--cloud", "azure"])
    assert result.exit_code == 0, result.output
    assert "own-preempt" in result.output and "source: Azure Metadata Service" in result.output


def test_a_case_needing_more_machines_than_allowed_is_not_judged():
    from forewarn.conformance.runner import RunOptions, run_cases

    [(shared, cloud)] = [(c, o) for c, o in battery(["azure"]) if c.name == "shared-event"]
    [result] = run_cases(None, [(shared, cloud)], RunOptions(["true"], machines=1))
    assert result.grade == NOT_JUDGED
    assert result.grades[0].reason == "needs 2 machines; --machines is 1"
