"""synattn core: sentence records, syntax algorithms and the shard format shared by all services."""

__version__ = "0.1.0"
