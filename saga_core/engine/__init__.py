"""saga_core.engine."""
