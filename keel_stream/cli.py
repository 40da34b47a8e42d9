"""The `keel-stream` command."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import sys
import threading
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Annotated, TypeVar

import typer

from keel_stream.analytics.tail import TailOptions, tail
from keel_stream.api.app import ApiConfig
from keel_stream.api.keys import KeyStore
from keel_stream.api.server import api_server
from keel_stream.dev.children import child_process
from keel_stream.dev.postgres import EmbeddedPostgres
from keel_stream.errors import KeelError
from keel_stream.kafka.broker import EmbeddedBroker
from keel_stream.logs import configure_logging, get_logger
from keel_stream.relay import Relay, RelayConfig, Shard, republish
from keel_stream.settings import KeelSettings
from keel_stream.store import MigrationReport, PostgresLedger, connect, migrate, pooled
from keel_stream.store.sqlfiles import query
from keel_stream.worker.providers import FakeProvider, OpenAIProvider, Provider
from keel_stream.worker.worker import Worker, WorkerConfig
from topics.admin import apply_catalog, describe_topics
from topics.catalog import EVENTS

__all__ = ["app", "main"]

T = TypeVar("T")
_STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)

app = typer.Typer(no_args_is_help=True, add_completion=False, help=__doc__)
topics_app = typer.Typer(no_args_is_help=True, help="The topic catalog on the broker.")
app.add_typer(topics_app, name="topics")
projections_app = typer.Typer(no_args_is_help=True, help="The read models (Faust projections).")
app.add_typer(projections_app, name="projections")
tenants_app = typer.Typer(no_args_is_help=True, help="Tenants.")
app.add_typer(tenants_app, name="tenants")
keys_app = typer.Typer(no_args_is_help=True, help="API keys (each maps to one tenant).")
app.add_typer(keys_app, name="keys")

DatabaseUrl = Annotated[
    str | None, typer.Option("--database-url", help="PostgreSQL URL ($KEEL_DATABASE_URL).")
]
Bootstrap = Annotated[
    str | None, typer.Option("--bootstrap", help="Kafka bootstrap servers ($KEEL_KAFKA_BOOTSTRAP).")
]


def _settings() -> KeelSettings:
    settings = KeelSettings()
    configure_logging(settings.log_level)
    return settings


def _fail(code: str, message: str, exit_code: int = 1) -> typer.Exit:
    typer.echo(f"error [{code}]: {message}", err=True)
    return typer.Exit(code=exit_code)


def _require(value: str | None, code: str, hint: str) -> str:
    if value is None:
        raise _fail(code, hint, exit_code=2)
    return value


def _run(work: Awaitable[T]) -> T:
    """Run a coroutine; keel errors become one line with their code and exit status 1."""
    try:
        return asyncio.run(_as_coroutine(work))
    except KeelError as exc:
        raise _fail(exc.error_code, exc.message) from exc


async def _as_coroutine(work: Awaitable[T]) -> T:
    return await work


async def _until_signalled(
    body: Callable[[asyncio.Event], Awaitable[None]], already: bool = False
) -> None:
    """Run body(stop) with SIGINT/SIGTERM setting stop (handlers installed first)."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    if already:
        stop.set()
    await body(stop)


@contextlib.contextmanager
def _signals_remembered() -> Iterator[threading.Event]:
    """While embedded servers start and stop, SIGINT/SIGTERM only set a flag: start-up runs to
    its end and is then shut down, and teardown always completes, so no server is orphaned."""
    asked = threading.Event()
    previous = {sig: signal.signal(sig, lambda *_: asked.set()) for sig in _STOP_SIGNALS}
    try:
        yield asked
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


async def _migrate(dsn: str) -> MigrationReport:
    conn = await connect(dsn)
    try:
        return await migrate(conn)
    finally:
        await conn.close()


def _report(report: MigrationReport) -> None:
    applied = ", ".join(report.applied) if report.applied else "nothing new"
    typer.echo(f"schema version {report.version} (applied: {applied})")


@app.command("migrate")
def migrate_command(database_url: DatabaseUrl = None) -> None:
    """Apply the schema migrations (safe to re-run; stops on the first error)."""
    settings = _settings()
    _report(_run(_migrate(_dsn(settings, database_url))))


@topics_app.command("apply")
def topics_apply(bootstrap: Bootstrap = None) -> None:
    """Create missing topics and report configuration drift."""
    settings = _settings()
    servers = _require(
        bootstrap or settings.kafka_bootstrap, "missing_kafka_bootstrap", "set KEEL_KAFKA_BOOTSTRAP"
    )
    report = _run(apply_catalog(servers, settings.topic_prefix))
    for name in report.created:
        typer.echo(f"created  {name}")
    for name in report.existing:
        typer.echo(f"exists   {name}")
    for line in report.drift:
        typer.echo(f"drift    {line}")
    if not report.clean:
        raise typer.Exit(code=3)


@topics_app.command("describe")
def topics_describe(
    bootstrap: Bootstrap = None,
    group: Annotated[list[str] | None, typer.Option(help="Consumer group to show lag for.")] = None,
) -> None:
    """Partitions, offsets (log start, high-water) and consumer-group lag."""
    settings = _settings()
    servers = _require(
        bootstrap or settings.kafka_bootstrap, "missing_kafka_bootstrap", "set KEEL_KAFKA_BOOTSTRAP"
    )
    groups = group or []
    states = _run(describe_topics(servers, settings.topic_prefix, groups))
    header = f"{'topic':<32} {'part':>4} {'start':>10} {'high':>10}"
    typer.echo(header + "".join(f" {'lag:' + g:>16}" for g in groups))
    for s in states:
        lags = "".join(f" {s.lag(g):>16}" for g in groups)
        typer.echo(f"{s.topic:<32} {s.partition:>4} {s.log_start:>10} {s.high_water:>10}{lags}")


def _relay_config(
    settings: KeelSettings, dsn: str, servers: str, shard: int, shards: int | None
) -> RelayConfig:
    return RelayConfig(
        database_url=dsn,
        bootstrap=servers,
        topic_prefix=settings.topic_prefix,
        shard=Shard(index=shard, count=shards or settings.relay_shards),
        batch_size=settings.relay_batch_size,
        poll_interval_s=settings.relay_poll_interval_s,
    )


@app.command("relay")
def relay_command(
    database_url: DatabaseUrl = None,
    bootstrap: Bootstrap = None,
    shard: Annotated[int, typer.Option(help="Outbox shard this relay serves.")] = 0,
    shards: Annotated[int | None, typer.Option(help="Shard count ($KEEL_RELAY_SHARDS).")] = None,
    metrics_port: Annotated[int | None, typer.Option(help="Serve /metrics on this port.")] = None,
) -> None:
    """Publish the outbox to Kafka until SIGTERM (one active relay per shard, others stand by)."""
    settings = _settings()
    dsn = _dsn(settings, database_url)
    servers = _require(
        bootstrap or settings.kafka_bootstrap, "missing_kafka_bootstrap", "set KEEL_KAFKA_BOOTSTRAP"
    )
    port = metrics_port or settings.metrics_port
    if port is not None:
        from prometheus_client import start_http_server

        start_http_server(port, addr="127.0.0.1")
    relay = Relay(_relay_config(settings, dsn, servers, shard, shards))
    _run(_until_signalled(relay.run))


@app.command("republish")
def republish_command(
    database_url: DatabaseUrl = None,
    tenant: Annotated[str | None, typer.Option(help="Only this tenant.")] = None,
    session: Annotated[str | None, typer.Option(help="Only this session.")] = None,
    after_seq: Annotated[int, typer.Option(help="Only events with a greater seq.")] = 0,
) -> None:
    """Re-seed keel.events.v1 from the ledger (the relay publishes what this enqueues)."""
    settings = _settings()
    dsn = _dsn(settings, database_url)

    async def work() -> None:
        async with pooled(dsn, max_size=2) as pool:
            report = await republish(pool, tenant=tenant, session=session, after_seq=after_seq)
        typer.echo(f"enqueued {report.events} events of {report.sessions} sessions")

    _run(work())


@app.command("tail")
def tail_command(
    bootstrap: Bootstrap = None,
    from_beginning: Annotated[
        bool, typer.Option("--from-beginning/--from-end", help="Where a new group starts.")
    ] = True,
    tenant: Annotated[str | None, typer.Option(help="Only this tenant's events.")] = None,
    kind: Annotated[list[str] | None, typer.Option(help="Only these kinds (repeatable).")] = None,
    group: Annotated[str | None, typer.Option(help="Consumer group (default: a new one).")] = None,
    limit: Annotated[int | None, typer.Option(help="Stop after this many events.")] = None,
    no_dedupe: Annotated[bool, typer.Option("--no-dedupe", help="Show duplicates too.")] = False,
) -> None:
    """Print keel.events.v1 as JSON lines, de-duplicated by (tenant, session, seq)."""
    settings = _settings()
    servers = _require(
        bootstrap or settings.kafka_bootstrap, "missing_kafka_bootstrap", "set KEEL_KAFKA_BOOTSTRAP"
    )
    options = TailOptions(
        bootstrap=servers,
        topic=EVENTS.full_name(settings.topic_prefix),
        from_beginning=from_beginning,
        tenant=tenant,
        kinds=frozenset(kind or []),
        dedupe=not no_dedupe,
        limit=limit,
        **({"group": group} if group else {}),
    )

    def emit(line: bytes) -> None:
        sys.stdout.buffer.write(line + b"\n")
        sys.stdout.buffer.flush()

    async def body(stop: asyncio.Event) -> None:
        await tail(options, emit, stop)

    try:
        _run(_until_signalled(body))
    except LookupError as exc:
        raise _fail("topic_missing", str(exc)) from exc


def _dsn(settings: KeelSettings, database_url: str | None) -> str:
    return _require(
        database_url or settings.database_url, "missing_database_url", "set KEEL_DATABASE_URL"
    )


def _database_and_bootstrap(
    settings: KeelSettings, database_url: str | None, bootstrap: str | None
) -> tuple[str, str]:
    dsn = _dsn(settings, database_url)
    servers = _require(
        bootstrap or settings.kafka_bootstrap, "missing_kafka_bootstrap", "set KEEL_KAFKA_BOOTSTRAP"
    )
    return dsn, servers


@projections_app.command("run")
def projections_run(database_url: DatabaseUrl = None, bootstrap: Bootstrap = None) -> None:
    """Run the Faust worker that keeps the read models live (until SIGTERM)."""
    from keel_stream.projector.host import HostConfig, run_worker

    settings = _settings()
    dsn, servers = _database_and_bootstrap(settings, database_url, bootstrap)
    run_worker(
        HostConfig(
            database_url=dsn,
            bootstrap=servers,
            topic_prefix=settings.topic_prefix,
            data_dir=settings.data_dir,
            batch_size=settings.projector_batch_size,
            reconcile_every_s=settings.projector_reconcile_every_s,
            reconcile_idle_s=settings.projector_reconcile_idle_s,
        )
    )


@projections_app.command("rebuild")
def projections_rebuild(
    name: Annotated[str, typer.Argument(help="transcript, run_status or sse")],
    database_url: DatabaseUrl = None,
    bootstrap: Bootstrap = None,
) -> None:
    """Replay from offset zero into a new generation; switch readers once it has caught up."""
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    from keel_stream.projector.rebuild import Progress as RebuildProgress
    from keel_stream.projector.rebuild import rebuild

    settings = _settings()
    dsn, servers = _database_and_bootstrap(settings, database_url, bootstrap)

    async def work() -> None:
        columns = (
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            TextColumn(
                "{task.completed:,.0f} events  {task.fields[rate]:,.0f}/s  lag {task.fields[lag]}"
            ),
            TimeElapsedColumn(),
        )
        async with pooled(dsn) as pool:
            with Progress(*columns, transient=False) as bar:
                task = bar.add_task(f"rebuild {name}", total=None, rate=0.0, lag="?")

                def show(progress: RebuildProgress) -> None:
                    total = None if progress.lag is None else progress.events + progress.lag
                    bar.update(
                        task,
                        completed=progress.events,
                        total=total,
                        rate=progress.events_per_s,
                        lag=progress.lag if progress.lag is not None else "?",
                    )

                report = await rebuild(
                    pool, servers, name, topic_prefix=settings.topic_prefix, on_progress=show
                )
        typer.echo(
            f"{report.projection}: generation {report.generation} is live "
            f"({report.events} events, {report.sessions} sessions, "
            f"{report.healed_from_ledger} from the ledger, {report.seconds:.1f}s)"
        )

    _run(work())


@projections_app.command("prune")
def projections_prune(
    name: Annotated[str | None, typer.Argument(help="Only this projection.")] = None,
    database_url: DatabaseUrl = None,
) -> None:
    """Delete retired generations (left behind by rebuilds); the live one is never touched."""
    settings = _settings()
    dsn = _dsn(settings, database_url)

    async def work() -> None:
        async with pooled(dsn) as pool, pool.acquire() as conn, conn.transaction():
            row = await conn.fetchrow(query("projection_prune"), name)
            await conn.execute(query("projection_delete_retired"), name)
        assert row is not None
        typer.echo(f"pruned {row['generations']} retired generations ({row['states']} states)")

    _run(work())


@projections_app.command("status")
def projections_status(database_url: DatabaseUrl = None, bootstrap: Bootstrap = None) -> None:
    """Each projection's generations, stored offsets, lag and sessions behind the ledger."""
    from keel_stream.projector.status import projection_status

    settings = _settings()
    dsn = _dsn(settings, database_url)
    servers = bootstrap or settings.kafka_bootstrap

    async def work() -> None:
        async with pooled(dsn, max_size=2) as pool:
            rows = await projection_status(pool, servers, settings.topic_prefix)
        typer.echo(
            f"{'projection':<12} {'gen':>4} {'status':<9} {'sessions':>9} {'behind':>7} "
            f"{'lag':>8}  offsets"
        )
        for r in rows:
            offsets = " ".join(f"{p}:{o}" for p, o in sorted(r.offsets.items()))
            lag = "?" if r.lag is None else str(r.lag)
            typer.echo(
                f"{r.projection:<12} {r.generation:>4} {r.status:<9} {r.sessions:>9} "
                f"{r.sessions_behind_ledger:>7} {lag:>8}  {offsets}"
            )

    _run(work())


def _provider(settings: KeelSettings) -> Provider:
    if settings.provider == "fake":
        return FakeProvider()
    if settings.provider == "openai":
        return OpenAIProvider(
            settings.openai_base_url, settings.openai_api_key, settings.openai_model
        )
    raise _fail("unknown_provider", f"KEEL_PROVIDER={settings.provider!r}: use fake or openai", 2)


def _worker_config(settings: KeelSettings, dsn: str, servers: str | None) -> WorkerConfig:
    return WorkerConfig(
        database_url=dsn,
        bootstrap=servers,
        topic_prefix=settings.topic_prefix,
        slots=settings.worker_slots,
        lease_ttl_s=settings.worker_lease_ttl_s,
        drain_grace_s=settings.worker_drain_grace_s,
        max_turns=settings.worker_max_turns,
        context_budget_chars=settings.worker_context_budget_chars,
        provider=_provider(settings),
    )


@app.command("worker")
def worker_command(database_url: DatabaseUrl = None, bootstrap: Bootstrap = None) -> None:
    """Claim and run agent runs until SIGTERM (which drains: finish or release, then exit)."""
    settings = _settings()
    dsn = _dsn(settings, database_url)
    worker = Worker(_worker_config(settings, dsn, bootstrap or settings.kafka_bootstrap))
    _run(_until_signalled(worker.run))


@app.command("api")
def api_command(
    database_url: DatabaseUrl = None,
    bootstrap: Bootstrap = None,
    port: Annotated[int | None, typer.Option(help="Port ($KEEL_API_PORT).")] = None,
) -> None:
    """Serve AgentAPI (REST + SSE) until SIGTERM, which drains open streams first."""
    settings = _settings()
    dsn = _dsn(settings, database_url)
    api = ApiConfig(
        database_url=dsn,
        bootstrap=bootstrap or settings.kafka_bootstrap,
        topic_prefix=settings.topic_prefix,
    )
    server = api_server(api, settings.api_host, port if port is not None else settings.api_port)
    _run(server.serve())


@tenants_app.command("create")
def tenants_create(
    tenant: Annotated[str, typer.Argument(help="The tenant id.")],
    name: Annotated[str, typer.Option(help="A display name.")] = "",
    database_url: DatabaseUrl = None,
) -> None:
    """Create a tenant."""
    settings = _settings()
    dsn = _dsn(settings, database_url)

    async def work() -> None:
        async with pooled(dsn, max_size=1) as pool:
            await PostgresLedger(pool).create_tenant(tenant, name)

    _run(work())
    typer.echo(f"created tenant {tenant}")


@keys_app.command("create")
def keys_create(
    tenant: Annotated[str, typer.Option(help="The tenant the key acts for.")],
    database_url: DatabaseUrl = None,
) -> None:
    """Create an API key; it is printed once and stored only as a hash."""
    settings = _settings()
    dsn = _dsn(settings, database_url)

    async def work() -> tuple[str, str]:
        async with pooled(dsn, max_size=1) as pool:
            return await KeyStore(pool).create(tenant)

    key_id, key = _run(work())
    typer.echo(f"key id: {key_id}")
    typer.echo(f"key:    {key}")


@keys_app.command("revoke")
def keys_revoke(
    key_id: Annotated[str, typer.Argument(help="The key id printed at creation.")],
    database_url: DatabaseUrl = None,
) -> None:
    """Revoke an API key (requests with it answer 401 from now on)."""
    settings = _settings()
    dsn = _dsn(settings, database_url)

    async def work() -> None:
        async with pooled(dsn, max_size=1) as pool:
            await KeyStore(pool).revoke(key_id)

    _run(work())
    typer.echo(f"revoked {key_id}")


@app.command("dev")
def dev_command(
    database_url: DatabaseUrl = None,
    bootstrap: Bootstrap = None,
    data_dir: Annotated[
        Path | None, typer.Option(help="Data directory for embedded servers ($KEEL_DATA_DIR).")
    ] = None,
    once: Annotated[bool, typer.Option(help="Start, report and exit instead of serving.")] = False,
) -> None:
    """Run the platform on its embedded defaults (or KEEL_DATABASE_URL, KEEL_KAFKA_BOOTSTRAP)."""
    settings = _settings()
    log = get_logger("dev")
    root = data_dir or settings.data_dir
    dsn = database_url or settings.database_url
    servers = bootstrap or settings.kafka_bootstrap
    postgres = EmbeddedPostgres(root / "postgres") if dsn is None else None
    broker = EmbeddedBroker(log_path=_log_path(root, "broker.log")) if servers is None else None
    with _signals_remembered() as asked_to_stop:
        try:
            if postgres is not None:
                dsn = postgres.start()
                log.info("embedded postgres started", log_file=str(postgres.log_file))
            if broker is not None:
                servers = broker.start()
                log.info("embedded broker started", bootstrap=servers)
            assert dsn is not None
            assert servers is not None
            _run(
                _until_signalled(
                    lambda stop: _dev(settings, dsn, servers, root, stop, once),
                    already=asked_to_stop.is_set(),
                )
            )
        finally:
            # asyncio put the default handlers back when its loop closed: remember again.
            for sig in _STOP_SIGNALS:
                signal.signal(sig, lambda *_: asked_to_stop.set())
            if broker is not None:
                broker.stop()
                log.info("embedded broker stopped")
            if postgres is not None:
                postgres.stop()
                log.info("embedded postgres stopped")


def _log_path(root: Path, name: str) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    return root / name


async def _dev(
    settings: KeelSettings,
    dsn: str,
    servers: str,
    data_dir: Path,
    stop: asyncio.Event,
    once: bool,
) -> None:
    _report(await _migrate(dsn))
    topics = await apply_catalog(servers, settings.topic_prefix)
    typer.echo(f"database: {dsn}")
    typer.echo(f"kafka: {servers} (topics: {len(topics.created)} created)")
    if once:
        return
    relay = Relay(_relay_config(settings, dsn, servers, 0, 1))
    env = {
        "KEEL_DATABASE_URL": dsn,
        "KEEL_KAFKA_BOOTSTRAP": servers,
        "KEEL_DATA_DIR": str(data_dir),
    }
    worker = Worker(_worker_config(settings, dsn, servers))
    key = await _dev_key(dsn, settings.dev_api_key)
    api = ApiConfig(database_url=dsn, bootstrap=servers, topic_prefix=settings.topic_prefix)
    server = api_server(api, settings.api_host, settings.api_port, on_exit=stop.set)
    async with child_process("projections", "run", env=env) as projector:
        typer.echo(f"projections worker: pid {projector.pid}")
        serving = asyncio.create_task(server.serve())
        started = asyncio.create_task(server.ready.wait())
        await asyncio.wait({serving, started}, return_when=asyncio.FIRST_COMPLETED)
        if serving.done():
            serving.result()  # the api could not start: raise why
        typer.echo(f"api: http://{settings.api_host}:{server.bound_port}")
        typer.echo(f"api key: {key}")
        typer.echo("ready; Ctrl-C or SIGTERM stops")
        await asyncio.gather(relay.run(stop), worker.run(stop))
        server.should_exit = True
        await serving


async def _dev_key(dsn: str, wanted: str | None) -> str:
    """The dev tenant and its API key (KEEL_DEV_API_KEY, or a new random one)."""
    async with pooled(dsn, max_size=1) as pool:
        if not await pool.fetchval(query("tenant_exists"), "dev"):
            await PostgresLedger(pool).create_tenant("dev", "keel-stream dev")
        keys = KeyStore(pool)
        if wanted is not None and await keys.tenant_for(wanted) == "dev":
            return wanted
        return (await keys.create("dev", wanted))[1]


def main() -> None:
    """Console-script entry point."""
    app()
