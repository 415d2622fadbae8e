"""Entry point of the `barge` console script.

Each sub-command is a thin shell over a lower layer; this module only parses arguments and prints.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Annotated

import typer

from barge import __version__
from barge.api.crd import all_crds, render
from barge.emulator.profile import load_profile
from barge.emulator.server import serve

app = typer.Typer(
    no_args_is_help=True,
    add_completion=False,
    help="Barge: LLM work nobody is waiting for, off the request path.",
)


@app.command()
def version() -> None:
    """Print Barge's version."""
    typer.echo(__version__)


@app.command()
def crds(
    out: Annotated[Path, typer.Option("--out", "-o", help="Directory to write the CRDs to.")] = Path("crds"),
    check: Annotated[bool, typer.Option("--check", help="Fail if the files on disk differ; write nothing.")] = False,
) -> None:
    """Generate crds/*.yaml from the typed models in barge.api."""
    stale = []
    for name, crd in all_crds().items():
        text = render(crd)
        path = out / name
        if check:
            if not path.exists() or path.read_text() != text:
                stale.append(str(path))
            continue
        out.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        typer.echo(f"wrote {path}")
    if stale:
        typer.echo(f"stale CRDs (run `make crds`): {', '.join(stale)}", err=True)
        raise typer.Exit(1)


@app.command()
def emulator(
    host: Annotated[str, typer.Option(help="Address to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to listen on (0 picks a free one).")] = 8099,
    profile: Annotated[Path | None, typer.Option(help="YAML pacing and fault profile.")] = None,
    state: Annotated[Path | None, typer.Option(help="Keep batches and files in this file across restarts.")] = None,
) -> None:
    """Run the local provider emulator (Anthropic, OpenAI and Azure OpenAI batch + sync APIs).

    Base URLs: Anthropic SDK http://HOST:PORT, OpenAI SDK http://HOST:PORT/v1, AzureOpenAI azure_endpoint
    http://HOST:PORT. Any API key works except the literal `invalid`.
    """
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    try:
        parsed = load_profile(profile)
    except (OSError, ValueError) as exc:
        typer.echo(f"bad profile {profile}: {exc}", err=True)
        raise typer.Exit(2) from exc
    asyncio.run(serve(host, port, parsed, state))
