"""Short garbage-collector pauses for long-running servers.

A server's heap is mostly what it loaded at start-up: modules, the app, a parser model. CPython's
full (generation-2) collection walks all of it, and under load one runs about once a second: in
the parser API that was a 100 ms stall of the event loop each time, the whole tail of the
latency distribution (``bench/parsing/parse.py``, 64 clients). Objects moved to the permanent
generation are never scanned again, so a full collection then walks only what requests allocated.
"""

from __future__ import annotations

import gc


def freeze_heap() -> int:
    """Collect once, then exempt every surviving object from later collections; returns how
    many objects are frozen in all.

    Call it when start-up is done (app built, model loaded): objects created later are collected
    as usual. Frozen objects are still freed by reference counting; only cycles among them are
    kept, and those were start-up's.
    """
    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()
