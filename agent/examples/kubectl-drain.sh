#!/bin/sh
# forewarn-agent hook: cordon and drain this Kubernetes node before maintenance, uncordon it after.
#   forewarn-agent --on-drain '/path/kubectl-drain.sh' --on-restore '/path/kubectl-drain.sh'
# The node is KUBE_NODE_NAME, else this machine's host name (a kubelet's default node name). The drain's timeout is
# the time the event leaves (FOREWARN_SECONDS_LEFT) less DRAIN_MARGIN seconds (default 15), so that kubectl gives up
# and says so before the agent stops the hook; an event with no time (a Started one) gets DRAIN_TIMEOUT (300).
set -eu
node="${KUBE_NODE_NAME:-$(hostname)}"
case "$FOREWARN_PHASE" in
drain)
    timeout="${DRAIN_TIMEOUT:-300}"
    if [ -n "${FOREWARN_SECONDS_LEFT:-}" ]; then
        timeout=$((FOREWARN_SECONDS_LEFT - ${DRAIN_MARGIN:-15}))
    fi
    [ "$timeout" -ge 1 ] || timeout=1
    kubectl cordon "$node"
    kubectl drain "$node" --ignore-daemonsets --delete-emptydir-data --timeout="${timeout}s"
    ;;
canceled | ended)
    kubectl uncordon "$node"
    ;;
esac
