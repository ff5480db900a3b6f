"""events.saga_log.port."""
