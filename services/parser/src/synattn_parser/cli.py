"""``synattn parse`` (batch parsing into shards) and ``synattn serve-parser`` (the REST API)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from synattn_parser.backends import BACKEND_NAMES, BackendUnavailable
from synattn_parser.settings import ParserSettings
from synattn_shared.cli import console, err, fail
from synattn_shared.errors import SyntaxInputError, one_line
from synattn_shared.manifest import ShardInfo


def parse(
    src: Annotated[Path, typer.Option(help="source sentences, one per line (.gz allowed)")],
    out: Annotated[Path, typer.Option(help="dataset directory to write")],
    tgt: Annotated[
        Path | None, typer.Option(help="target side, stored per row (.gz allowed)")
    ] = None,
    backend: Annotated[str, typer.Option(help=f"one of {', '.join(BACKEND_NAMES)}")] = "spacy",
    workers: Annotated[int, typer.Option(min=1, help="parser processes")] = 1,
    rows_per_shard: Annotated[int, typer.Option(min=1)] = 10_000,
    pretokenized: Annotated[
        bool, typer.Option(help="lines are space-separated tokens; keep them as they are")
    ] = False,
    limit: Annotated[int | None, typer.Option(min=1, help="parse only the first N lines")] = None,
    spacy_model: Annotated[
        str | None, typer.Option(help="spaCy model (default: settings)")
    ] = None,
    scheme: Annotated[
        str, typer.Option(help="derived constituency: flat|two_level|binary")
    ] = "flat",
    overwrite: Annotated[bool, typer.Option(help="replace a dataset of other input")] = False,
) -> None:
    """Parse a corpus into Parquet shards with every syntax feature (resumable)."""
    from tqdm import tqdm

    from synattn_parser.batch import parse_corpus

    for path in (src, tgt):
        if path is not None and not path.is_file():
            raise fail(f"{path}: no such file")
    if backend not in BACKEND_NAMES:
        raise fail(f"unknown backend {backend!r}; choose one of {', '.join(BACKEND_NAMES)}")
    overrides: dict[str, object] = {"derived_scheme": scheme}
    if spacy_model:
        overrides["spacy_model"] = spacy_model
    try:
        settings = ParserSettings(**overrides)  # type: ignore[arg-type]
    except ValueError as exc:
        raise fail(one_line(exc)) from None
    counts = {"written": 0, "kept": 0}
    bar = tqdm(total=None, unit="sent", desc=f"parse {src.name}", disable=None)

    def progress(shard: ShardInfo, skipped: bool) -> None:
        counts["kept" if skipped else "written"] += 1
        bar.update(shard.rows)

    try:
        manifest = parse_corpus(
            src,
            out,
            tgt=tgt,
            backend=backend,
            settings=settings,
            workers=workers,
            rows_per_shard=rows_per_shard,
            pretokenized=pretokenized,
            overwrite=overwrite,
            limit=limit,
            on_shard=progress,
        )
    except (SyntaxInputError, FileExistsError, BackendUnavailable, RuntimeError) as exc:
        bar.close()
        raise fail(str(exc)) from None
    bar.close()
    console.print(
        f"{out}: {manifest.rows} sentences ({manifest.syntax_rows} with syntax) in "
        f"{len(manifest.shards)} shards; {counts['written']} written, {counts['kept']} kept "
        f"from an earlier run; parser {manifest.parser.backend} {manifest.parser.model}"
    )


def serve_parser(
    host: Annotated[str, typer.Option()] = "127.0.0.1",
    port: Annotated[int, typer.Option()] = 8001,
    log_level: Annotated[str, typer.Option()] = "info",
    access_log: Annotated[bool, typer.Option(help="log every request")] = True,
) -> None:
    """Run the parser REST API (settings from PARSER_* environment variables)."""
    from synattn_parser.settings import get_settings
    from synattn_shared.serve import serve

    s = get_settings()
    err.print(f"parser API on http://{host}:{port}/docs")
    serve(
        "synattn_parser.api:create_app",
        host=host,
        port=port,
        header_timeout=s.header_timeout_s,
        body_timeout=s.body_timeout_s,
        log_level=log_level,
        access_log=access_log,
        timeout_graceful_shutdown=10,
    )


def register(app: typer.Typer) -> None:
    """Add the parser's commands to the ``synattn`` CLI (entry point ``synattn.cli``)."""
    app.command("parse")(parse)
    app.command("serve-parser")(serve_parser)
