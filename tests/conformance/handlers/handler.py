"""A reference Azure Scheduled Events handler for the conformance tests, with deliberately broken variants.

Correct: for each event naming this VM, drain (a file ``STATE/MACHINE.drained``, written after a drain that takes
``--drain-seconds``), then approve it when it names only this VM (an approval lets the event go ahead for every VM
it names); when no event names the VM any more without having started, restore (remove the file). ``STATE`` is the
machine's own directory for the case (the battery's ``{state_dir}``); the directories of a case's machines lie side by
side, as ``NAME.state``. With ``--coordinate`` it also approves an event naming several VMs, the moment every VM it
names has drained (its file in that VM's directory).

``--broken`` variants: ``approve-all`` approves every Scheduled event at once, drains nothing; ``never-approve``
drains and never approves; ``ignore-freeze`` does nothing for a Freeze; ``other-vms`` takes every event as its own
(drains and approves events that name other VMs only); ``own-drain-only`` approves an event naming several VMs once
its own drain is done, not waiting for theirs (its drain takes longer the later the event names its VM, so that the
first named VM approves while the others still drain); ``http-errors-only`` retries after an HTTP error (429, 500)
but stops at a dropped connection; ``impatient`` waits 2 s for an answer, and stops when one takes longer.
"""

import argparse
import json
import os
import time
import urllib.error
import urllib.request

PATH = "/metadata/scheduledevents?api-version=2020-07-01"
HEADERS = {"Metadata": "true"}


def document(base, timeout=5):
    with urllib.request.urlopen(urllib.request.Request(base + PATH, headers=HEADERS), timeout=timeout) as answer:
        return json.load(answer)


def approve(base, event_id):
    body = json.dumps({"StartRequests": [{"EventId": event_id}]}).encode()
    request = urllib.request.Request(base + PATH, body, {**HEADERS, "Content-Type": "application/json"})
    urllib.request.urlopen(request, timeout=5).close()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--endpoint", required=True)
    parser.add_argument("--machine", required=True)
    parser.add_argument("--state", required=True)
    parser.add_argument("--drain-seconds", type=float, default=1.0)
    parser.add_argument("--broken", default="")
    parser.add_argument("--coordinate", action="store_true")
    args = parser.parse_args()
    drained_file = os.path.join(args.state, args.machine + ".drained")
    approved = set()
    retried = {"http-errors-only": urllib.error.HTTPError, "impatient": (urllib.error.HTTPError, ConnectionError)}.get(
        args.broken, OSError
    )
    while True:
        try:
            handle(args, drained_file, approved)
        except retried as error:  # throttled (429), a server error, a dropped connection: try again
            print("metadata:", error, flush=True)
        time.sleep(0.5)


def handle(args, drained_file, approved):
    """One look at the document: drain for the events naming this VM, approve those naming it alone."""
    events = document(args.endpoint, 2 if args.broken == "impatient" else 5)["Events"]
    mine = []
    for event in events:
        if args.broken == "approve-all":
            if event["EventStatus"] == "Scheduled" and event["EventId"] not in approved:
                approve(args.endpoint, event["EventId"])
                approved.add(event["EventId"])
            continue
        if args.broken == "ignore-freeze" and event["EventType"] == "Freeze":
            continue
        resources = [args.machine] if args.broken == "other-vms" else event["Resources"]
        if args.machine in resources:
            mine.append((event, resources))
    if mine and not os.path.exists(drained_file):
        time.sleep(drain_seconds(args, mine))  # the service drains
        open(drained_file, "w").close()
    for event, resources in mine:
        alone = resources == [args.machine] or args.broken == "own-drain-only" or all_drained(args, resources)
        if event["EventStatus"] == "Scheduled" and alone and args.broken != "never-approve":
            if event["EventId"] not in approved:
                approve(args.endpoint, event["EventId"])
                approved.add(event["EventId"])
    if not mine and os.path.exists(drained_file) and not any(e["EventStatus"] == "Started" for e in events):
        os.remove(drained_file)  # nothing ahead for this VM any more: back in service


def peer_drained_file(state, name):
    return os.path.join(os.path.dirname(os.path.abspath(state)), name + ".state", name + ".drained")


def all_drained(args, resources, wait=5.0):
    """With --coordinate: whether every VM the event names has drained, looked at closely (every 10 ms) for a while,
    so that the approval follows the last drain at once."""
    if not args.coordinate:
        return False
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline:
        if all(os.path.exists(peer_drained_file(args.state, name)) for name in resources):
            return True
        time.sleep(0.01)
    return False


def drain_seconds(args, mine):
    if args.broken != "own-drain-only":
        return args.drain_seconds
    return args.drain_seconds * (1 + max(resources.index(args.machine) for _, resources in mine))


if __name__ == "__main__":
    main()
