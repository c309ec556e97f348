"""synattn trainer workers: Transformer NMT with syntax- and head-level attention variants."""
