"""Pure syntax algorithms (docs/papers/): trees, SLR, dependencies, phrases, subwords."""
