"""The Providers page of Preferences: one OpenAI-compatible endpoint, its limits, budgets, price and key.

The endpoint, limits and budgets are saved under QSettings ``providers/<name>/…``; the
API key goes to the OS keyring only (``store_api_key``). If no keyring can hold it the
page says so and nothing is written anywhere: there is no plaintext fallback. The
model's price goes to the data dir's ``prices.json`` (:class:`PriceTable`), which every
``desktop-queue work`` on that data dir reads too.

"Test connection" lists the endpoint's models on a pool thread; the result comes back
through :class:`ConnectionTester`, a QObject the page (the GUI thread) owns.
"""

from __future__ import annotations

import logging
from typing import Any

from PySide6.QtCore import QObject, QRunnable, QThreadPool, Signal, Slot
from PySide6.QtWidgets import (
    QCheckBox,
    QDoubleSpinBox,
    QFormLayout,
    QGroupBox,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPushButton,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)

from desktop_queue.core.errors import StoreError
from desktop_queue.core.ledger import Price, PriceTable, format_usd
from desktop_queue.core.paths import data_dir as resolve_data_dir
from desktop_queue.providers.openai_compat import KeyringUnavailable, make_providers, store_api_key
from desktop_queue.providers.setup import ProfileConfig
from desktop_queue.ui.settings import save_provider_profile

log = logging.getLogger(__name__)

MAX_RATE = 10_000_000
MAX_PROVIDER_CONCURRENCY = 256
MAX_BUDGET_USD = 1_000_000.0
MAX_BUDGET_TOKENS = 2_000_000_000  # a QSpinBox holds a 32-bit int
MAX_PRICE_PER_1M = 10_000.0


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


def _money(maximum: float, special: str, tip: str, suffix: str = "") -> QDoubleSpinBox:
    box = QDoubleSpinBox()
    box.setRange(0.0, maximum)
    box.setDecimals(4 if suffix else 2)
    box.setPrefix("$")
    box.setSuffix(suffix)
    if special:
        box.setSpecialValueText(special)  # 0 shows as "no budget"
    box.setToolTip(tip)
    box.setAccelerated(True)
    return box


def price_text(model: str, price: Price | None, *, local: bool) -> str:
    """What the page says about the price that applies to ``model`` when the user sets none."""
    if local:
        return f"This endpoint is on this machine: {model or 'its model'} costs nothing unless you set a price."
    if price is None:
        return (
            f"No built-in price for {model or 'this model'}: its cost is unknown, so a USD budget holds "
            "its jobs until you set a price."
        )
    rates = [
        f"{format_usd(v)} {what}"
        for v, what in ((price.input_per_1m, "in"), (price.output_per_1m, "out"))
        if v is not None
    ]
    shown = ", ".join(rates) + " per 1M tokens" if rates else "priced per image or per character"
    kind = "Estimate" if price.estimate else "Price"
    return f"{kind} for {model}: {shown}." + (" Prices change; set your own if they differ." if price.estimate else "")


class ProvidersPage(QWidget):
    """Edits one provider profile (endpoint, model, RPM, TPM, concurrency, budgets, price, key).

    Args:
        config: the profile as saved.
        pool: where the connection test runs (default: the global pool).
        parent: the Qt parent.
        prices: the data dir's price table (default: the one of the default data dir).
    """

    def __init__(
        self,
        config: ProfileConfig,
        pool: QThreadPool | None = None,
        parent: QWidget | None = None,
        *,
        prices: PriceTable | None = None,
    ) -> None:
        from desktop_queue.ui.dialogs import InlineMessage

        super().__init__(parent)
        self.setObjectName("providersPage")
        self.config = config
        self._pool = pool or QThreadPool.globalInstance()
        self.prices = prices if prices is not None else PriceTable.load(resolve_data_dir())
        self.base_url = QLineEdit(config.base_url or "")
        self.base_url.setPlaceholderText("https://api.openai.com/v1 (or $OPENAI_BASE_URL)")
        self.base_url.setToolTip("An OpenAI-compatible endpoint: OpenAI, Ollama, llama.cpp, vLLM, LM Studio…")
        self.model = QLineEdit(config.model)
        self.model.setToolTip("The model used when a job's input names none")
        self.rpm = _spin(MAX_RATE, "unlimited", "Requests per minute sent to this endpoint")
        self.rpm.setValue(int(config.rpm or 0))
        self.tpm = _spin(MAX_RATE, "unlimited", "Tokens per minute (estimated, settled by reported usage)")
        self.tpm.setValue(int(config.tpm or 0))
        self.concurrency = _spin(
            MAX_PROVIDER_CONCURRENCY,
            "no extra limit",
            "Attempts at once against this endpoint (the global limit still applies)",
        )
        self.concurrency.setValue(int(config.concurrency or 0))
        self.budget_usd_day = _money(MAX_BUDGET_USD, "no budget", "Dollars this profile may spend a day (local time)")
        self.budget_usd_day.setValue(config.budget_usd_per_day or 0.0)
        self.budget_usd_month = _money(MAX_BUDGET_USD, "no budget", "Dollars this profile may spend a calendar month")
        self.budget_usd_month.setValue(config.budget_usd_per_month or 0.0)
        self.budget_tokens_day = _spin(MAX_BUDGET_TOKENS, "no budget", "Tokens (in and out) this profile may use a day")
        self.budget_tokens_day.setValue(int(config.budget_tokens_per_day or 0))
        self.budget_tokens_month = _spin(MAX_BUDGET_TOKENS, "no budget", "Tokens this profile may use a calendar month")
        self.budget_tokens_month.setValue(int(config.budget_tokens_per_month or 0))
        self.own_price = QCheckBox("Use my own &price for this model")
        self.own_price.setObjectName("ownPrice")
        self.own_price.setToolTip("Saved in the data dir (prices.json), shared with desktop-queue work")
        self.price_in = _money(MAX_PRICE_PER_1M, "", "Dollars per million input tokens", " / 1M in")
        self.price_out = _money(MAX_PRICE_PER_1M, "", "Dollars per million output tokens", " / 1M out")
        self.price_note = QLabel()
        self.price_note.setObjectName("priceNote")
        self.price_note.setWordWrap(True)
        self._shown_price: tuple[str, Price | None] = ("", None)
        self.own_price.toggled.connect(self._own_price_toggled)
        self.model.textChanged.connect(self._show_price)
        self.base_url.textChanged.connect(self._show_price)
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
        budgets = QGroupBox("Budgets (jobs wait when the next one would pass them)")
        budget_form = QFormLayout(budgets)
        budget_form.addRow("US$ per &day:", self.budget_usd_day)
        budget_form.addRow("US$ per mo&nth:", self.budget_usd_month)
        budget_form.addRow("Tokens per da&y:", self.budget_tokens_day)
        budget_form.addRow("Tokens per mont&h:", self.budget_tokens_month)
        price_box = QGroupBox("Price of the model")
        price_form = QFormLayout(price_box)
        price_form.addRow(self.own_price)
        price_form.addRow("&Input:", self.price_in)
        price_form.addRow("O&utput:", self.price_out)
        price_form.addRow(self.price_note)
        row = QHBoxLayout()
        row.addWidget(self.test_button)
        row.addStretch(1)
        layout = QVBoxLayout(self)
        layout.addLayout(form)
        layout.addWidget(budgets)
        layout.addWidget(price_box)
        layout.addLayout(row)
        layout.addWidget(self.message)
        layout.addStretch(1)
        self._show_price()

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
            budget_usd_per_day=self.budget_usd_day.value() or None,
            budget_usd_per_month=self.budget_usd_month.value() or None,
            budget_tokens_per_day=self.budget_tokens_day.value() or None,
            budget_tokens_per_month=self.budget_tokens_month.value() or None,
        )

    def _model_name(self) -> str:
        return self.model.text().strip() or ProfileConfig.model

    @Slot()
    def _show_price(self) -> None:
        """Shows the price of the model as typed: the user's own, else the estimate (read-only)."""
        model = self._model_name()
        mine = self.prices.user_price(model)
        self._shown_price = (model, mine)
        fallback = self.prices.default_price(model)
        shown = mine or fallback
        self.own_price.blockSignals(True)
        self.own_price.setChecked(mine is not None)
        self.own_price.blockSignals(False)
        self.price_in.setValue((shown.input_per_1m or 0.0) if shown else 0.0)
        self.price_out.setValue((shown.output_per_1m or 0.0) if shown else 0.0)
        self._own_price_toggled(mine is not None)

    @Slot(bool)
    def _own_price_toggled(self, own: bool) -> None:
        self.price_in.setEnabled(own)
        self.price_out.setEnabled(own)
        model = self._model_name()
        local = self.profile().is_local()
        self.price_note.setText(
            "Your price, saved for every process on this data dir."
            if own
            else price_text(model, self.prices.default_price(model), local=local)
        )

    def edited_price(self) -> Price | None:
        """The user's price as edited (None: use the built-in estimate, or none)."""
        if not self.own_price.isChecked():
            return None
        return Price(input_per_1m=self.price_in.value(), output_per_1m=self.price_out.value())

    def _save_price(self) -> None:
        model, before = self._shown_price
        if model != self._model_name():
            model, before = self._model_name(), self.prices.user_price(self._model_name())
        after = self.edited_price()
        if after == before or (after is None and model not in self.prices.user_prices()):
            return  # unchanged, or only a prefix entry applies: nothing of this model's to write
        self.prices.set_price(model, after)

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
        """Saves the key to the keyring (if one was typed), the model's price to prices.json, then the profile to QSettings.

        Returns:
            False if the key or the price could not be saved (the page says why; the
            profile was not written).
        """
        key = self.api_key.text()
        if key:
            try:
                store_api_key(self.config.name, key)
            except KeyringUnavailable as exc:
                self.message.show_error(str(exc))
                return False
            self.api_key.clear()
        try:
            self._save_price()
        except StoreError as exc:
            self.message.show_error(f"The price could not be saved: {exc}")
            return False
        self.config = self.profile()
        save_provider_profile(self.config)
        self._show_price()
        return True
