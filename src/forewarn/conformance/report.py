"""The battery's reports: a scorecard for the terminal, JSON, JUnit XML for CI, and one self-contained HTML file
(no script, no style sheet or font from elsewhere)."""

from __future__ import annotations

import html
from collections.abc import Sequence
from typing import Any
from xml.etree import ElementTree

from forewarn.conformance_cases import FAIL, NOT_JUDGED, PASS, CaseResult
from forewarn.core.words import counted

MARKS = {PASS: "pass", FAIL: "FAIL", NOT_JUDGED: "n/j "}


def summary(results: Sequence[CaseResult]) -> dict[str, int]:
    return {grade: sum(1 for r in results if r.grade == grade) for grade in (PASS, FAIL, NOT_JUDGED)}


def failed(results: Sequence[CaseResult]) -> bool:
    """Whether a required case failed: the run's exit status."""
    return any(r.grade == FAIL and r.case.required for r in results)


def scorecard(results: Sequence[CaseResult], timing: str, wall: float) -> str:
    lines = [f"conformance ({timing} timing{': notices compressed to seconds' if timing == 'fast' else ''})"]
    for result in results:
        lines.append(
            f"{MARKS[result.grade]}  {result.case.cloud:<6} {result.case.name:<26} {result.wall:5.1f} s  {result.case.title}"
        )
        for grade in result.grades:
            if grade.grade != PASS or result.grade != PASS:
                lines.append(f"        {MARKS[grade.grade]} {grade.check}: {grade.reason}")
    counts = summary(results)
    lines.append(
        f"{counts[PASS]} passed, {counts[FAIL]} failed, {counts[NOT_JUDGED]} not judged "
        f"of {counted(len(results), 'case')} in {wall:.0f} s"
    )
    if counts[NOT_JUDGED] and any(g.reason.startswith("no --") for r in results for g in r.grades):
        lines.append("not judged: give --drained CMD and --restored CMD to judge the drain and the restore")
    return "\n".join(lines) + "\n"


def as_json(results: Sequence[CaseResult], timing: str, wall: float) -> dict[str, Any]:
    return {
        "timing": timing,
        "wall_seconds": round(wall, 1),
        "summary": summary(results),
        "cases": [
            {
                "cloud": r.case.cloud,
                "name": r.case.name,
                "title": r.case.title,
                "source": r.case.source,
                "required": r.case.required,
                "grade": r.grade,
                "wall_seconds": round(r.wall, 1),
                "checks": [{"check": g.check, "grade": g.grade, "reason": g.reason} for g in r.grades],
                "notes": list(r.notes),
            }
            for r in results
        ],
    }


def junit(results: Sequence[CaseResult], wall: float) -> bytes:
    counts = summary(results)
    suite = ElementTree.Element(
        "testsuite",
        name="forewarn conformance",
        tests=str(len(results)),
        failures=str(counts[FAIL]),
        skipped=str(counts[NOT_JUDGED]),
        time=f"{wall:.1f}",
    )
    for r in results:
        case = ElementTree.SubElement(
            suite, "testcase", classname=f"conformance.{r.case.cloud}", name=r.case.name, time=f"{r.wall:.1f}"
        )
        detail = "\n".join(f"{g.grade}: {g.check}: {g.reason}" for g in r.grades) + f"\nsource: {r.case.source}"
        if r.grade == FAIL:
            reasons = "; ".join(g.reason for g in r.grades if g.grade == FAIL)
            ElementTree.SubElement(case, "failure", message=reasons).text = detail
        elif r.grade == NOT_JUDGED:
            reasons = "; ".join(g.reason for g in r.grades if g.grade == NOT_JUDGED)
            ElementTree.SubElement(case, "skipped", message=f"not judged: {reasons}")
        ElementTree.SubElement(case, "system-out").text = detail
    return ElementTree.tostring(suite, encoding="utf-8", xml_declaration=True)


STYLE = """body{font-family:sans-serif;margin:2em}table{border-collapse:collapse}td,th{border:1px solid #ccc;
padding:.3em .6em;vertical-align:top;text-align:left}.pass{background:#e6f4e6}.fail{background:#f8dcdc}
.nj{background:#f4f0dc}small{color:#555}"""


def html_page(results: Sequence[CaseResult], timing: str, wall: float) -> str:
    rows = []
    for r in results:
        css = {PASS: "pass", FAIL: "fail", NOT_JUDGED: "nj"}[r.grade]
        notes = "".join(f"<br><small>{html.escape(note)}</small>" for note in r.notes)
        checks = "<br>".join(
            f"<b>{html.escape(g.grade)}</b> {html.escape(g.check)}: {html.escape(g.reason)}" for g in r.grades
        )
        rows.append(
            f'<tr class="{css}"><td>{html.escape(r.grade)}</td><td>{html.escape(r.case.cloud)}</td>'
            f"<td>{html.escape(r.case.name)}<br><small>{html.escape(r.case.title)}</small></td><td>{checks}{notes}</td>"
            f"<td><small>{html.escape(r.case.source)}</small></td><td>{r.wall:.1f} s</td></tr>"
        )
    counts = summary(results)
    return (
        '<!DOCTYPE html><html><head><meta charset="utf-8"><title>forewarn conformance</title>'
        f"<style>{STYLE}</style></head><body><h1>forewarn conformance</h1>"
        f"<p>{counts[PASS]} passed, {counts[FAIL]} failed, {counts[NOT_JUDGED]} not judged, {timing} timing, "
        f"{wall:.0f} s</p><table><tr><th>grade</th><th>cloud</th><th>case</th><th>checks</th><th>source</th>"
        f"<th>wall</th></tr>{''.join(rows)}</table></body></html>\n"
    )
