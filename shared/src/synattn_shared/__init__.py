"""synattn core: sentence records, syntax algorithms and the shard format of all services."""

__version__ = "0.1.0"
