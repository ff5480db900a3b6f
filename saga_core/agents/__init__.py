"""saga_core.agents."""
