"""AWS Health events for EC2 scheduled events, sent through the outbox to webhooks (EventBridge format)."""
