"""``desktop-queue serve [--port P]`` and ``profile webhook-secret NAME``: the local API's commands.

Kept out of :mod:`desktop_queue.cli` (which hooks them in) so that the server library
loads only for the commands that need it.
"""

from __future__ import annotations

import argparse
import signal
import sys
from typing import Any

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2


def _port(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a port number: {text!r}") from None
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"a port is 0 to 65535, not {value}")
    return value


def add_parser(sub: Any) -> None:
    """Adds ``serve`` to the command line's subparsers."""
    from desktop_queue.api import DEFAULT_PORT

    p = sub.add_parser(
        "serve",
        help="the local HTTP API on 127.0.0.1 (bearer token in the config dir's api-token file)",
        description="Serves the queue's verbs over HTTP on 127.0.0.1 only, with provider webhook intake at "
        "POST /webhooks/PROFILE. Requests need 'Authorization: Bearer TOKEN', TOKEN being the content of "
        "api-token in the user config dir (made on first use, mode 0600). The OpenAPI document is at "
        "/openapi.json. Ctrl+C stops it.",
    )
    p.add_argument(
        "--port", type=_port, default=DEFAULT_PORT, metavar="P", help=f"TCP port (default: {DEFAULT_PORT}; 0: any)"
    )


def add_profile_parser(psub: Any) -> None:
    """Adds ``profile webhook-secret NAME`` to the ``profile`` actions."""
    q = psub.add_parser(
        "webhook-secret",
        help="set or remove a profile's webhook secret (read from standard input; kept in the OS keyring)",
        description="Reads the webhook signing secret (whsec_...) of profile NAME from standard input and keeps "
        "it in the OS keyring; webhooks to POST /webhooks/NAME of `desktop-queue serve` are verified with it.",
    )
    q.add_argument("name", help="the profile's name")
    q.add_argument("--remove", action="store_true", help="remove the secret instead")
    q.add_argument("--json", action="store_true", help="print JSON")


def cmd_webhook_secret(args: argparse.Namespace) -> int:
    """``profile webhook-secret NAME [--remove]``."""
    from desktop_queue.core.errors import InvalidInput
    from desktop_queue.providers.openai_compat import KeyringUnavailable
    from desktop_queue.providers.profiles import (
        check_name,
        delete_webhook_secret,
        load_profiles,
        store_webhook_secret,
    )

    try:
        name = check_name(args.name)
    except InvalidInput as exc:
        _err(str(exc))
        return EXIT_USAGE
    profiles = load_profiles()
    if profiles.get(name) is None and name != profiles.default_name():
        _err(f"no profile named {name!r} (profiles: {', '.join(profiles.names()) or 'none'})")
        return EXIT_USAGE
    try:
        if args.remove:
            removed = delete_webhook_secret(name)
            _say(
                args,
                {"profile": name, "webhook_secret": False, "removed": removed},
                f"removed the webhook secret of {name}" if removed else f"{name} had no webhook secret",
            )
            return EXIT_OK
        secret = sys.stdin.readline().strip()
        if not secret:
            _err(
                "give the webhook secret on standard input (e.g. echo whsec_... | desktop-queue profile webhook-secret NAME)"
            )
            return EXIT_USAGE
        store_webhook_secret(name, secret)
    except KeyringUnavailable as exc:
        _err(str(exc))
        return EXIT_FAILED
    _say(args, {"profile": name, "webhook_secret": True}, f"saved the webhook secret of {name} in the keyring")
    return EXIT_OK


def cmd_serve(args: argparse.Namespace) -> int:
    """``serve``: opens the queue with the configured providers and serves until Ctrl+C."""
    from desktop_queue.api.server import ApiServer, ApiServerError, webhooks_for
    from desktop_queue.api.token import load_or_create_token, token_path
    from desktop_queue.cli import _load_profiles, _open

    token = load_or_create_token()
    profiles = _load_profiles()
    with _open(args) as queue:
        try:
            server = ApiServer(queue, token, args.port, webhooks_for(queue, profiles))
        except ApiServerError as exc:
            _err(str(exc))
            return EXIT_FAILED
        # stderr: stdout stays free for scripts; the token itself is never printed
        _err(f"serving the Desktop Queue API on {server.url} (token: {token_path()}); Ctrl+C stops it")
        # (a job submitted here and never run looked like a broken API)
        _err("note: this process runs no job: the window or 'desktop-queue work' on this data dir runs them")
        # uvicorn stops gracefully on SIGINT/SIGTERM, then raises the signal again: ours
        # turns that into a normal return, so the queue is closed and the exit code is 0
        previous = signal.signal(signal.SIGTERM, _stopped)
        try:
            server.run()
        except (KeyboardInterrupt, _Stopped):
            pass
        finally:
            signal.signal(signal.SIGTERM, previous)
    _err("stopped")
    return EXIT_OK


class _Stopped(Exception):
    """SIGTERM arrived (after uvicorn's graceful stop)."""


def _stopped(_signum: int, _frame: Any) -> None:
    raise _Stopped


def _say(args: argparse.Namespace, data: dict[str, Any], text: str) -> None:
    if getattr(args, "json", False):
        import orjson

        sys.stdout.write(orjson.dumps(data).decode() + "\n")
    else:
        print(text)


def _err(message: str) -> None:
    print(f"desktop-queue: {message}", file=sys.stderr)
