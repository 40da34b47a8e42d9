# Names vulture cannot see used: read by a framework, a protocol or a template, not by our code.
# Routes, commands, validators and Faust timers are used by their decorators (pyproject.toml's
# [tool.vulture] ignore_decorators). tests/test_quality.py runs vulture; add here only what a
# framework reads, with why, never code that is merely unused.
# ruff: noqa
# fmt: off

# Module __getattr__: Python calls it for a missing attribute (keel_stream/__init__.py).
__getattr__

# Response models: pydantic serializes every field into the API's JSON.
api_version  # keel_stream/api/models.py
service_version  # keel_stream/api/models.py
subagent_of  # keel_stream/api/models.py
attempt_log  # keel_stream/hooks/models.py
ingest_path  # keel_stream/triggers/models.py
nominal_time  # keel_stream/triggers/models.py
actual_time  # keel_stream/triggers/models.py

# The gateway's wire protocol (seed 003): fields and error codes of the spec, sent or parsed.
INTERNAL_ERROR  # keel_stream/gateway/protocol.py
resume  # keel_stream/gateway/protocol.py
server_info  # keel_stream/gateway/protocol.py
input_tokens  # keel_stream/gateway/protocol.py
output_tokens  # keel_stream/gateway/protocol.py
NONE  # keel_stream/store/protocol.py: Metering("none"), parsed from a stored value

# Context managers' __exit__ arguments: the protocol's signature.
exc_type  # keel_stream/dev/postgres.py
tb  # keel_stream/dev/postgres.py
exc_info  # keel_stream/kafka/apache.py, keel_stream/kafka/broker.py

# Attributes a framework reads: uvicorn's Server.should_exit, Faust's Worker.spinner.
_.should_exit  # keel_stream/gateway/sidecar_ref.py
_.spinner  # keel_stream/projector/host.py

# Rows a Jinja template reads (console/templates/ops_panel.html).
heartbeat_at  # keel_stream/store/ops.py
