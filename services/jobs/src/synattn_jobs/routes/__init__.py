"""The job API's routes, one module per resource (``create_app`` includes them)."""
