"""saga_core.access."""
