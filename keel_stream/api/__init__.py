"""AgentAPI: the HTTP edge (FastAPI REST and SSE) and the web console it serves."""
