"""application.principals."""
