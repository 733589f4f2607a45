"""The dashboard's scenario panel in a real headless browser, beside the fleets it meets: on the demo fleet `make run`
serves, a shipped scenario (written for a fleet of its own) cannot be run and the panel says what it lacks and the
command that serves its fleet; on that fleet it runs, and its result stays, with its time, until dismissed."""

from __future__ import annotations

import pytest

from browser import chromium_or_skip, launch
from helpers import ROOT, Server

playwright_api = pytest.importorskip("playwright.sync_api")

ARTIFACTS = ROOT / "tests" / "artifacts" / "dashboard"


@pytest.fixture(scope="module")
def browser():
    executable = chromium_or_skip()
    with playwright_api.sync_playwright() as playwright:
        running = launch(playwright, executable)
        yield running
        running.close()


def opened(browser, server):
    context = browser.new_context(viewport={"width": 1400, "height": 900})
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.goto(server.control + "/")
    page.wait_for_selector("#live.on")
    page.wait_for_selector("#scenario-name option", state="attached")
    return context, page, errors


def test_on_the_demo_fleet_a_scenario_of_another_fleet_says_how_to_serve_it(browser, tmp_path):
    demo = (ROOT / "src/forewarn/data/demo-fleet.yaml").read_text()
    with Server(tmp_path, fleet_text=demo) as server:
        context, page, errors = opened(browser, server)
        groups = page.eval_on_selector_all("#scenario-name optgroup", "gs => gs.map(g => [g.label, g.children.length])")
        assert groups == [["Written for a fleet of their own", len(server.get("/v1/scenarios"))]]
        page.select_option("#scenario-name", "live-migration")
        assert page.is_disabled("#scenario-run")
        note = page.locator("#scenario-note")
        assert note.is_visible()
        assert "live-migration is written for a fleet of its own: this server's has no app-01." in note.text_content()
        command = page.text_content("#scenario-note code")
        assert command.startswith(
            "forewarn serve --fleet scenario:live-migration --db :memory: --clock manual --start "
        )
        assert command.endswith("--port 8470 --imds-port 8469 --arm-port 8471 --ec2-port 8472 --gce-port 8473")
        assert page.get_attribute("#scenario-note a", "href") == "http://127.0.0.1:8470/"
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        page.locator("#scenario-note").screenshot(path=str(ARTIFACTS / "scenario-note-demo-fleet.png"))
        assert page.locator(".scenario-run").count() == 0  # nothing ran, nothing failed
        context.close()
        assert not errors, errors


def test_on_its_own_fleet_a_scenario_runs_and_its_result_stays_until_dismissed(browser, tmp_path):
    with Server(tmp_path, fleet_text=None, extra=["--fleet", "scenario:live-migration"]) as server:
        context, page, errors = opened(browser, server)
        assert page.eval_on_selector("#scenario-name optgroup", "g => g.label") == "Run on this fleet"
        page.select_option("#scenario-name", "live-migration")
        assert not page.is_disabled("#scenario-run") and page.locator("#scenario-note").is_hidden()
        page.click("#scenario-run")
        page.wait_for_selector(".scenario-run[data-status=passed]", timeout=120_000)
        shown = page.text_content(".scenario-run b")
        assert shown == "live-migration (fast): passed"
        assert page.text_content(".scenario-run .meta").startswith("started ")
        page.reload()
        page.wait_for_selector("#live.on")
        page.wait_for_selector(".scenario-run[data-status=passed]")  # kept by the server: a reload shows it
        page.click(".scenario-run button:has-text('Dismiss')")
        page.wait_for_function("() => !document.querySelector('.scenario-run')")
        page.reload()
        page.wait_for_selector("#live.on")
        page.wait_for_selector("#scenario-name option", state="attached")
        assert page.locator(".scenario-run").count() == 0  # dismissed: gone after a reload too
        context.close()
        assert not errors, errors
