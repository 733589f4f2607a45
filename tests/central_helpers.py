"""The fleet of the Azure central delivery tests (acknowledge API, access control, Resource Graph), shared with
the tests of JSON from outside."""

SUB_A = "6f1c9b2e-5d4a-4e0b-9c3f-2a7d8e1b4c01"
SUB_B = "0b8e7d6c-3a2f-4c1e-8d9b-5f4a3e2d1c02"
CENTRAL = {"scheduled_events_additional_publishing_targets": {"event_grid_and_resource_graph": {"enable": True}}}
FLEET = f"""
defaults: {{subscription: {SUB_A}, resource_group: contoso-rg, location: westeurope}}
hosts: [{{name: h1}}, {{name: h2}}, {{name: h3}}]
availability_sets:
  - {{name: db, scheduled_events_policy: {{}}}}
vms:
  - {{name: db-0, host: h1, availability_set: db}}
  - {{name: db-1, host: h2, availability_set: db}}
  - name: solo
    host: h3
    scheduled_events_policy: {CENTRAL}
  - {{name: other, host: h3, subscription: {SUB_B}, resource_group: fabrikam-rg,
      scheduled_events_policy: {CENTRAL}}}
  - {{name: ops, host: h3, resource_group: ops-rg, scheduled_events_policy: {CENTRAL}}}
scale_sets:
  - name: web
    instances: 2
    hosts: [h1, h2]
    scheduled_events_policy: {CENTRAL}
"""
RG = f"/subscriptions/{SUB_A}/resourceGroups/contoso-rg/providers/Microsoft.Compute"
