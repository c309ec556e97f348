"""``synattn variants check``: the contract every attention variant keeps, run on one variant
(a plugin's, or a built-in) with a tiny model on a synthetic corpus made on the spot.

The checks are those the built-ins pass in the test suite (tests/trainer/test_variants.py,
test_training.py):

- ``options``: the default options place on some attention type of the check's model, and bad
  options (an unknown key, a mistyped value) are refused in one line naming the variant;
- ``gradients``: a training step reaches every parameter of the variant;
- ``masks``: padded keys get no weight, and a sentence in a padded batch is scored as alone;
- ``analysis``: switching analysis on changes no output, and what it reads is the attention
  that was applied (the probabilities a replacing ``attend`` reports make its output);
- ``deterministic``: two runs of a few updates with one seed end with equal weights;
- ``resume``: a run interrupted and resumed ends where an uninterrupted one does, bit for bit.

The corpus is synthetic: projective dependency trees over a small vocabulary, written as
shards with every syntax feature (``synattn_shared``), and a target side that reverses the
source, so variants that read the parse run as they do on parsed data.
"""

from __future__ import annotations

import hashlib
import random
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from synattn_trainer.config import ATTENTION_TYPES, AttentionType, TrainConfig, VariantSpec

CHECKS = ("options", "gradients", "masks", "analysis", "deterministic", "resume")
WORDS = ("cat", "dog", "bird", "tree", "house", "river", "stone", "child", "sees", "likes",
         "finds", "takes", "red", "small", "old", "green", "the", "a", "near", "under",
         "with", "quickly", "often", "and")  # fmt: skip
UPOS = {"the": "DET", "a": "DET", "near": "ADP", "under": "ADP", "with": "ADP",
        "and": "CCONJ", "sees": "VERB", "likes": "VERB", "finds": "VERB", "takes": "VERB",
        "red": "ADJ", "small": "ADJ", "old": "ADJ", "green": "ADJ", "quickly": "ADV",
        "often": "ADV"}  # fmt: skip
XPOS = {"DET": "DT", "ADP": "IN", "CCONJ": "CC", "VERB": "VBZ", "ADJ": "JJ", "ADV": "RB",
        "NOUN": "NN", "PUNCT": "."}  # fmt: skip
MODEL = {"enc_layers": 2, "dec_layers": 2, "d_model": 32, "d_ff": 64, "heads": 8,
         "dropout": 0.1, "attn_dropout": 0.1}  # fmt: skip
UPDATES, STOP_AT = 5, 2  # the run crosses the end of its first epoch (4 updates)


@dataclass(frozen=True)
class CheckResult:
    """One check of one variant: passed or not, and why."""

    variant: str
    check: str
    ok: bool
    reason: str

    def line(self) -> str:
        return f"{'pass' if self.ok else 'FAIL'}  {self.variant}  {self.check}: {self.reason}"


class CheckFailed(Exception):
    """A check's finding: the reason it fails."""


# ---------------------------------------------------------------------------------- data


def _tree(lo: int, hi: int, rng: random.Random, heads: list[int], parent: int) -> None:
    """Projective heads for words ``lo .. hi-1`` under ``parent`` (1-based; 0 = root)."""
    if lo >= hi:
        return
    root = rng.randrange(lo, hi)
    heads[root] = parent
    _tree(lo, root, rng, heads, root + 1)
    _tree(root + 1, hi, rng, heads, root + 1)


def synthetic_records(n: int, seed: int, first: int = 0) -> list[Any]:
    """``n`` sentences of 3-12 words ending in ``.``, with projective dependency trees."""
    from synattn_shared.records import SentenceRecord

    rng = random.Random(seed)
    out = []
    for k in range(n):
        body = [rng.choice(WORDS) for _ in range(rng.randint(2, 11))]
        heads = [0] * len(body)
        _tree(0, len(body), rng, heads, 0)
        root = heads.index(0) + 1
        words = (*body, ".")
        upos = tuple([UPOS.get(w, "NOUN") for w in body] + ["PUNCT"])
        out.append(SentenceRecord(
            sent_id=str(first + k), words=words, pretokenized=True,
            dep_head=(*heads, root), dep_rel=tuple("dep" for _ in words), upos=upos,
            xpos=tuple(XPOS[u] for u in upos), line=first + k + 1,
        ))  # fmt: skip
    return out


def _target(words: tuple[str, ...]) -> str:
    """The synthetic 'translation': the words reversed and capitalised, the full stop last."""
    return " ".join(w.capitalize() for w in reversed(words[:-1])) + " ."


def write_split(out: Path, records: list[Any]) -> Path:
    """Shards of ``records`` with their targets, as ``synattn parse --tgt`` writes them."""
    from synattn_shared.features import FeatureOptions, to_rows
    from synattn_shared.manifest import Manifest, ParserInfo, SourceInfo
    from synattn_shared.shards import ShardWriter

    options = FeatureOptions()
    text = "\n".join(" ".join(r.words) for r in records)
    manifest = Manifest(
        dataset=out.name,
        source=SourceInfo(path="synthetic", sha256=hashlib.sha256(text.encode()).hexdigest()),
        parser=ParserInfo(backend="given", model="synthetic", constituency="derived:flat"),
        features=options.model_dump(),
        rows_per_shard=max(1, len(records)),
    )
    rows = to_rows(records, options)
    for record, row in zip(records, rows, strict=True):
        row["line"], row["tgt"] = record.line, _target(record.words)
    writer = ShardWriter(out, manifest, overwrite=True)
    writer.write_shard(0, rows)
    writer.finalize(expected_rows=len(rows))
    return out


def synthetic_corpus(out: Path, train: int = 64, valid: int = 16) -> dict[str, Path]:
    """A tiny parallel corpus with parses (``train``, ``valid``) and its joint vocabulary
    (``tokenizer``), written under ``out``."""
    from synattn_trainer.tokenizer import train_tokenizer

    train_records = synthetic_records(train, seed=1)
    valid_records = synthetic_records(valid, seed=2, first=train)
    paths = {"train": write_split(out / "train", train_records),
             "valid": write_split(out / "valid", valid_records)}  # fmt: skip
    texts = [
        t for r in train_records + valid_records for t in (" ".join(r.words), _target(r.words))
    ]
    tok = train_tokenizer(texts, vocab_size=200)
    paths["tokenizer"] = out / "tokenizer.json"
    tok.save(str(paths["tokenizer"]))
    return paths


# ---------------------------------------------------------------------------------- config


def placements(name: str, options: dict[str, Any]) -> tuple[list[AttentionType], list[str]]:
    """The attention types the options place on in the check's model, and why the others
    refuse (``variant_options``'s messages)."""
    from synattn_trainer.config import ModelConfig
    from synattn_trainer.variant_options import variant_options

    model = ModelConfig.model_validate(MODEL)
    allowed: list[AttentionType] = []
    refused: list[str] = []
    for kind in ATTENTION_TYPES:
        try:
            variant_options(VariantSpec(name=name, options=options), model, kind)
        except ValueError as exc:
            refused.append(" ".join(str(exc).split()))
        else:
            allowed.append(kind)
    return allowed, refused


def check_config(name: str, options: dict[str, Any], data: dict[str, Path],
                 kinds: list[AttentionType], dropout: bool = True) -> TrainConfig:  # fmt: skip
    """The tiny run the checks train: the variant on every layer of each type in ``kinds``."""
    model = dict(MODEL) if dropout else {**MODEL, "dropout": 0.0, "attn_dropout": 0.0}
    raw: dict[str, Any] = {
        "name": f"check-{name}",
        "data": {"train": str(data["train"]), "valid": str(data["valid"]),
                 "tokenizer": str(data["tokenizer"]), "max_tokens": 200},
        "model": model,
        "attention": {k: [{"name": name, "layers": "all", "options": options}] for k in kinds},
        "optim": {"lr": 0.003, "warmup": 4},
        "train": {"max_updates": UPDATES, "bleu_every": 0, "log_every": 100, "seed": 11,
                  "checkpoint_select": "last", "keep_checkpoints": 2, "patience": 0},
        "decode": {"beam": 2},
    }  # fmt: skip
    return TrainConfig.model_validate(raw)


# ---------------------------------------------------------------------------------- checks


def check_options(name: str, options: dict[str, Any]) -> str:
    from synattn_shared.errors import one_line
    from synattn_trainer.config import ModelConfig
    from synattn_trainer.variant_options import OPTIONS, variant_options

    model = ModelConfig.model_validate(MODEL)
    allowed, refused = placements(name, options)
    if not allowed:
        raise CheckFailed(f"its options place on no attention type of the check's model "
                          f"({', '.join(refused)})")  # fmt: skip
    kind = allowed[0]

    def refusal(opts: dict[str, Any], about: str) -> str | None:
        try:
            variant_options(VariantSpec(name=name, options=opts), model, kind)
        except ValueError as exc:
            text = str(exc)
            if "\n" in text or name not in text:
                raise CheckFailed(f"{about} is refused, but not in one line naming the variant: "
                                  f"{text[:200]!r}") from None  # fmt: skip
            return text
        return None

    said = refusal({**options, "no_such_option": 1}, "an unknown option")
    if said is None:
        raise CheckFailed("an unknown option key is accepted silently (keep extra='forbid')")
    if "no_such_option" not in said:
        raise CheckFailed(f"an unknown option is refused without naming it: {said!r}")
    checked = 0
    for key in OPTIONS[name].model_fields:
        said = refusal({**options, key: {"not": "a value"}}, f"a mistyped {key!r}")
        if said is not None:
            checked += 1
            if key not in said:
                raise CheckFailed(f"a mistyped {key!r} is refused without naming it: {said!r}")
    try:  # on every layer of every type it accepts, as the other checks place it
        check_config(name, options, dict.fromkeys(("train", "valid", "tokenizer"), Path("-")),
                     allowed)  # fmt: skip
    except ValueError as exc:
        raise CheckFailed(f"a config placing it on every layer of {', '.join(allowed)} is "
                          f"refused: {one_line(exc)}") from None  # fmt: skip
    return (f"places on {', '.join(allowed)}; an unknown key and {checked} mistyped "
            "option(s) refused in one line naming them")  # fmt: skip


def _model(cfg: TrainConfig, vocab: int, seed: int = 0) -> Any:
    from synattn_trainer.model import Transformer

    torch.manual_seed(seed)
    return Transformer(cfg, vocab)


def _variants(model: Any, name: str) -> Iterator[tuple[str, Any]]:
    """``(where, variant module)`` for every module of the checked variant in ``model``."""
    from synattn_trainer.variants.base import REGISTRY

    cls = REGISTRY[name][0]
    for kind, layer, mod in model.attention_modules():
        for member in mod.variant.members():
            if type(member) is cls:
                yield f"{kind}.{layer}", member


def _batch(corpus: Any, model: Any, rows: list[int]) -> Any:
    from synattn_trainer.data import make_batch

    return make_batch(corpus, rows, model.feature_requests())


def _padded_rows(corpus: Any, n: int = 4) -> list[int]:
    """``n`` rows of distinct source and target lengths (so the batch pads), longest first."""
    seen: dict[tuple[int, int], int] = {}
    for i in range(len(corpus)):
        seen.setdefault((len(corpus.src[i]), len(corpus.tgt[i])), i)
    rows = sorted(seen.values(), key=lambda i: -len(corpus.src[i]))
    step = max(1, len(rows) // n)
    return rows[::step][:n]


def check_gradients(name: str, cfg: TrainConfig, corpus: Any, vocab: int) -> str:
    model = _model(cfg, vocab).train()
    batch = _batch(corpus, model, _padded_rows(corpus))
    logits = model(batch.src, batch.tgt_in, batch.syntax)
    loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), batch.tgt_out.flatten(),
                                             ignore_index=0)  # fmt: skip
    aux = model.aux_loss()
    total = loss + (aux if aux is not None else 0)
    if not torch.isfinite(total):
        raise CheckFailed(f"the loss is not finite ({float(total)})")
    total.backward()  # type: ignore[no-untyped-call]
    params = modules = 0
    for where, variant in _variants(model, name):
        modules += 1
        for pname, p in variant.named_parameters():
            params += 1
            if p.grad is None or not torch.isfinite(p.grad).all() or p.grad.abs().sum() == 0:
                what = "no gradient" if p.grad is None else "a zero or non-finite gradient"
                raise CheckFailed(f"{where}: parameter {pname!r} gets {what}")
    if not modules:
        raise CheckFailed("the model has no module of this variant")
    if not params:
        return f"no parameters to train in its {modules} modules; the loss is finite"
    return f"all {params} parameters of its {modules} modules get finite, non-zero gradients"


def _key_lengths(batch: Any, kind: str) -> torch.Tensor:
    keys: torch.Tensor = batch.tgt_in if kind == "dec_self" else batch.src
    return keys.ne(0).sum(1)


def check_masks(name: str, cfg: TrainConfig, corpus: Any, vocab: int) -> str:
    model = _model(cfg, vocab).eval()
    rows = _padded_rows(corpus)
    batch = _batch(corpus, model, rows)
    with torch.no_grad():
        for _, _, m in model.attention_modules():
            m.keep_probs = True
        logits = model(batch.src, batch.tgt_in, batch.syntax)
        for kind, layer, m in model.attention_modules():
            p = m.last_probs
            if p is None:
                continue
            lengths = _key_lengths(batch, kind)
            for r, n in enumerate(lengths.tolist()):
                weight = float(p[r, :, :, n:].abs().max()) if n < p.shape[-1] else 0.0
                if weight > 0:
                    raise CheckFailed(f"{kind} layer {layer}: weight {weight:.3g} on padded keys "
                                      f"(batch row {r})")  # fmt: skip
        for _, _, m in model.attention_modules():
            m.keep_probs = False
        for r, i in enumerate(rows):
            alone = _batch(corpus, model, [i])
            single = model(alone.src, alone.tgt_in, alone.syntax)[0]
            t = single.shape[0]
            diff = float((logits[r, :t] - single).abs().max())
            if not torch.allclose(logits[r, :t], single, rtol=1e-4, atol=1e-4):
                raise CheckFailed("a sentence scored in a padded batch differs from it scored "
                                  f"alone (by up to {diff:.3g}): padding leaks in")  # fmt: skip
    return (f"no weight on padded keys in any module; {len(rows)} sentences score alone as "
            "in a padded batch")  # fmt: skip


@contextmanager
def _watched_attend(model: Any, name: str, mismatches: list[str]) -> Iterator[int]:
    """Wrap the checked variant's ``attend`` (when it replaces the attention): its output
    must be the probabilities it reports applied to the values."""
    from synattn_trainer.variants.base import AttentionVariant

    wrapped = []
    for where, variant in _variants(model, name):
        if type(variant).attend is AttentionVariant.attend:
            continue
        original = variant.attend

        def attend(q: Any, k: Any, v: Any, mask: Any, ctx: Any, _orig: Callable[..., Any] =
                   original, _where: str = where) -> Any:  # fmt: skip
            out = _orig(q, k, v, mask, ctx)
            if out is not None and ctx.probs is not None:
                expected = ctx.probs.to(v.dtype) @ v
                term = ctx.value_term(ctx.probs) if ctx.value_term is not None else None
                if term is not None:
                    expected = expected + term.to(expected.dtype)
                if not torch.allclose(out, expected, rtol=1e-4, atol=1e-4):
                    mismatches.append(_where)
            return out

        variant.attend = attend
        wrapped.append(variant)
    try:
        yield len(wrapped)
    finally:
        for variant in wrapped:
            del variant.attend


def check_analysis(name: str, cfg: TrainConfig, corpus: Any, vocab: int) -> str:
    model = _model(cfg, vocab).eval()
    batch = _batch(corpus, model, _padded_rows(corpus, 3))
    mismatches: list[str] = []
    with torch.no_grad():
        plain = model(batch.src, batch.tgt_in, batch.syntax)
        modules = model.attention_modules()
        for _, _, m in modules:
            m.keep_probs = True
        with _watched_attend(model, name, mismatches) as replacing:
            analysed = model(batch.src, batch.tgt_in, batch.syntax)
    if not torch.equal(plain, analysed):
        raise CheckFailed("switching analysis on changes the model's output")
    if mismatches:
        raise CheckFailed(f"{mismatches[0]}: attend's output is not the probabilities it reports "
                          "(ctx.report) applied to the values: analysis would read attention "
                          "that was not applied")  # fmt: skip
    for kind, layer, m in modules:
        p = m.last_probs
        if p is None:
            raise CheckFailed(f"{kind} layer {layer}: no probabilities to analyse")
        queries = batch.src if kind == "enc_self" else batch.tgt_in
        keys = batch.tgt_in if kind == "dec_self" else batch.src
        want = (queries.shape[0], m.h, queries.shape[1], keys.shape[1])
        if tuple(p.shape) != want:
            raise CheckFailed(f"{kind} layer {layer}: probabilities of shape {tuple(p.shape)}, "
                              f"not {want}")  # fmt: skip
        sums = p.float().sum(-1)[queries.ne(0)[:, None, :].expand(-1, m.h, -1)]
        bad = ~(((sums - 1).abs() < 1e-3) | (sums.abs() < 1e-6))  # a pruned head: all zero
        if bad.any():
            raise CheckFailed(f"{kind} layer {layer}: a query's probabilities sum to "
                              f"{float(sums[bad][0]):.4g}, not 1")  # fmt: skip
    also = f"; its attend reports what it applies in {replacing} modules" if replacing else ""
    return f"analysis changes nothing and reads distributions over the keys{also}"


def _weights(trainer: Any) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in trainer.model.state_dict().items()}


def _differs(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> str | None:
    for k in a:
        if k not in b or not torch.equal(a[k], b[k]):
            return k
    return None


def check_runs(name: str, cfg: TrainConfig, work: Path) -> Iterator[CheckResult]:
    """``deterministic`` and ``resume``: two straight runs and one interrupted and resumed."""
    from synattn_trainer.train import Trainer

    first: dict[str, torch.Tensor] = {}

    def deterministic() -> str:
        straight = Trainer(cfg, work / "straight", progress=False)
        straight.train()
        first.update(_weights(straight))
        again = Trainer(cfg, work / "again", progress=False)
        again.train()
        key = _differs(first, _weights(again))
        if key is not None:
            raise CheckFailed(f"two runs with seed {cfg.train.seed} end with different {key!r}")
        return f"two runs of {UPDATES} updates with seed {cfg.train.seed} end with equal weights"

    def resume() -> str:
        if not first:
            raise CheckFailed("not run: the straight run failed")
        cut = Trainer(cfg, work / "resumed", progress=False)
        stopped = cut.train(stop_after_updates=STOP_AT)
        if stopped.update != STOP_AT:
            raise CheckFailed(f"the run did not stop at update {STOP_AT} ({stopped.update})")
        torch.manual_seed(999)  # another process would start with other generator states
        resumed = Trainer(cfg, work / "resumed", progress=False)
        end = resumed.train()
        key = _differs(first, _weights(resumed))
        if end.update != UPDATES or key is not None:
            raise CheckFailed(f"interrupted at update {STOP_AT} and resumed, the run ends with "
                              f"another {key!r} than an uninterrupted one")  # fmt: skip
        return (f"interrupted at update {STOP_AT} and resumed, it ends bit for bit as an "
                f"uninterrupted run of {UPDATES} updates")  # fmt: skip

    yield _outcome(name, "deterministic", deterministic)
    yield _outcome(name, "resume", resume)


def _outcome(name: str, check: str, run: Callable[[], str]) -> CheckResult:
    try:
        return CheckResult(name, check, True, run())
    except CheckFailed as exc:
        return CheckResult(name, check, False, str(exc))
    except Exception as exc:  # the variant's own code raised: that is the finding
        text = " ".join(str(exc).split())[:300]
        return CheckResult(name, check, False, f"raised {type(exc).__name__}: {text}")


def check_variant(name: str, options: dict[str, Any] | None = None,
                  work: Path | None = None) -> Iterator[CheckResult]:  # fmt: skip
    """Run every check on variant ``name`` with ``options`` (default: its defaults), yielding
    each result as it is known; ``work``: where the corpus and runs go (default: a temporary
    folder, removed after).

    Raises:
        ValueError: no variant has that name.
    """
    from synattn_trainer.data import load_corpus
    from synattn_trainer.encoded import ensure_cache
    from synattn_trainer.presets import unknown_variant
    from synattn_trainer.tokenizer import load_tokenizer
    from synattn_trainer.variant_options import OPTIONS

    if name not in OPTIONS:
        raise ValueError(unknown_variant(name))
    opts = dict(options or {})
    with tempfile.TemporaryDirectory(prefix="synattn-check-") as tmp:
        root = Path(work) if work is not None else Path(tmp)
        yield (first := _outcome(name, "options", lambda: check_options(name, opts)))
        if not first.ok:
            for check in CHECKS[1:]:
                yield CheckResult(name, check, False, "not run: the options check failed")
            return
        kinds, _ = placements(name, opts)
        data = synthetic_corpus(root / "data")
        tok = load_tokenizer(data["tokenizer"])
        vocab = tok.get_vocab_size()
        corpus = load_corpus(data["valid"], tok, mapped=False)
        for split in ("train", "valid"):  # the runs' caches built now, without their lines
            ensure_cache(data[split], tok, log=lambda _: None)
        still = check_config(name, opts, data, kinds, dropout=False)  # eval-like: no dropout
        yield _outcome(name, "gradients", lambda: check_gradients(name, still, corpus, vocab))
        yield _outcome(name, "masks", lambda: check_masks(name, still, corpus, vocab))
        yield _outcome(name, "analysis", lambda: check_analysis(name, still, corpus, vocab))
        threads = torch.get_num_threads()
        torch.set_num_threads(1)  # a tiny model: one thread is faster, and leaves the others
        try:
            yield from check_runs(name, check_config(name, opts, data, kinds), root / "runs")
        finally:
            torch.set_num_threads(threads)
