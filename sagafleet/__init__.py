"""sagafleet"""
