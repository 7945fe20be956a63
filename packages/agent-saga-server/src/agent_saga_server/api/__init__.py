"""The REST API: FastAPI routes under ``/v1`` over the store (``..store``).

``app`` builds the application; ``strict`` parses input strictly and adds security headers;
``security`` checks tokens and scopes; ``hub`` wakes long-polls and streams on changes; one
``routes_*`` module per part of the API, with their bodies in ``models``.
"""
