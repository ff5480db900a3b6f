"""application.telemetry."""
