"""Embedded servers behind `keel-stream dev`: defaults that run anywhere."""
