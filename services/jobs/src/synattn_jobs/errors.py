"""Errors of the job queue that clients can act on (bad specs are never retried)."""


class BadJobSpec(ValueError):
    """A job or experiment specification that cannot run: bad path, unknown variant, ..."""
