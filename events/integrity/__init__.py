"""events.integrity."""
