"""The web app's route modules, one per area; each exposes ROUTES (and optionally NAV and `lifespan`), and app.py
lists them once in ROUTE_MODULES."""
