"""The smallest complete cloud: a tests-only plugin that proves the extension point (docs/architecture.md, "Adding a
cloud"). Its machines get one kind of maintenance, a reboot announced ahead; each reads the announcement at
``GET /example/v1/maintenance`` on the metadata address. Registered with ``FOREWARN_CLOUDS=example_cloud.cloud:EXAMPLE``
and this directory on ``PYTHONPATH``; nothing outside it names it."""
