"""The external gateway: Keel's side of the versioned JSON-RPC protocol to external agent
backends and tool providers (see docs/external.md).

Importing the package loads nothing: import the modules themselves (protocol, jsonrpc, client,
transport, http, errors, sidecar_ref).
"""
