"""application.secrets."""
