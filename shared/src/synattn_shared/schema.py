"""The Arrow schema of a shard (docs/shards.md): word-level, O(n) per sentence.

Bump ``SCHEMA_VERSION`` on any change of columns or meaning; readers refuse other versions.
Parquet dictionary-encodes the label columns (``dep_rel``, ``upos``, ``xpos``) on disk.

``syn_dist`` holds the distances of the n-ary tree, as parsed (unary chains collapsed), and the
attention variants read it two ways: LPEA's and RHE's local phrases as stored; SLR after a
right-binarisation (``slr_binarize``, default ``right``: Hou et al.'s code;
docs/papers/gated-slr.md, "Decisions"), which is what the parser API returns as
``features.syn_dist`` beside the row's own ``syn_dist``. For
``(S (NP (DT The) (NN cat)) (VP (VBD sat)) (. .))`` the row holds ``[1, 2, 2]`` and SLR reads
``[1, 2, 1]``.
"""

from __future__ import annotations

import pyarrow as pa

SCHEMA_VERSION = 1

SHARD_SCHEMA = pa.schema(
    [
        pa.field("row", pa.int64(), nullable=False),  # 0-based row in the dataset
        pa.field("sent_id", pa.string(), nullable=False),
        pa.field("line", pa.int64()),  # 1-based source line, when known
        pa.field("words", pa.list_(pa.string()), nullable=False),
        pa.field("pretokenized", pa.bool_(), nullable=False),
        pa.field("tgt", pa.string()),  # target side of a parallel corpus (raw text)
        pa.field("dep_head", pa.list_(pa.int16())),  # 1-based, 0 = root
        pa.field("dep_rel", pa.list_(pa.string())),
        pa.field("upos", pa.list_(pa.string())),
        pa.field("xpos", pa.list_(pa.string())),
        pa.field("syn_dist", pa.list_(pa.int16()), nullable=False),  # n-ary tree, flat [n-1]
        pa.field("const_layer", pa.list_(pa.int16()), nullable=False),  # depth in T [n]
        pa.field("tree", pa.string()),  # labelled bracketing (given trees by default)
        pa.field("has_syntax", pa.bool_(), nullable=False),
    ],
    metadata={"synattn.schema_version": str(SCHEMA_VERSION)},
)

COLUMNS = tuple(SHARD_SCHEMA.names)
