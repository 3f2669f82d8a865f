"""A keyring backend for subprocess tests: a JSON file under the test's temp dir.

Selected with ``PYTHON_KEYRING_BACKEND=file_keyring.FileKeyring`` (this folder on
``PYTHONPATH``) and ``DQ_TEST_KEYRING_FILE``; so a key stored by one ``desktop-queue``
process is found by the next one, and the user's real keyring is never touched.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from keyring.backend import KeyringBackend
from keyring.errors import PasswordDeleteError


class FileKeyring(KeyringBackend):
    priority = 1  # type: ignore[assignment]

    @property
    def path(self) -> Path:
        return Path(os.environ["DQ_TEST_KEYRING_FILE"])

    def _load(self) -> dict[str, str]:
        try:
            data: dict[str, str] = json.loads(self.path.read_text())
        except FileNotFoundError:
            return {}
        return data

    def get_password(self, service: str, username: str) -> str | None:
        return self._load().get(f"{service}\x00{username}")

    def set_password(self, service: str, username: str, password: str) -> None:
        data = self._load()
        data[f"{service}\x00{username}"] = password
        self.path.write_text(json.dumps(data))

    def delete_password(self, service: str, username: str) -> None:
        data = self._load()
        if data.pop(f"{service}\x00{username}", None) is None:
            raise PasswordDeleteError(username)
        self.path.write_text(json.dumps(data))
