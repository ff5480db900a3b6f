"""workers.dead_letters."""
