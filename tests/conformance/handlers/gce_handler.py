"""A reference Compute Engine handler for the conformance tests: waits on maintenance-event with wait_for_change,
checks instance/preempted, and drains (STATE/MACHINE.drained) when either says something is coming.
``--broken polling`` reads maintenance-event without wait_for_change, every second; ``--broken no-reconnect`` stops
watching maintenance-event when its connection is dropped."""

import argparse
import os
import threading
import time
import urllib.request

HEADERS = {"Metadata-Flavor": "Google"}


def read(base, path, timeout=5):
    request = urllib.request.Request(f"{base}/computeMetadata/v1/instance/{path}", headers=HEADERS)
    with urllib.request.urlopen(request, timeout=timeout) as answer:
        return answer.read().decode().strip()


def drain(drained_file):
    if not os.path.exists(drained_file):
        time.sleep(0.5)  # the service drains
        open(drained_file, "w").close()


def watch_preemption(base, drained_file):
    """Also reads upcoming-maintenance, which answers 404 until maintenance is announced ahead (to plan for it)."""
    while True:
        try:
            if read(base, "preempted") == "TRUE":
                drain(drained_file)
            print("upcoming:", read(base, "upcoming-maintenance"), flush=True)
        except OSError:
            pass
        time.sleep(1)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--endpoint", required=True)
    parser.add_argument("--machine", required=True)
    parser.add_argument("--state", required=True)
    parser.add_argument("--broken", default="")
    args = parser.parse_args()
    drained_file = os.path.join(args.state, args.machine + ".drained")
    threading.Thread(target=watch_preemption, args=(args.endpoint, drained_file), daemon=True).start()
    while True:
        path = "maintenance-event" if args.broken == "polling" else "maintenance-event?wait_for_change=true"
        try:
            value = read(args.endpoint, path, timeout=600)
        except OSError:
            if args.broken == "no-reconnect":
                print("maintenance-event: connection lost; no longer watching", flush=True)
                return
            time.sleep(1)
            continue
        if value != "NONE":
            drain(drained_file)
        elif os.path.exists(drained_file):
            os.remove(drained_file)
        if args.broken == "polling":
            time.sleep(1)


if __name__ == "__main__":
    main()
