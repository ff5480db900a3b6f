"""events.definition_store."""
