"""The console's pages, one module per area (FastAPI routers with ``ConsoleRoute``)."""
