#!/bin/sh
# forewarn-agent hook: take this machine out of a load balancer before maintenance, put it back after, through the
# balancer's admin API over HTTP.
#   forewarn-agent --on-drain '/path/lb-drain.sh http://lb.internal:9000' --on-restore '/path/lb-drain.sh http://lb.internal:9000'
# The API here is a small REST one: PUT /backends/NAME {"state": "drain" | "ready"}, and GET /backends/NAME answers
# {"state": ..., "connections": N}. Adapt the two curl calls to yours (HAProxy's runtime API says
# "set server BACKEND/NAME state drain"). The drain waits until the backend has no connection left; the agent stops
# it when the event's time is up. The backend is BACKEND_NAME, else the agent's name for this machine.
set -eu
admin="${1:?usage: lb-drain.sh ADMIN_URL}"
backend="$admin/backends/${BACKEND_NAME:-$FOREWARN_MACHINE}"
set_state() {
    curl -fsS -X PUT -H 'Content-Type: application/json' --data "{\"state\": \"$1\"}" "$backend" >/dev/null
}
case "$FOREWARN_PHASE" in
drain)
    set_state drain
    until curl -fsS "$backend" | grep -q '"connections": *0[,}]'; do
        sleep 1
    done
    ;;
canceled | ended)
    set_state ready
    ;;
esac
