"""The dashboard's rows of the EC2 queue path in a real headless browser (Debian's chromium, driven by Playwright):
each queue's depth, messages in flight and dead-letter queue, and the lifecycle actions instances wait on with their
hook and deadline, followed without a reload while a queue-mode handler (boto3) works through a scale-in."""

from __future__ import annotations

import boto3
import pytest

from browser import chromium_or_skip, launch
from helpers import Server

playwright_api = pytest.importorskip("playwright.sync_api")

WEB = ["i-0ccccccccccccccc1", "i-0ccccccccccccccc2"]
FLEET = f"""
ec2_instances:
  - {{id: {WEB[0]}, name: web-1, auto_scaling_group: web}}
  - {{id: {WEB[1]}, name: web-2, auto_scaling_group: web}}
sqs_queues:
  - name: hooks
    redrive_policy: {{dead_letter_queue: hooks-dlq, max_receive_count: 1}}
  - name: hooks-dlq
lifecycle_hooks:
  - {{auto_scaling_group: web, name: drain, heartbeat_timeout: 300, notification_target: hooks}}
"""


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    with Server(tmp_path_factory.mktemp("dashboard-queues"), FLEET) as running:
        yield running


@pytest.fixture
def page(server):
    executable = chromium_or_skip()
    with playwright_api.sync_playwright() as playwright:
        browser = launch(playwright, executable)
        opened = browser.new_page(viewport={"width": 1400, "height": 900})
        errors: list[str] = []
        opened.on("pageerror", lambda error: errors.append(str(error)))
        opened.goto(server.control + "/")
        opened.wait_for_selector("#live.on")
        yield opened
        browser.close()
        assert not errors, errors


def cells(page, selector: str) -> list[str]:
    return page.eval_on_selector_all(f"{selector} td", "cells => cells.map(c => c.textContent)")


def wait_cells(page, selector: str, expected: list[str]) -> None:
    page.wait_for_function(
        "([selector, expected]) => JSON.stringify([...document.querySelectorAll(selector + ' td')]"
        ".map(c => c.textContent)) === JSON.stringify(expected)",
        arg=[selector, expected],
        timeout=10_000,
    )


def test_queue_depths_and_a_waiting_lifecycle_action_follow_the_handler(page, server):
    settings = {"endpoint_url": server.ec2, "region_name": "us-east-1"}
    keys = {"aws_access_key_id": "test", "aws_secret_access_key": "test"}
    sqs, autoscaling = boto3.client("sqs", **settings, **keys), boto3.client("autoscaling", **settings, **keys)
    page.evaluate("window.notReloaded = true")
    wait_cells(page, "#queues tr[data-queue=hooks]", ["hooks", "0", "0", "0", "hooks-dlq: 0"])
    assert page.is_visible("#lifecycle-none") and not page.is_visible("#lifecycle-actions")

    autoscaling.terminate_instance_in_auto_scaling_group(InstanceId=WEB[1], ShouldDecrementDesiredCapacity=True)
    [waiting] = server.get("/v1/ec2/lifecycle-actions")
    wait_cells(
        page,
        f"#lifecycle-actions tr[data-instance={WEB[1]}]",
        [f"web-2 ({WEB[1]})", "web/drain", "Terminating:Wait", "22:16:58"],
    )
    assert waiting["timeout_at"].startswith("2026-04-20T22:16:58")  # the start (22:11:58) and the 300 s heartbeat
    assert (
        page.get_attribute(f"#lifecycle-actions tr[data-instance={WEB[1]}] td.when", "title") == waiting["timeout_at"]
    )
    wait_cells(page, "#queues tr[data-queue=hooks]", ["hooks", "1", "0", "0", "hooks-dlq: 0"])

    url = sqs.get_queue_url(QueueName="hooks")["QueueUrl"]
    [message] = sqs.receive_message(QueueUrl=url, VisibilityTimeout=60)["Messages"]
    wait_cells(page, "#queues tr[data-queue=hooks]", ["hooks", "0", "1", "0", "hooks-dlq: 0"])
    # received once (the redrive's maxReceiveCount): visible again, the next receive moves it to the dead-letter queue
    sqs.change_message_visibility(QueueUrl=url, ReceiptHandle=message["ReceiptHandle"], VisibilityTimeout=0)
    assert sqs.receive_message(QueueUrl=url).get("Messages") is None
    wait_cells(page, "#queues tr[data-queue=hooks]", ["hooks", "0", "0", "0", "hooks-dlq: 1"])
    wait_cells(page, "#queues tr[data-queue=hooks-dlq]", ["hooks-dlq", "1", "0", "0", ""])

    autoscaling.complete_lifecycle_action(
        AutoScalingGroupName="web", LifecycleHookName="drain", InstanceId=WEB[1], LifecycleActionResult="CONTINUE"
    )
    page.wait_for_selector("#lifecycle-none", state="visible")
    assert not page.is_visible("#lifecycle-actions")
    assert page.evaluate("window.notReloaded") is True
