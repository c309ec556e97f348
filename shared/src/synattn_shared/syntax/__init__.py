"""Pure syntax algorithms (METHODS-syntax.md): trees, distances, SLR, dependencies, phrases, subwords."""
