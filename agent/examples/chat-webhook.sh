#!/bin/sh
# forewarn-agent hook: tell a chat channel (a Slack-style incoming webhook: a JSON POST of {"text": ...}) what is
# about to happen to this machine, and when it is over.
#   forewarn-agent --on-drain '/path/chat-webhook.sh https://hooks.slack.com/services/...' --on-restore '...'
# Put it first among the drain hooks, so the channel hears of the drain before it starts.
set -eu
url="${1:-${CHAT_WEBHOOK_URL:?usage: chat-webhook.sh URL (or CHAT_WEBHOOK_URL)}}"
case "$FOREWARN_PHASE" in
drain) what="draining for ${FOREWARN_EVENT_KIND} (${FOREWARN_SECONDS_LEFT:-no} seconds left)" ;;
canceled) what="${FOREWARN_EVENT_KIND} canceled: back in service" ;;
*) what="${FOREWARN_EVENT_KIND} over: back in service" ;;
esac
text="${FOREWARN_MACHINE} (${FOREWARN_CLOUD}): ${what}, event ${FOREWARN_EVENT_ID}"
# JSON string escapes for the two characters that could occur in these values.
text=$(printf '%s' "$text" | sed 's/\\/\\\\/g; s/"/\\"/g')
curl -fsS -X POST -H 'Content-Type: application/json' --data "{\"text\": \"$text\"}" "$url" >/dev/null
