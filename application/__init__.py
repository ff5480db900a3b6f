"""application."""
