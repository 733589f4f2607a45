"""The dashboard in a real headless browser (Debian's chromium, driven by Playwright): a person's whole path through
one maintenance event without a reload, and the page's load at 10,000 VMs within its budget."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time

import pytest
import requests

from browser import chromium_or_skip, launch
from helpers import ROOT, Server

playwright_api = pytest.importorskip("playwright.sync_api")

# Measured on the 2-core development machine shared with other work (docs/dashboard.md has the figures): a load of
# 10,000 VMs took 1.4 to 2.2 s to the first painted fleet with the stream live. The budget leaves room for a loaded CI.
LOAD_BUDGET_10K_SECONDS = 5.0

# Screenshots the readability tests keep, per viewport, for a person to look at (ignored by git).
ARTIFACTS = ROOT / "tests" / "artifacts" / "dashboard"
VIEWPORTS = [(1400, 900), (1920, 1080)]


@pytest.fixture(scope="module")
def browser():
    executable = chromium_or_skip()
    with playwright_api.sync_playwright() as playwright:
        running = launch(playwright, executable)
        yield running
        running.close()


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    with Server(tmp_path_factory.mktemp("dashboard-browser")) as running:
        yield running


@pytest.fixture
def page(browser, server):
    server.reset()
    context = browser.new_context(viewport={"width": 1400, "height": 900})
    opened = context.new_page()
    errors: list[str] = []
    opened.on("pageerror", lambda error: errors.append(str(error)))
    opened.goto(server.control + "/")
    opened.wait_for_selector("#live.on")
    yield opened
    context.close()
    assert not errors, errors


def click_machine(page, name: str, double: bool = False) -> None:
    where = page.evaluate("name => forewarn.fleet.cellCenter(name)", name)
    assert where is not None, f"{name} is not drawn in the fleet view"
    (page.mouse.dblclick if double else page.mouse.click)(where["x"], where["y"])


def bar(page, event_id: str) -> dict | None:
    return page.evaluate("id => forewarn.timeline.visibleBars.find(b => b.id === id) || null", event_id)


def test_schedule_approve_and_complete_an_event_from_the_page(page, server):
    page.evaluate("window.notReloaded = true")
    click_machine(page, "WestNO_0")
    click_machine(page, "WestNO_1")
    assert page.text_content("#selection-count") == "2"
    page.select_option("#azure-type", "Freeze")
    page.click("#schedule-azure")

    row = page.wait_for_selector("#events tbody tr")
    event_id = row.get_attribute("data-event-id")
    assert row.query_selector(".status").text_content() == "Scheduled"
    assert row.query_selector(".targets").text_content() == "WestNO_0, WestNO_1"
    page.wait_for_function("id => forewarn.timeline.visibleBars.some(b => b.id === id)", arg=event_id)
    assert bar(page, event_id)["status"] == "Scheduled"

    # The VM's view: the document its IMDS serves now, byte for byte, with the same ETag.
    click_machine(page, "WestNO_0", double=True)
    page.wait_for_function(
        "id => (document.querySelector('#vm-document') || {}).textContent?.includes(id)", arg=event_id
    )
    served = requests.get(server.control + "/v1/vms/WestNO_0/scheduledevents", timeout=10)
    assert page.text_content("#vm-document-raw") == served.text
    assert page.text_content("#vm-document") == json.dumps(served.json(), indent=2)  # shown indented
    assert page.text_content("#vm-etag") == served.headers["etag"]
    assert page.text_content("#vm-incarnation") == "2"

    row.query_selector("button:text('Approve')").click()
    page.wait_for_function("id => forewarn.timeline.events.get(id).status === 'Started'", arg=event_id)
    assert page.evaluate("id => forewarn.timeline.events.get(id).approvals", event_id) == ["dashboard"]
    page.wait_for_function("() => document.querySelector('#vm-document').textContent.includes('Started')")

    # A Freeze's deadlines: the VM thaws after its 5 s, then the event completes when its impact window ends.
    for _ in range(3):
        before = page.text_content("#clock-now")
        page.click("#clock-next")
        page.wait_for_function("before => document.querySelector('#clock-now').textContent !== before", arg=before)
        if page.evaluate("id => forewarn.timeline.events.get(id).status", event_id) == "Completed":
            break
    assert page.evaluate("id => forewarn.timeline.events.get(id).status", event_id) == "Completed"
    assert page.text_content("#clock-now") == "2026-04-20T22:16:58Z"  # started at approval, 5 min window
    page.wait_for_function(
        "id => forewarn.timeline.visibleBars.some(b => b.id === id && b.status === 'Completed')", arg=event_id
    )
    page.wait_for_function("() => document.querySelector('#vm-document-raw').textContent.includes('\"Events\":[]')")
    assert (
        page.text_content("#vm-document-raw") == requests.get(server.control + "/v1/vms/WestNO_0/scheduledevents").text
    )
    assert "Started" in page.text_content("#vm-history")  # the documents it served before
    assert not page.query_selector_all("#events tbody tr")
    assert page.evaluate("window.notReloaded") is True
    latencies = page.evaluate("forewarn.state.latencies")
    assert latencies and max(latencies) < 1.0, latencies


def test_page_load_at_10000_vms_within_budget(browser, tmp_path):
    fleet = tmp_path / "fleet.yaml"
    subprocess.run(
        [sys.executable, "-m", "forewarn", "fleet", "generate", "--vms", "10000", "--out", str(fleet)],
        check=True,
        cwd=ROOT,
        env={"PYTHONPATH": str(ROOT / "src"), "PATH": "/usr/bin:/bin"},
        capture_output=True,
    )
    with Server(tmp_path, fleet_text=fleet.read_text()) as server:
        context = browser.new_context(viewport={"width": 1400, "height": 900})
        page = context.new_page()
        began = time.perf_counter()
        page.goto(server.control + "/")
        page.wait_for_function("() => forewarn.state.connected && forewarn.fleet.drawn > 0")
        took = time.perf_counter() - began
        assert page.evaluate("forewarn.fleet.data.machines.name.length") == 10000
        assert not page.evaluate("forewarn.fleet.aggregate")  # every VM a cell at 10,000
        print(f"10,000 VMs: page live and fleet painted in {took:.2f} s")
        assert took < LOAD_BUDGET_10K_SECONDS
        # Too many for named tiles: small squares, each named by the tooltip.
        assert page.evaluate("forewarn.fleet.cell.width") == 11 and page.evaluate("forewarn.fleet.labels") == []
        name = page.evaluate("forewarn.fleet.data.machines.name[0]")
        where = page.evaluate("name => forewarn.fleet.cellCenter(name)", name)
        page.mouse.move(where["x"], where["y"])
        assert page.wait_for_selector("#fleet-tooltip:not([hidden])").text_content().splitlines()[0] == name
        shots = ARTIFACTS / "1400x900"
        shots.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(shots / "fleet-10000.png"))
        context.close()


def test_run_and_pause_the_clock_from_the_page(page, server):
    page.fill("#clock-speed", "600")
    page.click("#clock-run")
    page.wait_for_function("() => document.querySelector('#clock-mode').textContent === 'running ×600'")
    shown = page.text_content("#clock-now")
    # At 600 simulated seconds a wall second, the page's clock moves on its own between two of its ticks.
    page.wait_for_function("shown => document.querySelector('#clock-now').textContent !== shown", arg=shown)
    page.click("#clock-pause")
    page.wait_for_function("() => document.querySelector('#clock-mode').textContent === 'paused (manual)'")
    clock = server.get("/v1/clock")
    assert clock["mode"] == "manual" and clock["now"] > "2026-04-20T22:11:58Z"
    assert page.text_content("#clock-now") == clock["now"][:19] + "Z"


def test_with_a_token_the_page_asks_for_it_and_then_sends_it(browser, tmp_path):
    with Server(tmp_path, extra=["--control-token", "page-token-1"]) as server:
        context = browser.new_context()
        page = context.new_page()
        page.goto(server.control + "/")
        page.wait_for_selector("#token-bar:not([hidden])")  # the fleet read and the stream were refused
        assert page.text_content("#live") == "offline"
        page.fill("#token", "page-token-1")
        page.click("#token-save")
        page.wait_for_selector("#live.on")  # the stream, read with the token
        assert page.evaluate("forewarn.fleet.data.machines.name.length") == 9
        # Given in the address instead: kept for the tab, and taken out of the address bar.
        other = context.new_page()
        other.goto(server.control + "/#token=page-token-1")
        other.wait_for_selector("#live.on")
        assert "token" not in other.url
        context.close()


def test_gce_maintenance_from_the_page_with_the_metadata_servers_own_answers(browser, tmp_path):
    demo = (ROOT / "src/forewarn/data/demo-fleet.yaml").read_text()
    with Server(tmp_path, fleet_text=demo) as server:
        context = browser.new_context(viewport={"width": 1400, "height": 900})
        page = context.new_page()
        errors: list[str] = []
        page.on("pageerror", lambda error: errors.append(str(error)))
        page.goto(server.control + "/")
        page.wait_for_selector("#live.on")
        page.evaluate("window.notReloaded = true")
        # Grouped by zone: the Compute Engine instances under their zones.
        page.select_option("#fleet-group", "zone")
        groups = page.evaluate(
            "forewarn.fleet.groups.map(g => [g.name, g.members.map(i => forewarn.fleet.data.machines.name[i])])"
        )
        assert ["us-central1-a", ["web-1", "trainer-1"]] in groups and ["us-central1-b", ["batch-1"]] in groups
        flavor = {"Metadata-Flavor": "Google"}
        served_at = f"http://127.0.0.40:{server.imds_port}/computeMetadata/v1/instance/maintenance-event"
        requests.get(served_at, headers=flavor, timeout=10)  # web-1 watches the key: it gets the 60-second notice

        click_machine(page, "web-1")
        page.click("#wave-start")  # the page starts Azure waves: not "the whole fleet" for a GCE-only selection
        page.wait_for_selector("#error:not([hidden])")
        assert "waves over Azure VMs only" in page.text_content("#error")
        assert server.get("/v1/waves") == []
        page.fill("#gce-notice", "10m")
        page.click("#schedule-gce")
        row = page.wait_for_selector("#events tbody tr")
        event_id = row.get_attribute("data-event-id")
        assert row.query_selector(".status").text_content() == "pending"
        assert row.query_selector(".targets").text_content() == "web-1"
        page.wait_for_function("id => forewarn.timeline.visibleBars.some(b => b.id === id)", arg=event_id)
        assert page.evaluate("forewarn.fleet.stateName(forewarn.fleet.index.get('web-1'))") == "scheduled"

        click_machine(page, "web-1", double=True)
        page.wait_for_selector("#gce-maintenance-event")
        served = requests.get(served_at, headers=flavor, timeout=10)
        assert page.text_content("#gce-maintenance-event") == served.text == "NONE"
        assert page.text_content("#gce-maintenance-event-etag") == served.headers["etag"]
        assert page.text_content("#gce-upcoming-maintenance-status") == "200"
        assert '"maintenance_status":"PENDING"' in page.text_content("#gce-upcoming-maintenance-raw")
        assert '"maintenance_status": "PENDING"' in page.text_content("#gce-upcoming-maintenance")  # indented

        page.click("#clock-next")  # the notice, 60 s before the migration
        page.wait_for_function(
            "() => document.querySelector('#gce-maintenance-event')?.textContent === 'MIGRATE_ON_HOST_MAINTENANCE'"
        )
        served = requests.get(served_at, headers=flavor, timeout=10)
        assert page.text_content("#gce-maintenance-event-etag") == served.headers["etag"]
        assert page.text_content("#gce-maintenance-event") == served.text
        page.click("#clock-next")  # the live migration starts: web-1 moves to another host
        page.wait_for_function("id => forewarn.timeline.gceEvents.get(id).state === 'ongoing'", arg=event_id)
        page.wait_for_function("() => forewarn.fleet.stateName(forewarn.fleet.index.get('web-1')) === 'started'")
        page.click("#clock-next")  # and ends
        page.wait_for_function("id => forewarn.timeline.gceEvents.get(id).state === 'completed'", arg=event_id)
        page.wait_for_function("() => document.querySelector('#gce-maintenance-event')?.textContent === 'NONE'")
        page.wait_for_function(
            "() => document.querySelector('#gce-upcoming-maintenance-status')?.textContent === '404'"
        )
        assert page.evaluate("forewarn.fleet.stateName(forewarn.fleet.index.get('web-1'))") == "ok"
        assert not page.query_selector_all("#events tbody tr")
        assert page.evaluate("window.notReloaded") is True
        context.close()
        assert not errors, errors


WATCHED_AT = "/computeMetadata/v1/instance/maintenance-event"


def within(box: dict | None, width: int, height: int) -> bool:
    return (
        box is not None
        and box["x"] >= 0
        and box["y"] >= 0
        and box["x"] + box["width"] <= width + 0.5
        and box["y"] + box["height"] <= height + 0.5
    )


@pytest.fixture(scope="module")
def demo_server(tmp_path_factory):
    """The demo fleet `make run` serves, with something of every cloud going on: a 14-day EC2 notice, Azure events of
    minutes, Compute Engine maintenance announced for 10 minutes on, and a wave."""
    demo = (ROOT / "src/forewarn/data/demo-fleet.yaml").read_text()
    with Server(tmp_path_factory.mktemp("dashboard-demo"), fleet_text=demo) as running:
        flavor = {"Metadata-Flavor": "Google"}
        requests.get(f"http://127.0.0.40:{running.imds_port}{WATCHED_AT}", headers=flavor, timeout=10)
        running.post("/v1/ec2/events", {"code": "system-reboot", "instances": ["i-0a1b2c3d4e5f60718"]})
        running.post("/v1/events", {"type": "Freeze", "vms": ["WestNO_0", "WestNO_1"]})
        running.post("/v1/events", {"type": "Reboot", "vms": ["standalone-01"]})
        running.post("/v1/gce/maintenance", {"instances": ["web-1"], "notice": "10m"})
        running.post("/v1/waves", {"type": "Freeze", "by": "update-domain", "groups": ["myvmss"]})
        yield running


@pytest.mark.parametrize(("width", "height"), VIEWPORTS, ids=[f"{w}x{h}" for w, h in VIEWPORTS])
def test_readable_at_a_glance(browser, demo_server, width, height):
    shots = ARTIFACTS / f"{width}x{height}"
    shots.mkdir(parents=True, exist_ok=True)
    print(f"screenshots in {shots}")
    context = browser.new_context(viewport={"width": width, "height": height})
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.goto(demo_server.control + "/")
    page.wait_for_selector("#live.on")
    page.wait_for_function("() => forewarn.timeline.visibleBars.length >= 5")
    page.screenshot(path=str(shots / "overview.png"))
    assert_panes_in_view(page, width, height)
    assert_machines_named(page)
    assert_timeline_on_now(page)
    page.close()
    context.close()
    assert not errors, errors


def assert_panes_in_view(page, width: int, height: int) -> None:
    """Nothing the page needs below the fold: the panes, every live event's row with its buttons, the actions."""
    for selector in ("#fleet-canvas", "#timeline-canvas", "#events", "#controls", "#detail", "#wave-start"):
        assert within(page.locator(selector).bounding_box(), width, height), selector
    rows = page.query_selector_all("#events tbody tr")
    assert len(rows) == 5
    pane = page.locator("#lists").bounding_box()  # its cells not cut by the pane's edge either
    for row in rows:
        box = row.bounding_box()
        assert within(box, width, height) and box["height"] >= 15, (row.text_content(), box)
        for cell in row.query_selector_all("td"):
            cell_box = cell.bounding_box()
            assert within(cell_box, width, height), cell.text_content()
            assert cell_box["x"] + cell_box["width"] <= pane["x"] + pane["width"], (cell.text_content(), pane)
    assert page.text_content("#events tbody tr:first-child td:nth-child(5)") == "22:26:58"  # NotBefore, today
    # A cloud's schedule takes one row, and the actions a small part of the pane: the fleet has the rest.
    for selector in ("#schedule-azure", "#schedule-ec2", "#schedule-gce"):
        row = page.locator(".row", has=page.locator(selector))
        assert row.bounding_box()["height"] < 32, row.text_content()
    assert page.locator("#controls").bounding_box()["height"] < 0.3 * height
    assert within(page.locator("#schedule-gce").bounding_box(), width, height)


def assert_machines_named(page) -> None:
    """Every machine's tile has its name (an EC2 instance its Name tag) and, when not ok, its state written on it."""
    labels = page.evaluate("forewarn.fleet.labels")
    canvas = page.locator("#fleet-canvas").bounding_box()
    written = {label["name"]: label for label in labels}
    names = page.evaluate("forewarn.fleet.data.machines.name")
    assert set(written) == set(names)
    assert written["i-0a1b2c3d4e5f60718"]["text"] == "orders-db"
    assert written["WestNO_0"]["text"] == "WestNO_0" and written["WestNO_0"]["state"] == "scheduled"
    for label in labels:
        assert not label["text"].endswith("…"), label  # the demo's names fit their tiles
        assert label["x"] + label["width"] <= canvas["width"] and label["y"] < canvas["height"], label
    # The tiles use the pane: wider than the squares they replace, and more than one a row.
    assert page.evaluate("forewarn.fleet.cell.width") >= 120 and page.evaluate("forewarn.fleet.perRow") >= 3


def assert_timeline_on_now(page) -> None:
    """The timeline opens on the next minutes, not on the 14 days of the EC2 notice: every cloud's events and the
    wave are bars wide enough to read, the rows named as people name them, the axis in times of day."""
    label_width = page.evaluate("forewarn.timeline.labelWidth")
    canvas_width = page.locator("#timeline-canvas").bounding_box()["width"]
    bars = page.evaluate("forewarn.timeline.visibleBars")
    assert {bar["kind"] for bar in bars} == {"azure", "ec2", "gce"}
    for bar in bars:
        shown = min(bar["x1"], canvas_width) - max(bar["x0"], label_width)
        assert shown > 80, bar
    bands = page.evaluate("forewarn.timeline.waveBands")
    assert bands and all(band["x1"] - band["x0"] > 80 for band in bands), bands
    rows = [row["text"] for row in page.evaluate("forewarn.timeline.rowLabels")]
    assert {"availability set westno", "standalone-01", "scale set myvmss · pg0", "web-1"} <= set(rows), rows
    assert any(row.startswith("orders-db") for row in rows), rows
    assert not any("/" in row for row in rows), rows  # no scope keys
    for text in page.evaluate("forewarn.timeline.barLabels"):
        assert text["x"] >= label_width, text
    drawn = page.evaluate("forewarn.timeline.ticks")
    assert all(tick["x"] >= label_width and tick["x"] < canvas_width - 30 for tick in drawn), drawn  # none cut
    ticks = [tick["text"] for tick in drawn]
    assert len(ticks) >= 4 and all(re.search(r"\d\d:\d\d$", tick) for tick in ticks), ticks
    assert ticks[0].startswith("Apr 20 "), ticks  # the day once, on the first tick


@pytest.mark.parametrize(("width", "height"), VIEWPORTS, ids=[f"{w}x{h}" for w, h in VIEWPORTS])
def test_tooltip_search_and_documents(browser, demo_server, width, height):
    shots = ARTIFACTS / f"{width}x{height}"
    shots.mkdir(parents=True, exist_ok=True)
    context = browser.new_context(viewport={"width": width, "height": height})
    page = context.new_page()
    page.goto(demo_server.control + "/")
    page.wait_for_selector("#live.on")

    where = page.evaluate("name => forewarn.fleet.cellCenter(name)", "i-0a1b2c3d4e5f60718")
    page.mouse.move(where["x"], where["y"])
    tooltip = page.wait_for_selector("#fleet-tooltip:not([hidden])")
    assert tooltip.text_content().splitlines()[:2] == ["orders-db (i-0a1b2c3d4e5f60718)", "scheduled"]
    assert within(tooltip.bounding_box(), width, height)
    page.screenshot(path=str(shots / "tooltip.png"))

    page.fill("#fleet-search", "orders")  # an EC2 Name tag
    assert page.evaluate("forewarn.fleet.members().map(i => forewarn.fleet.data.machines.name[i])") == [
        "i-0a1b2c3d4e5f60718"
    ]
    assert page.is_hidden("#fleet-empty")
    page.fill("#fleet-search", "no-such-machine")
    page.wait_for_selector("#fleet-empty:not([hidden])")
    assert page.is_hidden("#fleet-tooltip")  # the machine it named is no longer shown
    assert "nothing matches" in page.text_content("#fleet-empty")
    assert within(page.locator("#fleet-empty").bounding_box(), width, height)
    page.screenshot(path=str(shots / "search-none.png"))
    page.fill("#fleet-search", "")
    assert page.is_hidden("#fleet-empty")

    # An event open, then a machine double-clicked: the machine's view is at the top of the detail pane, in view.
    page.click("#events tbody tr a")
    page.wait_for_selector("#event-view:not([hidden])")
    click_machine(page, "WestNO_0", double=True)
    page.wait_for_selector("#vm-document")
    assert within(page.locator("#vm-view h2").first.bounding_box(), width, height)
    assert within(page.locator("#vm-document").bounding_box(), width, height)
    document = page.text_content("#vm-document")
    assert document == json.dumps(json.loads(page.text_content("#vm-document-raw")), indent=2)
    page.screenshot(path=str(shots / "machine-over-event.png"))

    # An EC2 instance: its metadata document indented, DescribeInstanceStatus one element a line.
    click_machine(page, "i-0a1b2c3d4e5f60718", double=True)
    page.wait_for_selector("#vm-status")
    assert '"Code": "system-reboot"' in page.text_content("#vm-document")
    assert len(page.text_content("#vm-status").splitlines()) > 10

    # A Compute Engine instance with nothing announced: Google's 404 page is "none", its bytes kept under it.
    click_machine(page, "trainer-1", double=True)
    page.wait_for_function("() => document.querySelector('#gce-upcoming-maintenance-status')?.textContent === '404'")
    assert page.text_content("#gce-upcoming-maintenance").startswith("none")
    assert "<html" in page.text_content("#gce-upcoming-maintenance-raw").lower()
    assert within(page.locator("#gce-upcoming-maintenance").bounding_box(), width, height)
    page.screenshot(path=str(shots / "gce-nothing-announced.png"))
    context.close()


def test_header_times_to_the_second(page, server):
    """A running clock's time has microseconds; the header shows seconds (the time and the next deadline)."""
    page.fill("#clock-speed", "1")
    page.click("#clock-run")
    page.wait_for_function("() => document.querySelector('#clock-mode').textContent === 'running ×1'")
    server.post("/v1/events", {"type": "Freeze", "vms": ["WestNO_0"]})
    assert "." in server.get("/v1/clock")["now"]  # the server's time of a running clock has microseconds
    page.wait_for_function(
        "() => document.querySelector('#clock-next-deadline').textContent.startsWith('next deadline')"
    )
    shown = page.text_content("#clock-next-deadline")
    assert re.fullmatch(r"next deadline \d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", shown), shown
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", page.text_content("#clock-now"))
    page.click("#clock-pause")
