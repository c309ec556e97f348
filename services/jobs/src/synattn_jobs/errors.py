"""Errors of the job queue that clients can act on (bad specs are never retried)."""


class BadJobSpec(ValueError):
    """A job or experiment specification that cannot run: bad path, unknown variant, ..."""


class Cancelled(Exception):
    """A running job stopped between updates because it was asked to (its cancel flag, a
    worker's shutdown, Slurm's signal); it saved a resume point first."""
