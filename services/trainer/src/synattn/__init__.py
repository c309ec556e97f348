"""synattn's Python API: ``synattn.load(checkpoint)`` gives a trained model that translates raw
sentences through the parse its training data had (``.translate``), shows what each head applies
to a sentence (``.attention``) and carries its configuration (``.config``).

```python
import synattn

model = synattn.load("runs/tiny/averaged.pt")
model.translate(["Two dogs run across the green field ."])
model.attention("A dog runs .")["modules"]["enc_self.0"]   # [heads, queries, keys]
```

The objects are those of ``synattn_trainer.api``; the command line is ``synattn``.
"""

from synattn_trainer.api import Model, ParseMismatch, ParseRecord, load

__all__ = ["Model", "ParseMismatch", "ParseRecord", "load"]
