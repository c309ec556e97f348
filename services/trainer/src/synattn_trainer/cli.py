"""Trainer commands of the ``synattn`` CLI: tokenizer, train, translate, evaluate, score."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, cast

import typer

from synattn_shared.atomic import atomic_write_text, atomic_write_with
from synattn_shared.cli import console, err, fail
from synattn_shared.errors import one_line

if TYPE_CHECKING:  # torch is imported by the commands that train, not with the CLI
    from synattn_trainer.train import TrainResult


def tokenizer_train(
    data: Annotated[
        list[Path], typer.Option(readable=False, help="parsed shard directories with a tgt column")
    ],
    out: Annotated[Path, typer.Option(help="tokenizer.json to write")],
    vocab_size: Annotated[int, typer.Option(min=100)] = 8000,
) -> None:
    """Train the joint BPE vocabulary on source words and target text of the given shards."""
    from synattn_shared.manifest import write_json
    from synattn_shared.progress import Progress
    from synattn_shared.shards import ShardDataset
    from synattn_trainer.tokenizer import train_tokenizer

    texts: list[str] = []
    bar = Progress("tokenizer train", None, "rows read", rate_unit="rows", every=10.0)
    try:
        sets = [ShardDataset(d) for d in data]
        bar.set_total(sum(len(ds) for ds in sets))
        for ds in sets:
            rows = 0
            for row in ds.iter_rows(columns=["words", "tgt"]):
                texts.append(" ".join(row["words"]))
                if row["tgt"] is not None:
                    texts.append(row["tgt"])
                rows += 1
                if rows % 5000 == 0:
                    bar.advance(5000)
            bar.advance(rows % 5000)
    except (FileNotFoundError, ValueError) as exc:
        bar.close(finished=False)
        raise fail(str(exc)) from None
    bar.close()
    bar.say(f"tokenizer: learning {vocab_size:,} BPE subwords from {len(texts):,} texts")
    tok = train_tokenizer(texts, vocab_size, show_progress=not bar.lines)
    atomic_write_with(out, lambda tmp: tok.save(str(tmp)))
    write_json(
        out.with_suffix(".meta.json"),
        {"sources": [str(d) for d in data], "vocab_size": tok.get_vocab_size()},
    )
    console.print(f"{out}: {tok.get_vocab_size()} subwords from {len(texts)} texts")


def train(
    config: Annotated[Path, typer.Argument(readable=False, help="training config (YAML)")],
    out: Annotated[Path, typer.Option(help="run directory (resumes when it has checkpoints)")],
    set_: Annotated[
        list[str] | None, typer.Option("--set", help="override: key.path=value")
    ] = None,
    limit: Annotated[int | None, typer.Option(help="use only the first N training pairs")] = None,
    loader_workers: Annotated[
        int,
        typer.Option(
            min=0,
            max=64,
            help="processes that build batches ahead (GPU runs; same batches, 0: inline)",
        ),
    ] = 0,
) -> None:
    """Train (or resume) a model; checkpoints, metrics.jsonl and TensorBoard logs go to --out."""
    import yaml
    from pydantic import ValidationError

    from synattn_trainer.config import load_config
    from synattn_trainer.train import Trainer

    overrides = {}
    for item in set_ or []:
        if "=" not in item:
            raise fail(f"--set {item!r}: expected key.path=value")
        key, value = item.split("=", 1)
        overrides[key] = yaml.safe_load(value)
    from synattn_shared.cli import cli_path_problem

    if (problem := cli_path_problem(config)) is not None:
        raise fail(f"{config}: {problem}")
    try:
        cfg = load_config(config, overrides)
    except (ValidationError, ValueError, OSError) as exc:
        said = one_line(exc)  # load_config's own messages name the file already
        raise fail(said if said.startswith(f"{config.name}:") else f"{config}: {said}") from None
    from synattn_trainer.preflight import check_config_files

    try:  # every file the config names, before a model is built
        check_config_files(cfg, config, overrides)
    except ValueError as exc:
        raise fail(f"{config}: {one_line(exc)}") from None
    try:
        trainer = Trainer(cfg, out, limit=limit, loader_workers=loader_workers)
    except (FileNotFoundError, ValueError) as exc:
        raise fail(str(exc)) from None
    from synattn_shared.errors import BadFile
    from synattn_trainer.plugins import PluginMismatch

    try:
        result = trainer.train()
    except (PluginMismatch, BadFile) as exc:  # resuming: another plugin version, a damaged file
        raise fail(str(exc)) from None
    console.print(
        f"{out}: stopped ({result.stopped}) at update {result.update}, epoch {result.epoch}; "
        f"best epoch-end valid loss {result.best_valid_loss:.4f}{_best_checkpoint_note(result)}; "
        f"averaged {result.averaged}"
    )


def _best_checkpoint_note(result: TrainResult) -> str:
    """The best checkpoint's validation loss and update (what best.pt holds) for ``train``'s
    last line, beside the best epoch-end one it may differ from; "" without a best_valid
    selection."""
    if result.best_checkpoint_valid_loss is None:
        return ""
    return (
        f"; best checkpoint valid loss {result.best_checkpoint_valid_loss:.4f} "
        f"(update {result.best_checkpoint_update}, best.pt)"
    )


def translate(
    checkpoint: Annotated[Path, typer.Option(readable=False, help="checkpoint or averaged.pt")],
    data: Annotated[
        Path | None,
        typer.Option(readable=False, help="parsed shard directory (source side) to translate"),
    ] = None,
    text: Annotated[
        str | None,
        typer.Option(help="raw sentences to translate, one per line (instead of --data)"),
    ] = None,
    input_: Annotated[
        Path | None,
        typer.Option(
            "--input",
            readable=False,
            help="plain-text file of raw sentences, one per line ('-': stdin)",
        ),
    ] = None,
    out: Annotated[
        Path | None, typer.Option(help="file for the translations (default: printed)")
    ] = None,
    tokenizer: Annotated[
        Path | None, typer.Option(readable=False, help="default: the config's tokenizer")
    ] = None,
    beam: Annotated[int | None, typer.Option(min=1)] = None,
    lenpen: Annotated[float | None, typer.Option()] = None,
    ablate: Annotated[
        list[int], typer.Option(help="fixed-pattern head to switch off for this run (repeat)")
    ] = [],  # noqa: B006
    batch_lines: Annotated[
        int | None,
        typer.Option(
            min=1,
            max=10_000,
            help="raw lines parsed and translated at a time, then printed (default: 1 from a "
            "terminal, else the config's decode.batch_sentences)",
        ),
    ] = None,
    max_chars: Annotated[
        int, typer.Option(min=1, help="characters one raw sentence may have")
    ] = 2000,
    max_lines: Annotated[
        int, typer.Option(min=1, help="raw sentences one call may translate")
    ] = 100_000,
) -> None:
    """Translate a parsed split (--data), or raw sentences (--text, --input FILE, or stdin)
    parsed as the model's training data was: the same backend, model version and feature
    options, refused with the reason when this install parses differently. Raw translations
    are printed as each batch of lines is done (or written to --out at the end); a batch gives
    what --data gives for the same sentences parsed into shards and translated together."""
    if data is not None:
        if text is not None or input_ is not None:
            raise fail("give --data, --text or --input, not several")
        from synattn_shared.progress import Progress
        from synattn_trainer.inference import translate_split

        bar = Progress(f"translate {data.name}", None, "sentences", rate_unit="sent")

        def on_batch(n: int, total: int) -> None:
            if bar.total is None:
                bar.set_total(total)
            bar.advance(n)

        try:
            hyps = translate_split(checkpoint, data, tokenizer, beam, lenpen, ablate, on_batch)
        except (FileNotFoundError, ValueError) as exc:
            bar.close(finished=False)
            raise fail(str(exc)) from None
        bar.close()
        if out is None:
            _print_lines(hyps)
            return
        atomic_write_text(out, "".join(h + "\n" for h in hyps))
        console.print(f"{out}: {len(hyps)} translations")
        return
    _translate_raw(
        checkpoint, text, input_, out, tokenizer, beam, lenpen, ablate, batch_lines,
        max_chars, max_lines,
    )  # fmt: skip


def _print_lines(lines: list[str]) -> None:
    """Translations on stdout as they are (no markup), flushed: a reader sees each batch."""
    import sys

    sys.stdout.write("".join(line + "\n" for line in lines))
    sys.stdout.flush()


def _translate_raw(
    checkpoint: Path,
    text: str | None,
    input_: Path | None,
    out: Path | None,
    tokenizer: Path | None,
    beam: int | None,
    lenpen: float | None,
    ablate: list[int],
    batch_lines: int | None,
    max_chars: int,
    max_lines: int,
) -> None:
    """``translate`` of raw sentences: stream lines in batches through the recorded parse."""
    import sys
    from collections.abc import Iterable

    from synattn_shared.cli import cli_path_problem
    from synattn_shared.errors import SyntaxInputError
    from synattn_shared.progress import Progress
    from synattn_trainer.rawtext import numbered_chunks

    if text is not None and input_ is not None:
        raise fail("give --text or --input, not both")
    if input_ is not None and str(input_) != "-" and (problem := cli_path_problem(input_)):
        raise fail(f"{input_}: {problem}")
    try:
        from synattn_trainer.api import load

        model = load(checkpoint, tokenizer=tokenizer, ablate=ablate, max_chars=max_chars)
    except (FileNotFoundError, ValueError) as exc:
        raise fail(str(exc).replace("\n", " ")) from None
    from_stdin = text is None and (input_ is None or str(input_) == "-")
    if batch_lines is None:  # a person typing sees each translation at once
        interactive = from_stdin and sys.stdin.isatty()
        batch_lines = 1 if interactive else model.config.decode.batch_sentences
    done: list[str] = []
    with contextlib.ExitStack() as stack:
        lines: Iterable[str]
        if text is not None:
            source, lines = "--text", text.rstrip("\n").split("\n")
        elif from_stdin:
            source, lines = "<stdin>", sys.stdin
        else:
            assert input_ is not None
            source = str(input_)
            lines = stack.enter_context(open(input_, encoding="utf-8", errors="strict"))
        # progress on stderr for a file or piped lines, unless the translations themselves
        # stream to a terminal (--text is a few sentences, a person typing sees each answer)
        bar = None
        typed = from_stdin and sys.stdin.isatty()
        if text is None and not typed and (out is not None or not sys.stdout.isatty()):
            total = None if from_stdin or input_ is None else _count_lines(input_)
            bar = stack.enter_context(
                Progress(f"translate {source}", total, "sentences", rate_unit="sent")
            )
        try:
            for first, chunk in numbered_chunks(lines, batch_lines, max_lines, source):
                hyps = model.translate(
                    chunk, beam=beam, lenpen=lenpen, first_line=first, source=source
                )
                if bar is not None:
                    bar.advance(len(chunk))
                if out is None:
                    _print_lines(hyps)
                else:
                    done.extend(hyps)
        except SyntaxInputError as exc:
            raise fail(str(exc)) from None
        except UnicodeDecodeError as exc:
            if input_ is not None and not from_stdin:  # the file's line that does not decode
                from synattn_shared.textfile import undecodable

                raise fail(one_line(undecodable(input_))) from None
            raise fail(f"{source}: not UTF-8 text ({exc.reason})") from None
    if out is not None:
        atomic_write_text(out, "".join(h + "\n" for h in done))
        err.print(f"{out}: {len(done)} translations")


def _count_lines(path: Path) -> int | None:
    """Lines of a text file (None when it cannot be read: translating says why)."""
    try:
        with open(path, "rb") as fh:
            return sum(1 for _ in fh)
    except OSError:
        return None


def _lines(path: Path) -> list[str]:
    """The lines of a text file (``.gz`` allowed), or the one line that says why not."""
    from synattn_shared.cli import cli_path_problem
    from synattn_shared.textfile import read_lines

    if (problem := cli_path_problem(path)) is not None:
        raise fail(f"{path}: {problem}")
    try:
        return read_lines(path, fix="give a text file of one sentence per line (.gz allowed)")
    except ValueError as exc:
        raise fail(one_line(exc)) from None


def evaluate(
    hyp: Annotated[
        Path, typer.Option(readable=False, help="system output, one sentence per line")
    ],
    ref: Annotated[Path, typer.Option(readable=False, help="references (.gz allowed)")],
    baseline: Annotated[
        Path | None, typer.Option(readable=False, help="another system: paired bootstrap")
    ] = None,
    bins: Annotated[
        str, typer.Option(help="length bins: seed ([0,10)...[50,inf)) or multi30k")
    ] = "seed",
    samples: Annotated[int, typer.Option(min=10)] = 1000,
    as_json: Annotated[bool, typer.Option("--json", help="print JSON")] = False,
) -> None:
    """BLEU and chrF with sacreBLEU signatures; significance against a baseline; BLEU by
    reference-length bins."""
    from synattn_trainer.evaluate import (
        MULTI30K_BINS,
        PAPER_BINS,
        bleu_by_length,
        corpus_bleu,
        corpus_chrf,
        paired_bootstrap,
    )

    hyps, refs = _lines(hyp), _lines(ref)
    try:
        bleu = corpus_bleu(hyps, refs)
        bleu_lc = corpus_bleu(hyps, refs, lowercase=True)
        chrf = corpus_chrf(hyps, refs)
        report: dict[str, object] = {
            "bleu": bleu.score, "bleu_signature": bleu.signature,
            "bleu_lc": bleu_lc.score, "chrf": chrf.score, "chrf_signature": chrf.signature,
        }  # fmt: skip
        if baseline is not None:
            pb = paired_bootstrap(hyps, _lines(baseline), refs, samples)
            report["paired_bootstrap"] = {
                "baseline_bleu": pb.baseline, "p_value": pb.p_value,
                "ci95": list(pb.ci95), "samples": pb.samples,
            }  # fmt: skip
        edges = MULTI30K_BINS if bins == "multi30k" else PAPER_BINS
        report["bleu_by_length"] = [
            {"bin": b, "sentences": n, "bleu": s, "reliable": ok}
            for b, n, s, ok in bleu_by_length(hyps, refs, edges)
        ]
    except ValueError as exc:
        raise fail(str(exc)) from None
    if as_json:
        console.print_json(json.dumps(report))
        return
    console.print(f"BLEU {bleu.score:.2f}  {bleu.signature}\n  {bleu.detail}")
    console.print(f"BLEU (lowercased) {bleu_lc.score:.2f}")
    console.print(f"chrF {chrf.score:.2f}  {chrf.signature}")
    if "paired_bootstrap" in report:
        pb_: dict[str, Any] = report["paired_bootstrap"]  # type: ignore[assignment]
        lo, hi = pb_["ci95"]
        console.print(
            f"paired bootstrap ({pb_['samples']} samples): "
            f"baseline BLEU {pb_['baseline_bleu']:.2f}"
            f", p = {pb_['p_value']:.4f}, system 95% CI {lo:.2f}-{hi:.2f}",
            markup=False,
        )
    for row in cast(list[dict[str, Any]], report.get("bleu_by_length", [])):
        flag = "" if row["reliable"] else "  (unreliable: < 50 sentences)"
        console.print(
            f"  reference length {row['bin']:>9}: {row['sentences']:5d} sentences  "
            f"BLEU {row['bleu']:.2f}{flag}",
            markup=False,
        )


def score(
    checkpoint: Annotated[Path, typer.Option(readable=False, help="checkpoint or averaged.pt")],
    data: Annotated[
        Path,
        typer.Option(readable=False, help="parsed shard directory with the translations as tgt"),
    ],
    out: Annotated[Path | None, typer.Option(help="write one log-probability per line")] = None,
) -> None:
    """Forced-decoding log-probabilities of given translations (contrastive test suites)."""
    from synattn_trainer.inference import score_split

    try:
        scores = score_split(checkpoint, data)
    except (FileNotFoundError, ValueError) as exc:
        raise fail(str(exc)) from None
    text = "".join(f"{s:.6f}\n" for s in scores)
    if out is None:
        console.print(text, end="")
    else:
        atomic_write_text(out, text)
        err.print(f"{out}: {len(scores)} scores")


def plot_gates(
    run: Annotated[Path, typer.Argument(readable=False, help="run directory (metrics.jsonl)")],
    out: Annotated[Path | None, typer.Option(help="PNG (default: RUN/plots/gates.png)")] = None,
) -> None:
    """Gate heatmap (layers x heads) of a gated variant's last logged values."""
    from synattn_trainer.plots import gate_heatmap

    metrics = run / "metrics.jsonl"
    path = _from_metrics(
        metrics, lambda: gate_heatmap(metrics, out or run / "plots" / "gates.png")
    )
    console.print(str(path))


def _from_metrics(metrics: Path, draw: Callable[[], Path]) -> Path:
    """``draw()``, a figure of a run's ``metrics.jsonl``, or the one line that says why the
    file cannot give it (missing, not UTF-8, a line that is not JSON, nothing to draw)."""
    from synattn_shared.cli import cli_path_problem
    from synattn_shared.textfile import undecodable

    if (problem := cli_path_problem(metrics)) is not None:
        raise fail(f"{metrics}: {problem} (a run directory's log of `synattn train`)")
    try:
        return draw()
    except UnicodeDecodeError:
        raise fail(one_line(undecodable(metrics))) from None
    except json.JSONDecodeError as exc:
        raise fail(f"{metrics}:{exc.lineno}: not a line of JSON ({exc.msg})") from None
    except (FileNotFoundError, ValueError) as exc:
        raise fail(str(exc)) from None


def plot_labels(
    run: Annotated[Path, typer.Argument(readable=False, help="run directory (metrics.jsonl)")],
    out: Annotated[
        Path | None, typer.Option(help="PNG (default: RUN/plots/rhe-labels.png)")
    ] = None,
) -> None:
    """RHE head-label history over training."""
    from synattn_trainer.plots import label_history

    metrics = run / "metrics.jsonl"
    path = _from_metrics(
        metrics, lambda: label_history(metrics, out or run / "plots" / "rhe-labels.png")
    )
    console.print(str(path))


def plot_attention(
    checkpoint: Annotated[Path, typer.Option(readable=False, help="checkpoint or averaged.pt")],
    data: Annotated[Path, typer.Option(readable=False, help="parsed shard directory")],
    out: Annotated[Path, typer.Option(help="PNG to write")],
    row: Annotated[int, typer.Option(min=0)] = 0,
    kind: Annotated[str, typer.Option(help="enc_self | dec_self | enc_dec")] = "enc_self",
    layer: Annotated[int, typer.Option(min=0)] = 0,
) -> None:
    """Attention heatmaps (one per head) of one sentence, teacher-forced on its target."""
    from synattn_trainer.inference import attention_of

    try:
        path = attention_of(checkpoint, data, row, kind, layer, out)
    except (FileNotFoundError, ValueError, IndexError) as exc:
        raise fail(str(exc)) from None
    console.print(str(path))


def attention(
    checkpoint: Annotated[Path, typer.Option(readable=False, help="checkpoint or averaged.pt")],
    data: Annotated[Path, typer.Option(readable=False, help="parsed shard directory")],
    out: Annotated[Path, typer.Option(help=".npz to write")],
    row: Annotated[int, typer.Option(min=0)] = 0,
) -> None:
    """The attention probabilities the model applied to one sentence (eval mode, teacher
    forced): one array per module, ``enc_self.0``, ``dec_self.0``, ``enc_dec.0``, ... of shape
    (heads, queries, keys) over subword positions."""
    from synattn_trainer.inference import attention_npz

    try:
        path = attention_npz(checkpoint, data, row, out)
    except (FileNotFoundError, ValueError, IndexError) as exc:
        raise fail(str(exc)) from None
    console.print(str(path))


def analyze(
    target: Annotated[
        Path | None,
        typer.Argument(readable=False, help="a checkpoint or averaged.pt, or a run folder"),
    ] = None,
    dev: Annotated[
        Path, typer.Option(readable=False, help="parsed dev split (importance, confidence)")
    ] = Path("-"),
    out: Annotated[Path, typer.Option(help="directory for the JSON files and PNGs")] = Path("-"),
    test: Annotated[
        Path | None, typer.Option(readable=False, help="parsed test split: masking curves")
    ] = None,
    test_limit: Annotated[int | None, typer.Option(min=1)] = None,
    groups: Annotated[int, typer.Option(min=2)] = 8,
    normalize: Annotated[bool, typer.Option(help="rank by layer-normalised importance")] = False,
    ablate: Annotated[
        list[int], typer.Option(help="fixed-pattern head to switch off for this run (repeat)")
    ] = [],  # noqa: B006
    rhe_labels: Annotated[
        bool, typer.Option(help="RHE's labels under both readings, at each checkpoint of the "
                           "run folder (or at the checkpoint), on --dev: rhe_labels.json")
    ] = False,
    every: Annotated[
        int, typer.Option(min=1, help="with --rhe-labels: checkpoints at multiples of this")
    ] = 1,
    masks: Annotated[
        bool, typer.Option(help="a HeadMask run's recorded masks per window, and its model with "
                           "the often-masked heads off: headmask_diagnosis.json")
    ] = False,
    window: Annotated[int, typer.Option(min=1, help="with --masks: updates per window")] = 500,
    tree_depth: Annotated[
        bool, typer.Option(help="constituency depth of --dev (and --test) beside the RHE "
                           "paper's, and the k its rule gives: tree_depth.json")
    ] = False,
) -> None:  # fmt: skip
    """Head importance, confidence, masking curves and figures of a trained model; with
    --rhe-labels, --masks or --tree-depth, those analyses of a run instead."""
    from synattn_trainer.checkpoint import checkpoint_file_error

    if str(dev) == "-" or str(out) == "-":
        raise fail("--dev and --out are needed: the split to analyse on, and where results go")
    if rhe_labels or masks or tree_depth:
        _run_analyses(target, dev, out, test, rhe_labels, every, masks, window, tree_depth)
        return
    if target is None:
        raise fail("give a checkpoint or a run folder to analyse")
    checkpoint = _final_model(target) if target.is_dir() else target
    if (bad := checkpoint_file_error(checkpoint)) is not None:
        raise fail(one_line(bad))
    from synattn_trainer.analysis import analyze as run

    try:
        result = run(checkpoint, dev, out, test, test_limit, groups, normalize, ablate)
    except (FileNotFoundError, ValueError) as exc:
        raise fail(str(exc)) from None
    console.print(
        f"{out}: {len(result['heads'])} heads; importance mean {result['importance_mean']:.4g}, "
        f"variance {result['importance_variance']:.4g}"
    )


def _final_model(run: Path) -> Path:
    """A run folder's final model: averaged.pt, else best.pt, else its newest checkpoint."""
    from synattn_trainer import checkpoint as ck

    for name in ("averaged.pt", "best.pt"):
        if (run / name).is_file():
            return run / name
    return ck.latest(run / "checkpoints") or run / "averaged.pt"


def _run_analyses(
    target: Path | None, dev: Path, out: Path, test: Path | None, rhe_labels: bool,
    every: int, masks: bool, window: int, tree_depth: bool,
) -> None:  # fmt: skip
    """``--rhe-labels``, ``--masks``, ``--tree-depth``: each prints its table and writes its
    JSON record into ``out``."""
    import json

    from synattn_shared.atomic import atomic_write_text
    from synattn_shared.errors import BadFile

    jobs: list[tuple[str, Any]] = []
    if (rhe_labels or masks) and target is None:
        raise fail("--rhe-labels and --masks read a run: give its folder (or a checkpoint)")
    run = target if target is not None else Path(".")
    if rhe_labels:
        from synattn_trainer.rhe_labels import label_report

        jobs.append(("rhe_labels", lambda: label_report(run, dev, every)))
    if masks:
        from synattn_trainer.headmask_diagnosis import diagnose

        run_dir = run if run.is_dir() else _run_of(run)
        jobs.append(("headmask_diagnosis", lambda: diagnose(run_dir, dev, window)))
    if tree_depth:
        from synattn_shared.tree_depth import depth_report

        splits = {"dev": dev, **({"test": test} if test is not None else {})}
        jobs.append(("tree_depth", lambda: depth_report(splits)))
    out.mkdir(parents=True, exist_ok=True)
    for name, job in jobs:
        try:
            record, lines = job()
        except (BadFile, FileNotFoundError, ValueError) as exc:
            raise fail(one_line(exc)) from None
        for line in lines:
            console.print(line, markup=False, highlight=False)
        path = out / f"{name}.json"
        atomic_write_text(path, json.dumps(record, indent=1) + "\n")
        console.print(f"{path}", markup=False, highlight=False)


def _run_of(checkpoint: Path) -> Path:
    """The run folder a checkpoint belongs to (``RUN/checkpoints/ckpt-*.pt``, ``RUN/*.pt``)."""
    parent = checkpoint.parent
    return parent.parent if parent.name == "checkpoints" else parent


def register(app: typer.Typer) -> None:
    """Add the trainer's commands to the ``synattn`` CLI (entry point ``synattn.cli``)."""
    tok_app = typer.Typer(help="Subword vocabulary.", no_args_is_help=True)
    tok_app.command("train")(tokenizer_train)
    app.add_typer(tok_app, name="tokenizer")
    app.command("train")(train)
    app.command("translate")(translate)
    app.command("evaluate")(evaluate)
    app.command("score")(score)
    app.command("analyze")(analyze)
    app.command("attention")(attention)
    plot_app = typer.Typer(help="Analysis figures (PNG).", no_args_is_help=True)
    plot_app.command("gates")(plot_gates)
    plot_app.command("labels")(plot_labels)
    plot_app.command("attention")(plot_attention)
    app.add_typer(plot_app, name="plot")
    from synattn_trainer.variants_cli import register as register_variants

    register_variants(app)  # synattn variants list | check
