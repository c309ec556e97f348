"""``synattn parse`` (batch parsing into shards) and ``synattn serve-parser`` (the REST API)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from synattn_parser.backends import BACKEND_NAMES, BackendUnavailable
from synattn_parser.settings import ParserSettings
from synattn_shared.cli import console, err, fail
from synattn_shared.errors import BadFile, SyntaxInputError, one_line
from synattn_shared.manifest import ShardInfo


def parse(
    src: Annotated[
        Path, typer.Option(readable=False, help="source sentences, one per line (.gz allowed)")
    ],
    out: Annotated[Path, typer.Option(help="dataset directory to write")],
    tgt: Annotated[
        Path | None, typer.Option(readable=False, help="target side, stored per row (.gz allowed)")
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
    encoding: Annotated[
        str,
        typer.Option(
            help="text encoding of --src and --tgt (a Python codec name: latin-1, cp1252, ...)"
        ),
    ] = "utf-8",
) -> None:
    """Parse a corpus into Parquet shards with every syntax feature (resumable). Progress on
    stderr: a bar on a terminal, else a line per shard. A corpus that is not UTF-8 is refused
    with the number of its first line that is not, unless --encoding names its encoding."""
    from synattn_parser.batch import parse_corpus
    from synattn_shared.cli import cli_path_problem
    from synattn_shared.progress import Progress
    from synattn_shared.textfile import check_encoding

    for path in (src, tgt):
        if path is not None and (problem := cli_path_problem(path)) is not None:
            raise fail(f"{path}: {problem}")
    try:
        encoding = check_encoding(encoding)
    except ValueError as exc:
        raise fail(f"--encoding: {exc}") from None
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
    try:  # every line decoded before a parser loads: a file that is not text is said now
        total = _sentences(src, limit, encoding)
    except ValueError as exc:
        raise fail(one_line(exc)) from None
    bar = Progress(f"parse {src.name}", total, "sentences", rate_unit="sent", every=0)

    def started(n: int) -> None:  # the input is checked: say what comes while a model loads
        if bar.lines:
            bar.say(f"parse {src.name}: {n:,} sentences in {-(-n // rows_per_shard):,} "
                    f"shard(s), {workers} worker(s); loading the {backend} parser")  # fmt: skip

    def progress(shard: ShardInfo, skipped: bool) -> None:
        counts["kept" if skipped else "written"] += 1
        note = f"{counts['written']} shard(s) written" + (
            f", {counts['kept']} kept from an earlier run" if counts["kept"] else ""
        )
        bar.advance(shard.rows, note=note, timed=not skipped)

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
            encoding=encoding,
            on_start=started,
        )
    except (SyntaxInputError, BadFile, FileExistsError, BackendUnavailable, RuntimeError) as exc:
        bar.close(finished=False)
        raise fail(str(exc)) from None
    bar.close()
    console.print(
        f"{out}: {manifest.rows} sentences ({manifest.syntax_rows} with syntax) in "
        f"{len(manifest.shards)} shards; {counts['written']} written, {counts['kept']} kept "
        f"from an earlier run; parser {manifest.parser.backend} {manifest.parser.model}"
    )


def _sentences(src: Path, limit: int | None, encoding: str = "utf-8") -> int:
    """The lines ``parse`` will read; ``BadFile`` when the file cannot be read or is not text
    in ``encoding`` (with its first bad line)."""
    from synattn_parser.batch import count_lines

    n = count_lines(src, encoding)
    return n if limit is None else min(n, limit)


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
