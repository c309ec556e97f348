"""Pure syntax algorithms (METHODS-syntax.md): trees, SLR, dependencies, phrases, subwords."""
