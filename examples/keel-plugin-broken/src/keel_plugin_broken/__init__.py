"""A deliberately broken keel-stream plugin: importing it fails, so loading its entry point is
reported as an error while every other plugin loads and the worker runs."""

raise RuntimeError("keel-plugin-broken: this plugin is broken on purpose")
