"""synattn job queue: parse and training jobs over Celery, the job store, the job API, reports."""

__version__ = "0.1.0"
