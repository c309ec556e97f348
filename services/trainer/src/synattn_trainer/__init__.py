"""synattn trainer workers: Transformer NMT with syntax- and head-level attention variants."""

# the composition root of the plugin registry: its loader connects on import, before any
# look-up of a variant, option or preset can need it (synattn_trainer.plugin_registry)
from synattn_trainer import plugins as _plugins  # noqa: F401
