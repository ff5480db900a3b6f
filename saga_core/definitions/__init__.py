"""saga_core.definitions."""
