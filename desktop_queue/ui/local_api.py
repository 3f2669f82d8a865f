"""The local API inside the window: started on a thread of its own when Preferences say so.

:class:`~desktop_queue.api.server.ApiServer` is the server of ``desktop-queue serve``,
over the window's own queue (every verb is safe across threads); this adapter starts and
stops it, and says in the status bar where it listens, or why it could not.
"""

from __future__ import annotations

import logging
from typing import Any

from PySide6.QtWidgets import QLabel, QWidget

from desktop_queue.api import DEFAULT_PORT
from desktop_queue.core.errors import QueueError

log = logging.getLogger(__name__)


class LocalApi:
    """Runs the API of ``queue`` while it is wanted.

    Args:
        queue: the window's open queue.
        profiles: gives the provider profiles now (webhook intake follows them).
        port: the TCP port on 127.0.0.1.
        parent: the owner of the status label.
    """

    def __init__(self, queue: Any, profiles: Any, port: int = DEFAULT_PORT, parent: QWidget | None = None) -> None:
        self.queue = queue
        self._profiles = profiles
        self.port = port
        self.server: Any = None
        self.label = QLabel(parent)
        self.label.setObjectName("localApiStatus")
        self.label.hide()

    @property
    def url(self) -> str | None:
        """Where it listens, or None when it does not run."""
        return self.server.url if self.server is not None else None

    def apply(self, enabled: bool) -> str | None:
        """Starts or stops it; returns why it could not start (None: it does what was asked)."""
        if not enabled:
            self.stop()
            return None
        if self.server is not None:
            return None
        from desktop_queue.api.server import ApiServer, webhooks_for
        from desktop_queue.api.token import load_or_create_token, token_path

        try:
            profiles = self._profiles()
            if profiles is None:
                from desktop_queue.providers.profiles import load_profiles

                profiles = load_profiles()
            server = ApiServer(self.queue, load_or_create_token(), self.port, webhooks_for(self.queue, profiles))
            server.start()
        except (OSError, QueueError) as exc:
            log.warning("the local API did not start: %s", exc)
            self._show(f"API: not running ({exc})", "The local API could not start. " + str(exc))
            return str(exc)
        self.server = server
        self._show(
            f"API: {server.url}",
            f"The local API listens on {server.url} (for this computer only). Requests need the token "
            f"in {token_path()}. OpenAPI: {server.url}/openapi.json",
        )
        return None

    def stop(self) -> None:
        """Stops it (requests in flight finish first); the window calls it on quit."""
        server, self.server = self.server, None
        if server is not None:
            server.stop()
        self.label.hide()

    def _show(self, text: str, tip: str) -> None:
        self.label.setText(text)
        self.label.setToolTip(tip)
        self.label.show()
