"""The Providers page of Preferences: a list of profiles, each an OpenAI-compatible endpoint.

:class:`ProfilesPage` lists the profiles (add from a preset, duplicate, rename, remove,
make default); :class:`ProvidersPage` edits one: name, endpoint, model and model list,
limits, budgets, price and key. The profiles are saved to ``profiles.json`` in the
config dir (:mod:`desktop_queue.providers.profiles`), the file ``desktop-queue work``
reads too; each API key goes to the OS keyring only (``store_api_key``, one entry per
profile). If no keyring can hold a key the page says so and nothing is written
anywhere: there is no plaintext fallback. The model's price goes to the data dir's
``prices.json`` (:class:`PriceTable`), which every ``desktop-queue work`` on that data
dir reads too.

"Test connection" lists the endpoint's models on a pool thread; the result comes back
through :class:`ConnectionTester`, a QObject the page (the GUI thread) owns.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from PySide6.QtCore import QObject, Qt, QThreadPool, Signal, Slot
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QDoubleSpinBox,
    QFormLayout,
    QGroupBox,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QListWidget,
    QListWidgetItem,
    QMenu,
    QPushButton,
    QScrollArea,
    QSizePolicy,
    QSpinBox,
    QStackedWidget,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from desktop_queue.core.errors import InvalidInput, StoreError
from desktop_queue.core.ledger import Price, PriceTable, format_usd
from desktop_queue.core.paths import data_dir as resolve_data_dir
from desktop_queue.providers.openai_compat import (
    PROFILE_KEY_PREFIX,
    KeyringUnavailable,
    delete_api_key,
    make_providers,
    resolve_api_key,
    store_api_key,
)
from desktop_queue.providers.profiles import (
    PRESETS,
    SOURCE_ENVIRONMENT,
    SOURCE_NONE,
    Preset,
    ProfileFileError,
    ProfileSet,
    check_base_url,
    check_name,
    save_profiles,
)
from desktop_queue.providers.setup import ProfileConfig

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


class _TestConnection:
    """Calls ``provider.test_connection()`` off the GUI thread; reports through ``tester``.

    The pool runs its :meth:`run` (a callable: see :class:`~desktop_queue.runtime.driver.JobRunnable`).
    """

    def __init__(self, provider: Any, tester: ConnectionTester) -> None:
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


def _models_text(models: tuple[str, ...]) -> str:
    return ", ".join(models)


def _parse_models(text: str) -> tuple[str, ...]:
    return tuple(dict.fromkeys(m.strip() for m in text.replace("\n", ",").split(",") if m.strip()))


class ProvidersPage(QWidget):
    """Edits one provider profile (name, endpoint, model, limits, budgets, price, key).

    Args:
        config: the profile as saved.
        pool: where the connection test runs (default: the global pool).
        parent: the Qt parent.
        prices: the data dir's price table (default: the one of the default data dir).
        saved: False for a profile not in the file yet (it offers presets).

    Signals:
        name_changed(str): the name field changed (the list shows it).
    """

    name_changed = Signal(str)

    def __init__(
        self,
        config: ProfileConfig,
        pool: QThreadPool | None = None,
        parent: QWidget | None = None,
        *,
        prices: PriceTable | None = None,
        saved: bool = True,
    ) -> None:
        from desktop_queue.ui.dialogs import InlineMessage

        super().__init__(parent)
        self.setObjectName("providersPage")
        self.config = config
        #: the name under which the profile (and its keyring entry) was saved (None: new)
        self.saved_name: str | None = config.name if saved else None
        #: the name the dialog gave a new profile (its preset's, or "server"): a preset chosen
        #: while it still has that name renames it
        self.given_name: str | None = None
        #: a free name for a profile of this editor from ``base`` (the page sets it: it knows the others)
        self.free_name: Callable[[str], str] = lambda base: base
        self._pool = pool or QThreadPool.globalInstance()
        self.prices = prices if prices is not None else PriceTable.load(resolve_data_dir())
        self.preset = QComboBox()
        self.preset.setObjectName("presetCombo")
        self.preset.addItem("Choose a server…", None)
        for preset in PRESETS:
            self.preset.addItem(f"{preset.label} — {preset.config.base_url}", preset.label)
            self.preset.setItemData(self.preset.count() - 1, preset.hint, Qt.ItemDataRole.ToolTipRole)
        self.preset.setToolTip("Fill in the usual address and model of a well-known server")
        self.preset.activated.connect(self._preset_chosen)
        self.name = QLineEdit(config.name)
        self.name.setObjectName("profileName")
        self.name.setToolTip('What jobs name in their input ("profile": …) and what the status bar shows')
        self.name.textChanged.connect(self.name_changed)
        self.base_url = QLineEdit(config.base_url or "")
        self.base_url.setObjectName("baseUrl")
        self.base_url.setPlaceholderText("https://api.openai.com/v1 (or $OPENAI_BASE_URL)")
        self.base_url.setToolTip("An OpenAI-compatible endpoint: OpenAI, Ollama, llama.cpp, vLLM, LM Studio…")
        self.model = QLineEdit(config.model)
        self.model.setToolTip("The model used when a job's input names none")
        self.models = QLineEdit(_models_text(config.models))
        self.models.setObjectName("modelList")
        self.models.setPlaceholderText("optional, comma-separated: Test connection fills it")
        self.models.setToolTip("The models offered when you write a job for this profile")
        self.require_key = QCheckBox("This server needs an API &key")
        self.require_key.setObjectName("requireKey")
        self.require_key.setChecked(config.require_key)
        self.require_key.setToolTip("Local servers (Ollama, llama.cpp, LM Studio) usually need none")
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
        self.base_url.textEdited.connect(self._endpoint_edited)
        self.api_key = QLineEdit()
        self.api_key.setObjectName("apiKey")
        self.api_key.setEchoMode(QLineEdit.EchoMode.Password)
        self.api_key.setPlaceholderText(
            "paste the key: it goes to the OS keyring"
            if self.saved_name is None
            else "empty: keep the saved key (keyring or environment)"
        )
        self.api_key.setToolTip(
            "Saved to the OS keyring, never to the settings file. Where there is no keyring, set "
            f"{PROFILE_KEY_PREFIX}<NAME> in the environment (the profile's name in capitals, - as _)"
        )
        self.key_state = QLabel()
        self.key_state.setObjectName("keyState")
        self.key_state.setWordWrap(True)
        self.require_key.toggled.connect(self._show_key_state)
        self.base_url.textChanged.connect(self._show_key_state)
        self.test_button = QPushButton("&Test connection")
        self.test_button.setObjectName("testConnection")
        self.test_button.clicked.connect(self.test_connection)
        self.message = InlineMessage()
        self.message.setObjectName("providerMessage")

        self._focus_before_test: QWidget | None = None
        self.tester = ConnectionTester(self)
        self.tester.succeeded.connect(self._tested_ok)
        self.tester.failed.connect(self._tested_failed)

        form = QFormLayout()
        if self.saved_name is None:
            form.addRow("&Start from:", self.preset)
        else:
            self.preset.hide()
        form.addRow("&Name:", self.name)
        form.addRow("&Base URL:", self.base_url)
        form.addRow("&Model:", self.model)
        form.addRow("Model &list:", self.models)
        form.addRow("", self.require_key)
        form.addRow("API &key:", self.api_key)
        form.addRow("", self.key_state)
        limits = QGroupBox("Limits (shared by every process on the data dir)")
        limits_form = QFormLayout(limits)
        limits_form.addRow("&Requests per minute:", self.rpm)
        limits_form.addRow("T&okens per minute:", self.tpm)
        limits_form.addRow("&Concurrency:", self.concurrency)
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
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addLayout(form)
        layout.addLayout(row)
        layout.addWidget(self.message)
        layout.addWidget(limits)
        layout.addWidget(budgets)
        layout.addWidget(price_box)
        layout.addStretch(1)
        self._show_price()
        self._show_key_state()

    def profile(self) -> ProfileConfig:
        """The profile as edited (no key: that is only ever in the password field and the keyring)."""
        return ProfileConfig(
            name=self.name.text().strip(),
            base_url=self.base_url.text().strip() or None,
            model=self.model.text().strip() or ProfileConfig.model,
            models=_parse_models(self.models.text()),
            rpm=float(self.rpm.value()) or None,
            tpm=float(self.tpm.value()) or None,
            concurrency=self.concurrency.value() or None,
            require_key=self.require_key.isChecked(),
            budget_usd_per_day=self.budget_usd_day.value() or None,
            budget_usd_per_month=self.budget_usd_month.value() or None,
            budget_tokens_per_day=self.budget_tokens_day.value() or None,
            budget_tokens_per_month=self.budget_tokens_month.value() or None,
        )

    def check(self) -> None:
        """Raises :class:`InvalidInput` naming the field that is not usable."""
        check_name(self.name.text().strip())
        check_base_url(self.base_url.text())

    @Slot(int)
    def _preset_chosen(self, index: int) -> None:
        label = self.preset.itemData(index)
        preset = next((p for p in PRESETS if p.label == label), None)
        if preset is not None:
            self.apply_preset(preset)

    def apply_preset(self, preset: Preset, name: str | None = None) -> None:
        """Fills the endpoint, model and key need of ``preset``, and the name if given.

        A new profile still named after the preset it started from takes the new one's
        name: "openai" for a llama.cpp server would stay in every list and log.
        """
        config = preset.config
        if name is None and self.saved_name is None and self.name.text().strip() == self.given_name:
            name = self.free_name(config.name)
        if name is not None:
            self.name.setText(name)
            self.given_name = name
        self.base_url.setText(config.base_url or "")
        self.model.setText(config.model)
        self.require_key.setChecked(config.require_key)
        self.preset.setCurrentIndex(
            next((i for i in range(self.preset.count()) if self.preset.itemData(i) == preset.label), 0)
        )
        self.message.show_info(f"{preset.hint}. Test the connection to check it answers.")

    @Slot(str)
    def _endpoint_edited(self, url: str) -> None:
        """An address typed by hand is no longer the preset's: neither its name nor its hint stays."""
        label = self.preset.currentData()
        preset = next((p for p in PRESETS if p.label == label), None)
        if preset is not None and url.strip().rstrip("/") != (preset.config.base_url or "").rstrip("/"):
            self.preset.setCurrentIndex(0)
            if self.message.text.text().startswith(preset.hint):
                self.message.show_info("Test the connection to check that this server answers.")

    def _model_name(self) -> str:
        return self.model.text().strip() or ProfileConfig.model

    @Slot()
    def _show_key_state(self) -> None:
        """Says where this profile's key comes from (never the key itself)."""
        self.api_key.setEnabled(self.require_key.isChecked())
        found = None
        if self.saved_name is not None:
            found = resolve_api_key(self.saved_name, env=self.profile().openai_profile().env_key)
        if not self.require_key.isChecked():
            # (a key there is found is sent all the same: a proxy may want one without it being required)
            if found is not None and found.key:
                where = "the OS keyring" if found.source == "keyring" else f"${found.variable}"
                self.key_state.setText(f"A key is not required, but the one in {where} is sent.")
            else:
                self.key_state.setText("No key is sent to this server.")
            return
        if found is None:
            self.key_state.setText("")  # the field's hint says where it goes
            return
        if found.source == "keyring":
            text = "A key is saved in the OS keyring."
        elif found.source == "environment":
            text = f"The key comes from ${found.variable}."
        else:
            text = "No key yet: this profile's jobs wait until one is entered."
        self.key_state.setText(text + (f" ({found.notice})" if found.notice else ""))

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
        try:
            check_base_url(self.base_url.text())
        except InvalidInput as exc:
            self.message.show_error(str(exc))
            return
        profile = self.profile()
        # the saved key is under the saved name: a rename takes effect on OK
        lookup = profile.openai_profile()
        if self.saved_name is not None and self.saved_name != profile.name:
            from dataclasses import replace

            lookup = replace(lookup, name=self.saved_name)
        provider = make_providers(lookup, api_key=self.api_key.text() or None)["openai.chat"]
        self._focus_before_test = self.window().focusWidget()
        self.test_button.setEnabled(False)
        self.message.show_info("Testing the connection…")
        self._pool.start(_TestConnection(provider, self.tester).run)

    @Slot(list)
    def _tested_ok(self, models: list[str]) -> None:
        self._test_done()
        shown = ", ".join(models[:20]) + (f" … ({len(models)} in all)" if len(models) > 20 else "")
        self.message.show_info(f"Connected. Models: {shown}" if models else "Connected. The endpoint lists no models.")
        if models and not self.models.text().strip():
            self.models.setText(_models_text(tuple(models[:100])))
        if models and self.model.text().strip() not in models and self.saved_name is None:
            self.model.setText(models[0])  # a preset's guess the server does not have

    def _test_done(self) -> None:
        # disabling the button moved the focus on (into the limits): bring it back
        self.test_button.setEnabled(True)
        if self._focus_before_test is self.test_button:
            self.test_button.setFocus()

    @Slot(str)
    def _tested_failed(self, error: str) -> None:
        self._test_done()
        self.message.show_error(f"Connection failed: {error}")

    def save_key(self) -> bool:
        """Saves a typed key to the keyring under the profile's (new) name; moves it on a rename.

        Returns:
            False if the keyring cannot take it (the page says why).
        """
        name = self.name.text().strip()
        key = self.api_key.text()
        try:
            if key:
                store_api_key(name, key)
                self.api_key.clear()
            elif self.saved_name is not None and self.saved_name != name:
                old = resolve_api_key(self.saved_name, env=False)
                if old.source == "keyring" and old.key:
                    store_api_key(name, old.key)
            if self.saved_name is not None and self.saved_name != name:
                delete_api_key(self.saved_name)
        except KeyringUnavailable as exc:
            self.message.show_error(str(exc))
            return False
        return True

    def save(self) -> bool:
        """Saves the key to the keyring (if one was typed) and the model's price to prices.json.

        The profile itself is saved by :class:`ProfilesPage` (the file holds them all).

        Returns:
            False if the key or the price could not be saved (the page says why).
        """
        if not self.save_key():
            return False
        try:
            self._save_price()
        except StoreError as exc:
            self.message.show_error(f"The price could not be saved: {exc}")
            return False
        self.config = self.profile()
        self.saved_name = self.config.name
        self.preset.hide()
        self._show_price()
        self._show_key_state()
        return True


class ProfilesPage(QWidget):
    """The list of provider profiles beside the editor of the selected one.

    Args:
        profiles: the profiles as loaded.
        pool: where connection tests run.
        prices: the data dir's price table.
        parent: the Qt parent.
    """

    def __init__(
        self,
        profiles: ProfileSet,
        pool: QThreadPool | None = None,
        *,
        prices: PriceTable | None = None,
        parent: QWidget | None = None,
    ) -> None:
        from desktop_queue.ui.dialogs import InlineMessage

        super().__init__(parent)
        self.setObjectName("profilesPage")
        self.loaded = profiles
        self._pool = pool
        self.prices = prices if prices is not None else PriceTable.load(resolve_data_dir())
        self.default_name: str | None = profiles.default_name() if profiles.source != SOURCE_NONE else None
        self.removed: list[str] = []  # saved names whose keyring entries go on save
        self.list = QListWidget()
        self.list.setObjectName("profileList")
        self.list.setMinimumWidth(150)
        self.list.setMaximumWidth(190)
        self.list.currentRowChanged.connect(self._row_changed)
        self.stack = QStackedWidget()
        self.empty = QLabel(
            "No provider yet.\n\nAdd one to run chat, image and speech jobs: OpenAI with an API key, "
            "or a server on this machine (Ollama, llama.cpp, LM Studio) with none."
        )
        self.empty.setObjectName("noProfiles")
        self.empty.setWordWrap(True)
        self.empty.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.stack.addWidget(self.empty)
        self.editors: list[ProvidersPage] = []

        self.add_button = QToolButton()
        self.add_button.setObjectName("addProfile")
        self.add_button.setText("&Add")
        self.add_button.setToolTip("Add a profile, from a preset or empty")
        self.add_button.setPopupMode(QToolButton.ToolButtonPopupMode.InstantPopup)
        self.add_button.setToolButtonStyle(Qt.ToolButtonStyle.ToolButtonTextOnly)
        self.add_button.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)
        menu = QMenu(self.add_button)
        for preset in PRESETS:
            action = menu.addAction(preset.label)
            action.setToolTip(preset.hint)
            action.triggered.connect(lambda _c=False, p=preset: self.add_profile(p))
        menu.addSeparator()
        menu.addAction("Other server…").triggered.connect(lambda _c=False: self.add_profile(None))
        self.add_button.setMenu(menu)
        self.duplicate_button = QPushButton("D&uplicate")
        self.duplicate_button.setObjectName("duplicateProfile")
        self.duplicate_button.clicked.connect(self.duplicate)
        self.rename_button = QPushButton("Rena&me")
        self.rename_button.setObjectName("renameProfile")
        self.rename_button.clicked.connect(self.rename)
        self.remove_button = QPushButton("Remo&ve")
        self.remove_button.setObjectName("removeProfile")
        self.remove_button.clicked.connect(self.remove)
        self.default_button = QPushButton("Make &default")
        self.default_button.setObjectName("defaultProfile")
        self.default_button.setToolTip("Jobs that name no profile run on the default one")
        self.default_button.clicked.connect(self.make_default)
        self.message = InlineMessage()
        self.message.setObjectName("profilesMessage")
        if profiles.source == SOURCE_ENVIRONMENT:
            self.message.show_info(
                "This profile comes from OPENAI_BASE_URL / OPENAI_API_KEY; OK saves it to the profiles file."
            )

        buttons = QVBoxLayout()
        buttons.addWidget(self.add_button)
        buttons.addWidget(self.duplicate_button)
        buttons.addWidget(self.rename_button)
        buttons.addWidget(self.remove_button)
        buttons.addWidget(self.default_button)
        buttons.addStretch(1)
        side = QVBoxLayout()
        side.addWidget(self.list, 1)
        side.addLayout(buttons)
        scroll = QScrollArea()
        scroll.setObjectName("profileScroll")
        scroll.setWidgetResizable(True)
        scroll.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        scroll.setFrameShape(QScrollArea.Shape.NoFrame)
        scroll.setWidget(self.stack)
        self.editor_scroll = scroll
        right = QVBoxLayout()
        right.addWidget(scroll, 1)
        right.addWidget(self.message)
        row = QHBoxLayout(self)
        row.addLayout(side)
        row.addLayout(right, 1)
        if profiles.source != SOURCE_NONE:
            for config in profiles.profiles:
                self._add_editor(config, saved=profiles.source != SOURCE_ENVIRONMENT)
        self.list.setCurrentRow(0 if self.editors else -1)
        self._update_buttons()

    # ------------------------------------------------------------------ list

    def _add_editor(self, config: ProfileConfig, *, saved: bool) -> ProvidersPage:
        editor = ProvidersPage(config, self._pool, prices=self.prices, saved=saved)
        self.editors.append(editor)
        self.stack.addWidget(editor)
        item = QListWidgetItem()
        self.list.addItem(item)
        editor.name_changed.connect(lambda _t, e=editor: self._refresh_item(e))
        self._refresh_item(editor)
        return editor

    def _refresh_item(self, editor: ProvidersPage) -> None:
        row = self.editors.index(editor)
        name = editor.name.text().strip() or "(no name)"
        is_default = self.default_name is not None and self.default_name in (editor.saved_name, name)
        if self.default_name is None and row == 0:
            is_default = True
        item = self.list.item(row)
        item.setText(name + ("  (default)" if is_default else ""))
        item.setToolTip(editor.base_url.text() or "OpenAI's endpoint, or $OPENAI_BASE_URL")

    def _refresh_items(self) -> None:
        for editor in self.editors:
            self._refresh_item(editor)

    @Slot(int)
    def _row_changed(self, row: int) -> None:
        self.stack.setCurrentWidget(self.editors[row] if 0 <= row < len(self.editors) else self.empty)
        self._update_buttons()

    def _update_buttons(self) -> None:
        has = self.current_editor() is not None
        for button in (self.duplicate_button, self.rename_button, self.remove_button, self.default_button):
            button.setEnabled(has)

    def select(self, name: str) -> bool:
        """Selects the profile ``name`` (as saved, or as typed); False if there is none."""
        for row, editor in enumerate(self.editors):
            if name in (editor.saved_name, editor.name.text().strip()):
                self.list.setCurrentRow(row)
                return True
        return False

    def current_editor(self) -> ProvidersPage | None:
        row = self.list.currentRow()
        return self.editors[row] if 0 <= row < len(self.editors) else None

    def _names(self, skip: ProvidersPage | None = None) -> ProfileSet:
        return ProfileSet(tuple(ProfileConfig(name=e.name.text().strip()) for e in self.editors if e is not skip))

    def add_profile(self, preset: Preset | None = None) -> ProvidersPage:
        """Adds a new profile (from ``preset``, else empty) and selects it."""
        base = preset.config if preset is not None else ProfileConfig(name="server", base_url=None)
        name = self._names().unique_name(base.name)
        from dataclasses import replace

        editor = self._add_editor(replace(base, name=name), saved=False)
        editor.given_name = name
        editor.free_name = lambda wanted: self._names(skip=editor).unique_name(wanted)
        if preset is not None:
            editor.apply_preset(preset)
        self.list.setCurrentRow(len(self.editors) - 1)
        editor.name.setFocus()
        editor.name.selectAll()
        return editor

    def duplicate(self) -> ProvidersPage | None:
        """A copy of the selected profile under a free name (no key: enter one, or it has none)."""
        editor = self.current_editor()
        if editor is None:
            return None
        from dataclasses import replace

        config = editor.profile()
        copy = self._add_editor(replace(config, name=self._names().unique_name(config.name)), saved=False)
        copy.preset.hide()
        self.list.setCurrentRow(len(self.editors) - 1)
        copy.name.setFocus()
        copy.name.selectAll()
        return copy

    def rename(self) -> None:
        """Puts the cursor in the selected profile's name (its key moves with it on OK)."""
        editor = self.current_editor()
        if editor is not None:
            editor.name.setFocus()
            editor.name.selectAll()

    def remove(self) -> None:
        """Removes the selected profile (on OK: from the file, and its keyring entry)."""
        editor = self.current_editor()
        if editor is None:
            return
        row = self.editors.index(editor)
        if editor.saved_name is not None:
            self.removed.append(editor.saved_name)
            if editor.saved_name == self.default_name:
                self.default_name = None
        self.editors.pop(row)
        self.list.takeItem(row)
        self.stack.removeWidget(editor)
        editor.deleteLater()
        self.list.setCurrentRow(min(row, len(self.editors) - 1))
        self._refresh_items()
        self._update_buttons()

    def make_default(self) -> None:
        editor = self.current_editor()
        if editor is None:
            return
        # a new profile becomes the default under the name it is saved with
        self.default_name = editor.saved_name or editor.name.text().strip()
        self._refresh_items()

    # ------------------------------------------------------------------ saving

    def profile_set(self) -> ProfileSet:
        """The profiles as edited, in the list's order.

        Raises:
            InvalidInput: a name is unusable or taken twice, or a base URL is not a URL.
        """
        configs: list[ProfileConfig] = []
        seen: set[str] = set()
        for editor in self.editors:
            editor.check()
            config = editor.profile()
            if config.name in seen:
                raise InvalidInput(f"two profiles are named {config.name!r}: rename one")
            seen.add(config.name)
            configs.append(config)
        default = None
        for editor, config in zip(self.editors, configs, strict=True):
            if self.default_name is not None and self.default_name in (editor.saved_name, config.name):
                default = config.name
        # named, as the file names it: the window compares what it saved with what the file
        # then says, and a difference reads as a change made elsewhere
        default = default or (configs[0].name if configs else None)
        return ProfileSet(tuple(configs), default, path=self.loaded.path)

    def _show_error(self, editor: ProvidersPage | None, text: str) -> None:
        if editor is not None:
            self.list.setCurrentRow(self.editors.index(editor))
            editor.message.show_error(text)
        else:
            self.message.show_error(text)

    def save(self) -> bool:
        """Writes the keys (keyring), prices and the profiles file; False (and why, inline) if it cannot."""
        for editor in self.editors:
            try:
                editor.check()
            except InvalidInput as exc:
                self._show_error(editor, str(exc))
                return False
        try:
            profiles = self.profile_set()
        except InvalidInput as exc:
            self._show_error(None, str(exc))
            return False
        if self.loaded.source == SOURCE_NONE and not profiles.profiles:
            return True  # nothing was ever configured, nothing to write
        names = set(profiles.names())
        for editor in self.editors:
            if not editor.save():
                self.list.setCurrentRow(self.editors.index(editor))
                return False
        for name in self.removed:
            if name in names:
                continue  # removed, then a new one took its name: it keeps the entry it wrote
            try:
                delete_api_key(name)
            except KeyringUnavailable as exc:
                log.warning("%s", exc)
        self.removed = []
        try:
            save_profiles(profiles)
        except ProfileFileError as exc:
            self._show_error(None, f"The profiles could not be saved: {exc}")
            return False
        self.loaded = profiles
        self.default_name = profiles.default_name()
        self._refresh_items()
        return True
