"""Azure Event Grid's ``Microsoft.ResourceNotifications.MaintenanceResources`` system topic (Microsoft's "Scheduled
Events in Event Grid"): system topics
and event subscriptions on the ARM port, scheduled events published to them through the outbox, and delivered to
webhooks with Event Grid's handshake, headers, batching, retries and dead letters. docs/azure-eventgrid.md.

- model.py      topics and subscriptions: records, ARM bodies in and out (pure)
- filters.py    event types, subject and advanced filters (pure)
- events.py     ScheduledEventEmitted in the Event Grid schema and as a CloudEvent; the validation event (pure)
- settings.py   the knobs, with their documented defaults
- config.py     the ``serve --event-grid FILE`` file
- registry.py   topics and subscriptions in force, durable in the store
- publish.py    the outbox function: one queued delivery per matching subscription, committed with the change
- delivery.py   the sending policy: headers, batching, retries, time to live, dead letters
- handshake.py  endpoint validation (synchronous, validationUrl, CloudEvents OPTIONS)
- arm.py        the Microsoft.EventGrid provider on the ARM port
- service.py    the whole, and how it is wired
"""
