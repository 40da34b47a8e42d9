"""An example keel-stream plugin."""
