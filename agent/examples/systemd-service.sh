#!/bin/sh
# forewarn-agent hook: stop a systemd service before maintenance, start it again after.
#   forewarn-agent --on-drain '/path/systemd-service.sh myapp' --on-restore '/path/systemd-service.sh myapp'
# systemctl stop returns once the service has stopped (its own TimeoutStopSec bounds that); the agent stops the hook
# anyway when the event's time is up.
set -eu
service="${1:?usage: systemd-service.sh UNIT}"
case "$FOREWARN_PHASE" in
drain) systemctl stop "$service" ;;
canceled | ended) systemctl start "$service" ;;
esac
