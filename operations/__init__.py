"""Operating a server: health and readiness, retention, metrics (issue 21).

On top of every other app: it reads and deletes across all of them, and nothing imports it
but the URL routes and the settings.
"""
