"""The Providers page of Preferences: one OpenAI-compatible endpoint, its limits and its key.

The endpoint and limits are saved under QSettings ``providers/<name>/…``; the API key
goes to the OS keyring only (``store_api_key``). If no keyring can hold it the page says
so and nothing is written anywhere: there is no plaintext fallback.

"Test connection" lists the endpoint's models on a pool thread; the result comes back
through :class:`ConnectionTester`, a QObject the page (the GUI thread) owns.
"""

from __future__ import annotations

import logging
from typing import Any

from PySide6.QtCore import QObject, QRunnable, QThreadPool, Signal, Slot
from PySide6.QtWidgets import (
    QFormLayout,
    QHBoxLayout,
    QLineEdit,
    QPushButton,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)

from desktop_queue.providers.openai_compat import KeyringUnavailable, make_providers, store_api_key
from desktop_queue.providers.setup import ProfileConfig
from desktop_queue.ui.settings import save_provider_profile

log = logging.getLogger(__name__)

MAX_RATE = 10_000_000
MAX_PROVIDER_CONCURRENCY = 256


class ConnectionTester(QObject):
    """Receives a connection test's result on the GUI thread.

    Signals:
        succeeded(list): the model ids the endpoint lists.
        failed(str): what went wrong (redacted: never the key).
    """

    succeeded = Signal(list)
    failed = Signal(str)


class _TestConnection(QRunnable):
    """Calls ``provider.test_connection()`` off the GUI thread; reports through ``tester``."""

    def __init__(self, provider: Any, tester: ConnectionTester) -> None:
        super().__init__()
        self.setAutoDelete(True)
        self._provider = provider
        self._tester = tester

    def run(self) -> None:
        # the client is closed before the result goes out: when the page hears back,
        # nothing of the test is left running on the pool
        models: list[str] = []
        error: str | None = None
        try:
            models = list(self._provider.test_connection())
        except Exception as exc:  # InvalidInput carries the redacted message
            error = str(exc) or type(exc).__name__
        finally:
            try:
                self._provider.close()
            except Exception:
                log.debug("closing the test client failed", exc_info=True)
        if error is None:
            self._tester.succeeded.emit(models)
        else:
            self._tester.failed.emit(error)


def _spin(maximum: int, special: str, tip: str) -> QSpinBox:
    box = QSpinBox()
    box.setRange(0, maximum)
    box.setSpecialValueText(special)  # 0 shows as "unlimited"
    box.setToolTip(tip)
    box.setAccelerated(True)
    return box


class ProvidersPage(QWidget):
    """Edits one provider profile (endpoint, model, RPM, TPM, concurrency, key).

    Args:
        config: the profile as saved.
        pool: where the connection test runs (default: the global pool).
        parent: the Qt parent.
    """

    def __init__(self, config: ProfileConfig, pool: QThreadPool | None = None, parent: QWidget | None = None) -> None:
        from desktop_queue.ui.dialogs import InlineMessage

        super().__init__(parent)
        self.setObjectName("providersPage")
        self.config = config
        self._pool = pool or QThreadPool.globalInstance()
        self.base_url = QLineEdit(config.base_url or "")
        self.base_url.setPlaceholderText("https://api.openai.com/v1 (or $OPENAI_BASE_URL)")
        self.base_url.setToolTip("An OpenAI-compatible endpoint: OpenAI, Ollama, llama.cpp, vLLM, LM Studio…")
        self.model = QLineEdit(config.model)
        self.model.setToolTip("The model used when a job's input names none")
        self.rpm = _spin(MAX_RATE, "unlimited", "Requests per minute sent to this endpoint")
        self.rpm.setValue(int(config.rpm or 0))
        self.tpm = _spin(MAX_RATE, "unlimited", "Tokens per minute (estimated, settled by reported usage)")
        self.tpm.setValue(int(config.tpm or 0))
        self.concurrency = _spin(MAX_PROVIDER_CONCURRENCY, "no extra limit",
                                 "Attempts at once against this endpoint (the global limit still applies)")
        self.concurrency.setValue(int(config.concurrency or 0))
        self.api_key = QLineEdit()
        self.api_key.setObjectName("apiKey")
        self.api_key.setEchoMode(QLineEdit.EchoMode.Password)
        self.api_key.setPlaceholderText("leave empty to keep the saved key (OS keyring or $OPENAI_API_KEY)")
        self.api_key.setToolTip("Saved to the OS keyring, never to the settings file")
        self.test_button = QPushButton("&Test connection")
        self.test_button.setObjectName("testConnection")
        self.test_button.clicked.connect(self.test_connection)
        self.message = InlineMessage()
        self.message.setObjectName("providerMessage")

        self.tester = ConnectionTester(self)
        self.tester.succeeded.connect(self._tested_ok)
        self.tester.failed.connect(self._tested_failed)

        form = QFormLayout()
        form.addRow("&Base URL:", self.base_url)
        form.addRow("&Model:", self.model)
        form.addRow("&Requests per minute:", self.rpm)
        form.addRow("T&okens per minute:", self.tpm)
        form.addRow("&Concurrency:", self.concurrency)
        form.addRow("API &key:", self.api_key)
        row = QHBoxLayout()
        row.addWidget(self.test_button)
        row.addStretch(1)
        layout = QVBoxLayout(self)
        layout.addLayout(form)
        layout.addLayout(row)
        layout.addWidget(self.message)
        layout.addStretch(1)

    def profile(self) -> ProfileConfig:
        """The profile as edited (no key: that is only ever in the password field and the keyring)."""
        return ProfileConfig(
            name=self.config.name,
            base_url=self.base_url.text().strip() or None,
            model=self.model.text().strip() or ProfileConfig.model,
            rpm=float(self.rpm.value()) or None,
            tpm=float(self.tpm.value()) or None,
            concurrency=self.concurrency.value() or None,
            require_key=self.config.require_key,
        )

    @Slot()
    def test_connection(self) -> None:
        """Lists the endpoint's models on a pool thread (the typed key, else the saved one)."""
        provider = make_providers(self.profile().openai_profile(), api_key=self.api_key.text() or None)["openai.chat"]
        self.test_button.setEnabled(False)
        self.message.show_info("Testing the connection…")
        self._pool.start(_TestConnection(provider, self.tester))

    @Slot(list)
    def _tested_ok(self, models: list[str]) -> None:
        self.test_button.setEnabled(True)
        shown = ", ".join(models[:20]) + (f" … ({len(models)} in all)" if len(models) > 20 else "")
        self.message.show_info(f"Connected. Models: {shown}" if models else "Connected. The endpoint lists no models.")

    @Slot(str)
    def _tested_failed(self, error: str) -> None:
        self.test_button.setEnabled(True)
        self.message.show_error(f"Connection failed: {error}")

    def save(self) -> bool:
        """Saves the key to the keyring (if one was typed), then the profile to QSettings.

        Returns:
            False if the key could not be saved (the page says why; nothing was written).
        """
        key = self.api_key.text()
        if key:
            try:
                store_api_key(self.config.name, key)
            except KeyringUnavailable as exc:
                self.message.show_error(str(exc))
                return False
            self.api_key.clear()
        self.config = self.profile()
        save_provider_profile(self.config)
        return True
