"""spaCy's matrix products through numpy's BLAS on one thread, instead of thinc's bundled blis.

thinc's ``NumpyOps`` multiplies with blis by default. On the AMD EPYC (AVX-512) cores this was
measured on, blis ran the products spaCy's tok2vec makes at 26-34 GFLOP/s and numpy's OpenBLAS, on
one thread, at 72-99: a (56 x 288) by (288 x 288) product, the size of a 4-sentence micro-batch,
took 364 us with blis against 130 us (3,000 rows: 14.6 ms against 5.0). py-spy (``--native``) shows
why: the blis wheel (1.3.4) runs its generic reference kernel here (``bli_sgemm_generic_ref``), and
``BLIS_ARCH_TYPE=haswell``, ``skx``, ``zen3`` or ``zen4`` changed nothing. The maxout layers'
products were 39% of a model process's time under API load. With numpy's BLAS the whole pipeline
parsed 1.4-1.9x more sentences per second (more at large batches), and the parses of 10,000
Multi30k sentences (heads, labels, tags) stayed identical.

OpenBLAS is held to one thread. Its worker threads spin while they wait, so with 2 threads the
same parse cost 1.64 ms of CPU per sentence against 0.89. Parsing scales by processes instead:
the API's model workers and ``synattn parse --workers``.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any


def hold_blas_to_one_thread() -> list[str]:
    """Hold the BLAS libraries this process has loaded to one thread each, all but torch's (a
    training run in the same process, such as a job worker's, keeps its threads). Returns the
    libraries held."""
    import numpy  # noqa: F401 - numpy's BLAS is loaded with it
    from threadpoolctl import ThreadpoolController

    held = []
    for lib in ThreadpoolController().lib_controllers:
        if lib.user_api == "blas" and f"{os.sep}torch{os.sep}" not in lib.filepath:
            lib.set_num_threads(1)
            held.append(lib.filepath)
    return held


def thinc_layers(nlp: Any) -> Iterator[Any]:
    """Every layer of every thinc model in ``nlp``'s components (benepar's torch model is not
    one)."""
    from thinc.api import Model

    for _, component in nlp.components:
        model = getattr(component, "model", None)
        if isinstance(model, Model):
            yield from model.walk()


def use_numpy_blas(nlp: Any) -> int:
    """Route every thinc layer of ``nlp`` that multiplies with blis through
    ``NumpyOps(use_blis=False)`` (numpy's BLAS), and hold this process's BLAS libraries (but
    torch's) to one thread. Returns the number of layers switched.

    Only thinc's plain ``NumpyOps`` is replaced: other ops (a GPU's ``CupyOps``, Apple's
    ``AppleOps``) are left as they are. The thread limit applies to the whole process: the
    process that loads a parser parses with it.
    """
    from thinc.api import NumpyOps

    hold_blas_to_one_thread()
    ops = NumpyOps(use_blis=False)
    switched = 0
    for node in thinc_layers(nlp):
        if type(node.ops) is NumpyOps and node.ops.use_blis:
            node.ops = ops
            switched += 1
    return switched
