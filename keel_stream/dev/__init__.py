"""`keel-stream dev`: embedded servers that run anywhere, the supervisor that runs the platform on
them, and what the single-component commands share with it (components configured from
settings, stopping on signals)."""
