"""events.eventstore."""
