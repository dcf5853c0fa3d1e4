"""An example runyard task plugin (see docs/plugins.md)."""
