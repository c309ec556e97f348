"""The ``synattn`` command line. Services add subcommands through the ``synattn.cli`` entry points.

Bad input exits with status 2 and a one-line reason on stderr; nothing half-written remains.
An error no command turned into its line still prints one (a file that cannot be read: status
2; anything else: status 1); ``synattn --debug COMMAND`` (or ``SYNATTN_DEBUG=1``) shows its
Python traceback instead.
"""

from __future__ import annotations

import itertools
from enum import StrEnum
from importlib.metadata import entry_points
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from typer.core import TyperGroup

from synattn_shared import __version__
from synattn_shared.defaults import RP_CLIP, SLR_TAU
from synattn_shared.errors import BadFile, SyntaxInputError, not_text, one_line, os_problem
from synattn_shared.features import FeatureOptions
from synattn_shared.manifest import Manifest, ParserInfo, SourceInfo, sha256_file
from synattn_shared.materialise import ALL_FEATURES, MaterialiseOptions, materialise
from synattn_shared.pipeline import build_dataset
from synattn_shared.readers import read_conllu, read_ptb
from synattn_shared.render import render_matrix
from synattn_shared.shards import ShardDataset

DEBUG_ENV = "SYNATTN_DEBUG"


def _debugging(ctx: Any) -> bool:
    import os

    flag = bool(ctx.params.get("debug"))
    return flag or os.environ.get(DEBUG_ENV, "").strip().lower() in ("1", "true", "yes", "on")


def error_line(exc: BaseException) -> tuple[str, int]:
    """The one line (and exit status) of an error no command caught: a file that cannot be
    read (``BadFile``, ``OSError``, text that does not decode) is bad input, status 2, named;
    anything else is unexpected, status 1, with where to find its traceback."""
    if isinstance(exc, BadFile | SyntaxInputError):
        return one_line(exc), 2
    if isinstance(exc, OSError) and exc.filename is not None:
        return f"{exc.filename}: {os_problem(exc)}", 2
    if isinstance(exc, UnicodeDecodeError):
        return f"the input is {not_text(exc, exc.encoding, line=False)}", 2
    said = one_line(exc) or "(no message)"
    return (
        f"{type(exc).__name__}: {said} (unexpected: `synattn --debug ...` or {DEBUG_ENV}=1 "
        "shows the Python traceback)",
        1,
    )


class _OneLineGroup(TyperGroup):
    """The root command: an error a command did not catch is one ``error:`` line, not a
    traceback (``--debug``: the traceback)."""

    def invoke(self, ctx: Any) -> Any:  # typer's own click Context
        try:
            return super().invoke(ctx)
        except (typer.Exit, typer.Abort, typer.exceptions.TyperException):
            raise
        except Exception as exc:
            if _debugging(ctx):
                raise
            line, code = error_line(exc)
            raise fail(line, code) from None


app = typer.Typer(
    name="synattn",
    help="Syntax-aware attention for NMT: parse, store, train, compare.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    cls=_OneLineGroup,
)
console = Console(soft_wrap=True)
err = Console(stderr=True, soft_wrap=True)


@app.callback()
def _root(
    debug: Annotated[
        bool,
        typer.Option(
            "--debug",
            help=f"show the Python traceback of an error instead of its one line (also "
            f"{DEBUG_ENV}=1)",
        ),
    ] = False,
) -> None:
    """Syntax-aware attention for NMT: parse, store, train, compare."""


PTB_SUFFIXES = {".mrg", ".tree", ".trees", ".ptb", ".bracketed"}
CONLLU_SUFFIXES = {".conllu", ".conll"}


class SchemeChoice(StrEnum):
    flat = "flat"
    two_level = "two_level"
    binary = "binary"


def cli_path_problem(path: Path, kind: str = "file") -> str | None:
    """Why a file (or folder) named on the command line cannot be read, or None: ``no such
    file`` (``no such folder``) when it does not exist, else ``errors.path_problem``'s words."""
    from synattn_shared.errors import path_problem

    problem = path_problem(path, kind)
    if problem is not None and problem.startswith("does not exist"):
        return "no such folder" if kind == "directory" else "no such file"
    return problem


def fail(reason: str, code: int = 2) -> typer.Exit:
    """Print a one-line reason and return the exit to raise (status 2)."""
    from rich.markup import escape

    # the reason is text, not markup: a path or a key like "[0]" prints as it is
    err.print(f"[bold red]error:[/] {escape(reason)}", highlight=False, soft_wrap=True)
    return typer.Exit(code=code)


@app.command()
def features(
    trees: Annotated[
        Path, typer.Option(readable=False, help="PTB bracketed trees (.mrg) or CoNLL-U (.conllu)")
    ],
    out: Annotated[Path, typer.Option(help="dataset directory to write")],
    scheme: Annotated[
        SchemeChoice, typer.Option(help="derived constituency scheme for dependency input")
    ] = SchemeChoice.flat,
    rows_per_shard: Annotated[int, typer.Option(min=1)] = 10_000,
    dataset: Annotated[str | None, typer.Option(help="dataset name (default: file stem)")] = None,
    overwrite: Annotated[
        bool, typer.Option(help="replace a dataset made from other input")
    ] = False,
) -> None:
    """Write shards with every feature for parses you already have."""
    if (problem := cli_path_problem(trees)) is not None:
        raise fail(f"{trees}: {problem}")
    suffix = trees.suffix.lower()
    try:
        if suffix in PTB_SUFFIXES:
            records, constituency = read_ptb(trees), "given"
        elif suffix in CONLLU_SUFFIXES:
            records, constituency = read_conllu(trees), f"derived:{scheme.value}"
        else:
            raise fail(f"{trees}: unknown format {suffix!r}; use .mrg (PTB) or .conllu (CoNLL-U)")
        first = next(records, None)  # the file is read and its first sentence checked now
    except (BadFile, SyntaxInputError) as exc:
        raise fail(one_line(exc)) from None
    if first is None:
        kind = "trees" if suffix in PTB_SUFFIXES else "sentences"
        raise fail(f"{trees}: no {kind}; nothing to write")
    records = itertools.chain([first], records)
    options = FeatureOptions(derived_scheme=scheme.value)
    manifest = Manifest(
        dataset=dataset or trees.stem,
        source=SourceInfo(path=str(trees), sha256=sha256_file(trees)),
        parser=ParserInfo(backend="given", model=trees.name, constituency=constituency),
        features=options.model_dump(),
        rows_per_shard=rows_per_shard,
    )
    written = skipped = 0

    def progress(index: int, rows: int, was_done: bool) -> None:
        nonlocal written, skipped
        if was_done:
            skipped += 1
        else:
            written += 1
        err.print(f"shard {index}: {rows} rows {'(already done)' if was_done else 'written'}")

    try:
        result = build_dataset(records, out, manifest, options, overwrite, on_shard=progress)
    except (SyntaxInputError, BadFile, FileExistsError, RuntimeError) as exc:
        raise fail(str(exc)) from None
    console.print(
        f"{out}: {result.rows} sentences ({result.syntax_rows} with syntax) in "
        f"{len(result.shards)} shards; {written} written, {skipped} kept from an earlier run"
    )


@app.command()
def inspect(
    directory: Annotated[Path, typer.Argument(readable=False, help="dataset directory")],
    row: Annotated[int, typer.Option(help="row to show")] = 0,
    tau: Annotated[float, typer.Option(help="soft SLR temperature")] = SLR_TAU,
    k: Annotated[int, typer.Option(help="RP clip distance")] = RP_CLIP,
    slr_binarize: Annotated[str, typer.Option(help="right | none")] = "right",
) -> None:
    """Print the manifest and one sentence with its matrices rendered as text."""
    try:
        ds = ShardDataset(directory)
        ds.check_files()  # a missing or truncated shard, named before it is read
        sample = ds[row]
        opts = MaterialiseOptions(tau=tau, rp_clip=k, slr_binarize=slr_binarize)
        mats = materialise(sample, ALL_FEATURES, opts)
    except (FileNotFoundError, ValueError, IndexError) as exc:
        raise fail(str(exc)) from None
    m = ds.manifest
    console.rule(f"[bold]{m.dataset}[/] ({directory})")
    console.print(
        f"schema v{m.schema_version}  rows {m.rows}  with syntax {m.syntax_rows}  "
        f"shards {len(m.shards)}  complete {m.complete}  created {m.created}"
    )
    console.print(f"source {m.source.path}  sha256 {m.source.sha256[:16]}...")
    console.print(
        f"parser {m.parser.backend} model={m.parser.model} version={m.parser.version} "
        f"constituency={m.parser.constituency}"
    )
    console.print(f"features {m.features}")
    for s in m.shards:
        console.print(
            f"  {s.file}: rows {s.first_row}..{s.first_row + s.rows - 1}  "
            f"{s.bytes} B  sha256 {s.sha256[:16]}..."
        )
    words = sample["words"]
    console.rule(f"row {row}  sent_id {sample['sent_id']}  line {sample['line']}")
    console.print(" ".join(words), highlight=False)
    console.print(f"has_syntax {sample['has_syntax']}  dep_head {sample['dep_head']}")
    console.print(f"syn_dist (flat) {sample['syn_dist']}  const_layer {sample['const_layer']}")
    if sample["tree"]:
        console.print(f"tree {sample['tree']}", highlight=False)
    shown = [
        ("SLR hard (keep)", "slr_hard", 0, None),
        (f"SLR soft m (tau={tau})", "slr_soft", 2, None),
        ("dependency hops", "dep_hops", 0, "-"),
        ("DEA keep-mask", "dea_mask", 0, None),
        ("RP (key layer - query layer; oo = outside local phrase)", "rp", 0, "oo"),
        (f"RP index (clip k={k})", "rp_index", 0, None),
    ]
    for title, key, decimals, sentinel in shown:
        mat = mats.get(key)
        console.print(f"\n[bold]{title}[/]")
        if mat is None:
            console.print("  n/a (no dependency parse)")
        else:
            console.print(render_matrix(mat, words, decimals, sentinel), highlight=False)


@app.command()
def version() -> None:
    """Print the synattn version."""
    console.print(__version__)


def _load_plugins() -> None:
    for ep in entry_points(group="synattn.cli"):
        ep.load()(app)


def main() -> None:
    """Entry point of the ``synattn`` script."""
    _load_plugins()
    app()


if __name__ == "__main__":
    main()
