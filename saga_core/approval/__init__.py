"""saga_core.approval."""
