"""The tenant document: everyone's configuration of a tenant, owned by no service.

``document`` (providers, tools, models, the document's schema and its references),
``limits`` (per-tenant caps), ``policy`` (decisions, hooks, subagents), ``secrets``
(references and literal-secret refusal), ``errors`` (what a bad document raises).
Stored versioned by ``keel_stream.store``'s tenant configuration repository.
"""
