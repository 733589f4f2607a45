"""A reference EC2 handler for the conformance tests: IMDSv2 tokens, scheduled events, the Spot interruption
notice and the Auto Scaling target lifecycle state checked every second; drains (STATE/MACHINE.drained) for an
active event, an interruption or a termination by its group, and restores when nothing is ahead any more. ``--broken v1`` reads without a token; ``--broken once`` stops reading
the scheduled events once it has drained for one (it misses a reschedule); ``--broken never-restore`` stays drained
after the event completed; ``--broken no-lifecycle`` does not read the Auto Scaling target lifecycle state;
``--broken token-once`` keeps its first IMDSv2 token for ever (not renewed when it expires); ``--broken no-retry``
stops at the first error answer (a 429)."""

import argparse
import json
import os
import time
import urllib.error
import urllib.request

LIFECYCLE = "autoscaling/target-lifecycle-state"


def read(base, path, token):
    headers = {"X-aws-ec2-metadata-token": token} if token else {}
    request = urllib.request.Request(f"{base}/latest/meta-data/{path}", headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=5) as answer:
            return answer.read().decode()
    except urllib.error.HTTPError as error:
        if error.code == 404:
            return None
        raise


def new_token(base):
    request = urllib.request.Request(
        f"{base}/latest/api/token", method="PUT", headers={"X-aws-ec2-metadata-token-ttl-seconds": "300"}
    )
    with urllib.request.urlopen(request, timeout=5) as answer:
        return answer.read().decode()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--endpoint", required=True)
    parser.add_argument("--machine", required=True)
    parser.add_argument("--state", required=True)
    parser.add_argument("--broken", default="")
    args = parser.parse_args()
    drained_file = os.path.join(args.state, args.machine + ".drained")
    events, token = [], None
    while True:
        try:
            if args.broken != "v1" and not (args.broken == "token-once" and token):
                token = new_token(args.endpoint)
            if not (args.broken == "once" and os.path.exists(drained_file)):
                events = json.loads(read(args.endpoint, "events/maintenance/scheduled", token) or "[]")
            interruption = read(args.endpoint, "spot/instance-action", token)
            lifecycle = None if args.broken == "no-lifecycle" else read(args.endpoint, LIFECYCLE, token)
        except (OSError, ValueError):
            if args.broken == "no-retry":
                raise
            time.sleep(1)
            continue
        leaving = lifecycle == "Terminated"  # its group terminates it (404 outside a group)
        ahead = interruption is not None or leaving or any(event["State"] == "active" for event in events)
        if ahead and not os.path.exists(drained_file):
            time.sleep(0.5)  # the service drains
            open(drained_file, "w").close()
        elif not ahead and os.path.exists(drained_file) and args.broken != "never-restore":
            os.remove(drained_file)
        time.sleep(1)


if __name__ == "__main__":
    main()
