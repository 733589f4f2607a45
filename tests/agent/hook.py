"""A test hook: appends what it was given (its environment and stdin) to a log, as one JSON line when it starts and
one when it is done; waits while the file named by FOREWARN_TEST_HOLD exists (a drain that takes time)."""

import json
import os
import sys
import time

log = sys.argv[1]
event = json.load(sys.stdin)
seen = {key[len("FOREWARN_") :].lower(): value for key, value in os.environ.items() if key.startswith("FOREWARN_")}
line = {"phase": seen["phase"], "kind": seen["event_kind"], "event_id": seen["event_id"], "stdin": event, "env": seen}
with open(log, "a") as file:
    file.write(json.dumps(dict(line, done=False)) + "\n")
hold = os.environ.get("FOREWARN_TEST_HOLD")
while hold and os.path.exists(hold):
    time.sleep(0.05)
with open(log, "a") as file:
    file.write(json.dumps(dict(line, done=True)) + "\n")
