"""The worker: claims runs and drives the agent loop (model providers, tools, subagents)."""
