"""application.gate_windows."""
