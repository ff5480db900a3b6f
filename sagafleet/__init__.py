"""The composition root: the ``sagafleet`` command line, the settings, the embedded servers,
the operator console, the MCP gateway, the demo and its sandbox providers, and
``sagafleet.testing`` (the test kit users run their sagas on, with no servers)."""
