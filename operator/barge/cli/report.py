"""`barge report`: spend by tenant and model from the ledger (a rich table, or CSV), and `barge report focus`, the
FinOps FOCUS 1.2 export. A thin face over barge.reports; times are UTC (a date means its midnight)."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated

import typer

report_app = typer.Typer(invoke_without_command=True, help="Cost reports from the ledger (FOCUS exports, tables).")

LedgerOption = Annotated[
    str, typer.Option(help="Ledger: a SQLite path or postgresql:// URL.", envvar="BARGE_LEDGER_URL")
]
FromOption = Annotated[
    str | None, typer.Option("--from", help="Start (UTC), ISO date or time; default: the 1st of this month.")
]
ToOption = Annotated[str | None, typer.Option("--to", help="End, exclusive (UTC), ISO date or time; default: now.")]
TenantOption = Annotated[str | None, typer.Option(help="Only this tenant's rows.")]
PricesOption = Annotated[
    Path | None,
    typer.Option(help="Price table (YAML; default BARGE_PRICES or the shipped one).", envvar="BARGE_PRICES"),
]


def parse_time(text: str) -> float:
    """An ISO date (its UTC midnight) or date-time (UTC when it names no zone), as Unix seconds."""
    try:
        value = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise typer.BadParameter(f"{text!r} is not an ISO date or date-time") from None
    return (value if value.tzinfo else value.replace(tzinfo=UTC)).timestamp()


def window(start: str | None, end: str | None) -> tuple[float, float]:
    now = time.time()
    first = datetime.fromtimestamp(now, UTC).replace(day=1, hour=0, minute=0, second=0, microsecond=0).timestamp()
    lo, hi = (parse_time(start) if start else first), (parse_time(end) if end else now)
    if hi <= lo:
        raise typer.BadParameter(f"--to ({end}) must be after --from ({start})")
    return lo, hi


@report_app.callback()
def report(
    ctx: typer.Context,
    start: FromOption = None,
    end: ToOption = None,
    tenant: TenantOption = None,
    ledger: LedgerOption = ".barge/ledger.db",
    prices_file: PricesOption = None,
    output_format: Annotated[str, typer.Option("--format", help="table (rich) or csv.")] = "table",
) -> None:
    """Spend by tenant and model between --from and --to: tokens, list cost, billed cost and the batch saving."""
    if ctx.invoked_subcommand is not None:
        return
    from barge.batch import prices
    from barge.ledger import Ledger, spend
    from barge.reports import summary

    if output_format not in ("table", "csv"):
        raise typer.BadParameter("--format must be table or csv")
    lo, hi = window(start, end)
    book = Ledger(ledger)
    try:
        lines = summary.by_tenant_model(spend.rows_between(book, lo, hi, tenant), prices.load(prices_file))
    finally:
        book.close()
    if output_format == "csv":
        typer.echo(summary.to_csv(lines), nl=False)
        return
    from rich.console import Console
    from rich.table import Table

    span = f"{datetime.fromtimestamp(lo, UTC):%Y-%m-%d %H:%M} to {datetime.fromtimestamp(hi, UTC):%Y-%m-%d %H:%M}"
    table = Table(title=f"Spend {span} UTC")
    for n, name in enumerate(summary.HEADER):
        table.add_column(name, justify="left" if n < 2 else "right")
    for line in lines:
        table.add_row(*line.cells())
    Console().print(table)


@report_app.command("focus")
def report_focus(
    out: Annotated[str, typer.Option("--out", help="Where to write the file: a path, file://, s3:// or az:// URL.")],
    start: FromOption = None,
    end: ToOption = None,
    tenant: TenantOption = None,
    ledger: LedgerOption = ".barge/ledger.db",
    prices_file: PricesOption = None,
    period: Annotated[str, typer.Option(help="Charge period of a row: hour or day.")] = "hour",
    billing_account: Annotated[str, typer.Option(help="BillingAccountId/Name of every row.")] = "barge",
    file_format: Annotated[
        str | None,
        typer.Option(
            "--format",
            help="csv or parquet (typed columns). Default: parquet when --out ends in .parquet, else csv.",
        ),
    ] = None,
) -> None:
    """Write FinOps FOCUS 1.2 cost and usage rows (CSV or Parquet) for --from to --to."""
    from barge.batch import prices
    from barge.ledger import Ledger
    from barge.reports import export, focus
    from barge.storage import StoragePolicy

    if period not in ("hour", "day"):
        raise typer.BadParameter("--period must be hour or day")
    chosen = file_format or ("parquet" if out.lower().endswith(".parquet") else "csv")
    if chosen not in ("csv", "parquet"):
        raise typer.BadParameter("--format must be csv or parquet")
    lo, hi = window(start, end)
    book = Ledger(ledger)
    try:
        rows = export.focus_rows(
            book, prices.load(prices_file), lo, hi, tenant=tenant, period=period, billing_account=billing_account
        )
    finally:
        book.close()
    write = export.write_parquet if chosen == "parquet" else export.write_csv
    written = write(out, rows, StoragePolicy(base_dir=Path.cwd()))
    typer.echo(f"wrote {written} FOCUS {focus.FOCUS_VERSION} rows ({chosen}) to {out}")


@report_app.command("reconcile")
def report_reconcile(
    start: FromOption = None,
    end: ToOption = None,
    provider: Annotated[
        list[str] | None,
        typer.Option(
            help="openai, anthropic, azure-openai, mistral or gemini (repeatable); default: each with an admin key "
            "(mistral, gemini: reported not available)."
        ),
    ] = None,
    openai_admin_key: Annotated[
        str | None, typer.Option(help="OpenAI admin key (organization usage and costs).", envvar="OPENAI_ADMIN_KEY")
    ] = None,
    anthropic_admin_key: Annotated[
        str | None, typer.Option(help="Anthropic admin key (usage and cost report).", envvar="ANTHROPIC_ADMIN_KEY")
    ] = None,
    openai_base_url: Annotated[str | None, typer.Option(envvar="OPENAI_BASE_URL")] = None,
    anthropic_base_url: Annotated[str | None, typer.Option(envvar="ANTHROPIC_BASE_URL")] = None,
    azure_client_secret: Annotated[
        str | None,
        typer.Option(
            help="Azure: the service principal's secret (Cost Management Reader).", envvar="AZURE_CLIENT_SECRET"
        ),
    ] = None,
    azure_tenant_id: Annotated[str | None, typer.Option(envvar="AZURE_TENANT_ID")] = None,
    azure_client_id: Annotated[str | None, typer.Option(envvar="AZURE_CLIENT_ID")] = None,
    azure_scope: Annotated[
        str | None,
        typer.Option(
            help="Cost Management scope: /subscriptions/<id>, or /subscriptions/<id>/resourceGroups/<name>.",
            envvar="AZURE_COST_SCOPE",
        ),
    ] = None,
    azure_management_url: Annotated[str, typer.Option(envvar="AZURE_MANAGEMENT_URL")] = "https://management.azure.com",
    azure_login_url: Annotated[str, typer.Option(envvar="AZURE_LOGIN_URL")] = "https://login.microsoftonline.com",
    threshold: Annotated[float, typer.Option(help="USD per day above which a line is a mismatch.")] = 0.01,
    ledger: LedgerOption = ".barge/ledger.db",
    prices_file: PricesOption = None,
    output_format: Annotated[str, typer.Option("--format", help="table (rich) or csv.")] = "table",
) -> None:
    """Barge's ledger against the provider's own cost report, per provider and UTC day: Barge's cost, the
    provider's, the difference. Exit code 1 when a day differs by more than --threshold. A provider whose bill
    cannot be read per day (mistral, gemini) is named on stderr as `not available for <provider>: <reason>`."""
    from decimal import Decimal

    from barge.batch import prices
    from barge.ledger import Ledger, spend
    from barge.providers import azure_costs, usage_reports
    from barge.reports import reconcile

    if output_format not in ("table", "csv"):
        raise typer.BadParameter("--format must be table or csv")
    keys = {
        "openai": (openai_admin_key, openai_base_url),
        "anthropic": (anthropic_admin_key, anthropic_base_url),
        "azure-openai": (azure_client_secret, azure_management_url),
    }
    # AZURE_CLIENT_SECRET alone is also azure-identity's (storage): Azure is compared by default with a scope only
    chosen = provider or [p for p, (key, _) in keys.items() if key and (p != "azure-openai" or azure_scope)]
    for p in chosen:
        if p in usage_reports.NOT_AVAILABLE:
            continue
        if p not in keys:
            raise typer.BadParameter(f"--provider {p!r}: openai, anthropic, azure-openai, mistral or gemini")
        if not keys[p][0]:
            flag = (
                "--azure-client-secret or AZURE_CLIENT_SECRET"
                if p == "azure-openai"
                else f"--{p}-admin-key or {p.upper()}_ADMIN_KEY"
            )
            raise typer.BadParameter(f"no admin key for {p} ({flag})")
    if not chosen:
        raise typer.BadParameter(
            "no admin key given (OPENAI_ADMIN_KEY, ANTHROPIC_ADMIN_KEY, AZURE_CLIENT_SECRET): nothing to compare"
        )
    azure = None
    if "azure-openai" in chosen:
        if not (azure_tenant_id and azure_client_id and azure_scope):
            raise typer.BadParameter("azure-openai needs AZURE_TENANT_ID, AZURE_CLIENT_ID and AZURE_COST_SCOPE")
        azure = azure_costs.AzureScope(
            azure_tenant_id, azure_client_id, azure_scope, azure_management_url, azure_login_url
        )
    lo, hi = window(start, end)
    reported = []
    for p in chosen:
        if p in usage_reports.NOT_AVAILABLE:
            typer.echo(f"not available for {p}: {usage_reports.NOT_AVAILABLE[p]}", err=True)
            continue
        key, url = keys[p]
        assert key is not None
        try:
            reported += usage_reports.fetch_days(p, key, url, lo, hi, azure=azure)
        except azure_costs.AzureCostError as exc:
            typer.echo(f"could not read {p}'s bill: {exc}", err=True)
            raise typer.Exit(2) from None
    compared = [p for p in chosen if p not in usage_reports.NOT_AVAILABLE]
    book = Ledger(ledger)
    try:
        lines = reconcile.compare(spend.rows_between(book, lo, hi), prices.load(prices_file), reported, compared)
    finally:
        book.close()
    limit = Decimal(str(threshold))
    if output_format == "csv":
        typer.echo(reconcile.to_csv(lines), nl=False)
    else:
        from rich.console import Console
        from rich.table import Table

        span = f"{datetime.fromtimestamp(lo, UTC):%Y-%m-%d %H:%M} to {datetime.fromtimestamp(hi, UTC):%Y-%m-%d %H:%M}"
        table = Table(title=f"Reconciliation {span} UTC (threshold ${threshold})")
        for n, name in enumerate(reconcile.HEADER):
            table.add_column(name, justify="left" if n < 2 else "right")
        for line in lines:
            table.add_row(*line.cells(), style="bold red" if line.mismatched(limit) else None)
        Console().print(table)
    if any(line.mismatched(limit) for line in lines):
        raise typer.Exit(1)
