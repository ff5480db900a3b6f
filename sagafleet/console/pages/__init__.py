"""The console's pages: one module per page (or group of pages), discovered by
:func:`sagafleet.console.app.page_modules`. See :mod:`sagafleet.console` for the contract."""
