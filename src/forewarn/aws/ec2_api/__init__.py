"""The Amazon EC2 Query API, the actions about scheduled events: ``DescribeInstanceStatus`` and
``ModifyInstanceEventStartTime`` (the AWS page "Scheduled events for your instances"; the EC2 API Reference; "Error
codes for the Amazon EC2 API"), the six event-window actions
(``Create/Describe/Modify/Delete/Associate/DisassociateInstanceEventWindow``, "Define event windows for scheduled
events") and the three event notification attribute actions
(``Register/Deregister/DescribeInstanceEventNotificationAttributes``, "Customize scheduled event notifications"). With
credentials configured, every request's SigV4 signature is verified (botocore recomputes it).

Served on its own listener as an EC2 endpoint, so boto3 and the aws CLI work against it unmodified
(``endpoint_url="http://127.0.0.1:PORT"``). The wire is EC2's query protocol: ``POST /`` with a form-encoded body
(``Action=...&Version=2016-11-15&...``) or ``GET`` with the same parameters in the query string; answers are XML in the
``http://ec2.amazonaws.com/doc/2016-11-15/`` namespace, errors ``<Response><Errors><Error>`` with ``RequestID``.

Reads take the engine's state as it is (after applying deadlines that fell due); every write goes through
:meth:`Maintenance.perform`, so it is committed before the answer leaves.
docs/aws-api.md describes every parameter, filter, error and choice.

The modules: protocol (the XML wire and EC2's error shape), params (reading a request's parameters), sigv4
(signatures), filters, paging (pages and NextToken), backend (the one door into the engine), status (what
DescribeInstanceStatus shows of an instance), registry (actions by name), app (the ASGI app, create_ec2_app) and one
module per group of actions: instances, events, windows (with window_params), attributes.
"""
