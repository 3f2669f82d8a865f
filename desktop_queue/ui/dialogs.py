"""Dialogs: submit a job, preview a replay, preferences; and the confirmation helpers.

The dialogs check input inline as it is typed (the provider's own ``validate``), and ask
the :class:`~desktop_queue.ui.controller.Controller` to act; nothing is created while
the input is invalid.
"""

from __future__ import annotations

import json
from typing import Any

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QFontDatabase
from PySide6.QtWidgets import (
    QComboBox,
    QDialog,
    QDialogButtonBox,
    QDoubleSpinBox,
    QFormLayout,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QMessageBox,
    QPlainTextEdit,
    QPushButton,
    QSpinBox,
    QTabWidget,
    QVBoxLayout,
    QWidget,
)

from desktop_queue.core import Job, QueueError, SubmitResult
from desktop_queue.core.errors import InvalidInput
from desktop_queue.core.model import Priority
from desktop_queue.providers.profiles import Preset, ProfileSet
from desktop_queue.providers.setup import ProfileConfig
from desktop_queue.ui.controller import Controller
from desktop_queue.ui.icons import icon
from desktop_queue.ui.settings import MAX_CONCURRENCY, Preferences

DEMO_FAIL_WITH = ("", "retryable", "throttled", "fatal", "poison")


# --------------------------------------------------------------------------- prompts (tests replace these)


def reject_text(ok_text: str) -> str:
    """The label of the button that says no: never "Cancel" when agreeing is itself "Cancel …"."""
    if ok_text.casefold().startswith("cancel"):
        return "Keep running"
    return "Cancel"


def confirm(parent: QWidget | None, title: str, text: str, ok_text: str = "OK", cancel_text: str | None = None) -> bool:
    """Asks a yes/no question; True if the user agreed (the safe answer is the default).

    Args:
        parent: the window the question is about.
        title: the window title.
        text: the question.
        ok_text: the label of the button that agrees ("Quit", "Cancel jobs").
        cancel_text: the label of the button that does not (default: "Cancel", or
            "Keep running" when ``ok_text`` itself starts with "Cancel").
    """
    box, ok = make_confirm_box(parent, title, text, ok_text, cancel_text)
    box.exec()
    return box.clickedButton() is ok


def make_confirm_box(
    parent: QWidget | None, title: str, text: str, ok_text: str = "OK", cancel_text: str | None = None
) -> tuple[QMessageBox, QPushButton]:
    """The message box :func:`confirm` shows (not yet shown) and its agreeing button."""
    box = QMessageBox(QMessageBox.Icon.Question, title, text, QMessageBox.StandardButton.NoButton, parent)
    ok = box.addButton(ok_text, QMessageBox.ButtonRole.AcceptRole)
    no = box.addButton(cancel_text or reject_text(ok_text), QMessageBox.ButtonRole.RejectRole)
    box.setDefaultButton(no)
    box.setEscapeButton(no)
    return box, ok


def show_error(parent: QWidget | None, title: str, text: str) -> None:
    """A clear, modal error message (never a traceback)."""
    QMessageBox.critical(parent, title, text)


# --------------------------------------------------------------------------- shared pieces


def _mono_editor() -> QPlainTextEdit:
    editor = QPlainTextEdit()
    editor.setFont(QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont))
    editor.setTabChangesFocus(True)
    editor.setLineWrapMode(QPlainTextEdit.LineWrapMode.NoWrap)
    return editor


class InlineMessage(QWidget):
    """An icon and a line of text under a form: what is wrong, or what will happen."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        layout = QHBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        self.icon = QLabel()
        self.icon.setFixedSize(18, 18)
        self.text = QLabel()
        self.text.setWordWrap(True)
        self.text.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        layout.addWidget(self.icon, 0, Qt.AlignmentFlag.AlignTop)
        layout.addWidget(self.text, 1)
        self.ok = True

    def show_error(self, text: str) -> None:
        self.ok = False
        self.icon.setPixmap(icon("state-dead").pixmap(16, 16))
        self.text.setText(text)
        self.setAccessibleDescription(f"Error: {text}")

    def show_info(self, text: str, ok: bool = True) -> None:
        """A neutral message; ``ok=False`` for a hint about what is still missing."""
        self.ok = ok
        self.icon.setPixmap(icon("event-info").pixmap(16, 16))
        self.text.setText(text)
        self.setAccessibleDescription(text)


def parse_json(text: str) -> Any:
    """Parses editor text; raises :class:`InvalidInput` saying where the JSON is broken."""
    if not text.strip():
        raise InvalidInput('the input is empty: write a JSON object, e.g. {"prompt": "…"}')
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise InvalidInput(f"not valid JSON: {exc.msg} (line {exc.lineno}, column {exc.colno})") from None


# --------------------------------------------------------------------------- submit

TITLE_CHARS = 60


def default_title(payload: Any) -> str | None:
    """The first line of the input's prompt, shortened (None: let the queue name the job).

    Without it every job submitted from the dialog was listed as "demo job".
    """
    prompt = payload.get("prompt") if isinstance(payload, dict) else None
    if not isinstance(prompt, str) or not prompt.strip():
        return None
    line = prompt.strip().splitlines()[0].strip()
    return line if len(line) <= TITLE_CHARS else line[: TITLE_CHARS - 1].rstrip() + "…"


class DemoForm(QWidget):
    """A form for the ``demo`` provider's input.

    Signals:
        changed(): any field changed.
    """

    changed = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        form = QFormLayout(self)
        self.prompt = QLineEdit()
        self.prompt.setPlaceholderText("What should the demo generate? (required)")
        self.duration = QDoubleSpinBox()
        self.duration.setRange(0.0, 3600.0)
        self.duration.setDecimals(2)
        self.duration.setValue(2.0)
        self.duration.setSuffix(" s")
        self.fail_times = QSpinBox()
        self.fail_times.setRange(0, 100)
        self.fail_with = QComboBox()
        for value in DEMO_FAIL_WITH:
            self.fail_with.addItem(value or "(never fails)", value)
        self.retry_after = QDoubleSpinBox()
        self.retry_after.setRange(0.0, 3600.0)
        self.retry_after.setSpecialValueText("(provider default)")
        self.retry_after.setSuffix(" s")
        form.addRow("&Prompt:", self.prompt)
        form.addRow("&Duration:", self.duration)
        form.addRow("Fail the first:", self.fail_times)
        form.addRow("Fail &with:", self.fail_with)
        form.addRow("Retry-&After:", self.retry_after)
        self.fail_times.setSuffix(" attempts")
        self.fail_times.valueChanged.connect(lambda n: self.fail_times.setSuffix(" attempt" if n == 1 else " attempts"))
        # "fail with X" fails at least once: show it, so the form and the JSON agree
        self.fail_with.currentIndexChanged.connect(self._fail_with_changed)
        for signal in (
            self.prompt.textChanged,
            self.duration.valueChanged,
            self.fail_times.valueChanged,
            self.fail_with.currentIndexChanged,
            self.retry_after.valueChanged,
        ):
            signal.connect(self.changed)

    def _fail_with_changed(self, _index: int) -> None:
        if self.fail_with.currentData() and self.fail_times.value() == 0:
            self.fail_times.setValue(1)

    def payload(self) -> dict[str, Any]:
        data: dict[str, Any] = {"prompt": self.prompt.text(), "duration_s": round(self.duration.value(), 3)}
        fail_with = self.fail_with.currentData()
        if fail_with:
            data["fail_with"] = fail_with
            data["fail_times"] = self.fail_times.value() or 1
        elif self.fail_times.value():
            data["fail_times"] = self.fail_times.value()
        if self.retry_after.value() > 0:
            data["retry_after_s"] = self.retry_after.value()
        return data

    def load(self, payload: Any) -> bool:
        """Fills the form from ``payload``; False if the form cannot show it exactly."""
        if not isinstance(payload, dict) or set(payload) - {
            "prompt",
            "duration_s",
            "fail_times",
            "fail_with",
            "retry_after_s",
        }:
            return False
        blockers = [
            w.blockSignals(True)
            for w in (self.prompt, self.duration, self.fail_times, self.fail_with, self.retry_after)
        ]
        try:
            self.prompt.setText(str(payload.get("prompt", "")))
            self.duration.setValue(float(payload.get("duration_s", 1.0)))
            self.fail_times.setValue(int(payload.get("fail_times", 0)))
            index = self.fail_with.findData(payload.get("fail_with", ""))
            self.fail_with.setCurrentIndex(max(0, index))
            self.retry_after.setValue(float(payload.get("retry_after_s") or 0.0))
        except (TypeError, ValueError):
            return False
        finally:
            for w, was in zip(
                (self.prompt, self.duration, self.fail_times, self.fail_with, self.retry_after), blockers, strict=True
            ):
                w.blockSignals(was)
        return True


class SubmitDialog(QDialog):
    """Submit a job: kind, input (a form for ``demo``, JSON for any kind), title, priority, attempts.

    After ``accept()``, :attr:`submit_result` holds what the submission did (``duplicate`` included).

    Signals:
        submitted(object): the :class:`SubmitResult` of a submission.
    """

    submitted = Signal(object)

    def __init__(self, controller: Controller, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("New job")
        self.setObjectName("submitDialog")
        self.controller = controller
        self.submit_result: SubmitResult | None = None
        self._syncing = False

        self.kind = QComboBox()
        for kind in sorted(controller.providers):
            self.kind.addItem(kind, kind)
        self.form = DemoForm()
        self.editor = _mono_editor()
        self.editor.setObjectName("inputEditor")
        self.editor.setPlaceholderText('{"prompt": "…"}')
        self.tabs = QTabWidget()
        self.tabs.addTab(self.form, "&Form")
        self.tabs.addTab(self.editor, "&JSON")
        self.title = QLineEdit()
        self.title.setPlaceholderText("Optional: how this job is listed (default: the start of the prompt)")
        self.priority = QComboBox()
        self.priority.addItem("Background", str(Priority.BACKGROUND))
        self.priority.addItem("Interactive (runs first)", str(Priority.INTERACTIVE))
        self.max_attempts = QSpinBox()
        self.max_attempts.setRange(1, 100)
        self.max_attempts.setValue(controller.queue.policy.max_attempts)
        self.message = InlineMessage()
        self.message.setObjectName("submitMessage")
        self.buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Cancel)
        self.submit_button = self.buttons.addButton("&Submit", QDialogButtonBox.ButtonRole.AcceptRole)
        self._pristine = True  # nothing typed yet: say what is missing without an error mark

        top = QFormLayout()
        top.addRow("&Kind:", self.kind)
        top.addRow("&Title:", self.title)
        top.addRow("P&riority:", self.priority)
        top.addRow("&Max attempts:", self.max_attempts)
        layout = QVBoxLayout(self)
        layout.addLayout(top)
        layout.addWidget(QLabel("Input:"))
        layout.addWidget(self.tabs, 1)
        layout.addWidget(self.message)
        layout.addWidget(self.buttons)
        self.resize(520, 460)
        # only once the buttons are in the dialog: set earlier, Qt made Cancel the default
        # and Enter threw the user's input away
        self.submit_button.setDefault(True)

        self.kind.currentIndexChanged.connect(self._kind_changed)
        self.form.changed.connect(self._touch)
        self.form.changed.connect(self._form_changed)
        self.editor.textChanged.connect(self._editor_changed)
        self.tabs.currentChanged.connect(self._tab_changed)
        self.buttons.accepted.connect(self.try_submit)
        self.buttons.rejected.connect(self.reject)
        self._kind_changed()
        (self.form.prompt if self._is_demo() else self.editor).setFocus()

    def _touch(self) -> None:
        self._pristine = False

    def _editor_changed(self) -> None:
        if not self._syncing:
            self._pristine = False
        self._validate()

    def _is_demo(self) -> bool:
        return self.kind.currentData() == "demo"

    def _kind_changed(self) -> None:
        demo = self._is_demo()
        self.tabs.setTabEnabled(0, demo)
        if demo:
            self.tabs.setCurrentIndex(0)
            self._form_changed()
        else:
            self.tabs.setCurrentIndex(1)
            self._validate()

    def _form_changed(self) -> None:
        if self._syncing:
            return
        self._syncing = True
        self.editor.setPlainText(json.dumps(self.form.payload(), indent=2, ensure_ascii=False))
        self._syncing = False
        self._validate()

    def _tab_changed(self, index: int) -> None:
        if index == 0 and self._is_demo():
            try:
                loaded = self.form.load(parse_json(self.editor.toPlainText()))
            except InvalidInput:
                loaded = False
            if not loaded:
                self.message.show_error("This JSON does not fit the form; edit it on the JSON tab.")
                self.tabs.setCurrentIndex(1)

    def payload(self) -> Any:
        """The input as it stands; raises :class:`InvalidInput` if it is not acceptable."""
        payload = parse_json(self.editor.toPlainText())
        self.controller.validate(str(self.kind.currentData()), payload)
        return payload

    def _validate(self) -> bool:
        if self._syncing:
            return True
        try:
            self.payload()
        except QueueError as exc:
            if self._pristine:
                self.message.show_info(f"To submit: {exc}.", ok=False)
            else:
                self.message.show_error(str(exc))
            return False
        self.message.show_info("Ready to submit. The job is saved to disk before it is listed.")
        return True

    def try_submit(self) -> bool:
        """Submits if the input is valid; otherwise explains why inline and creates nothing."""
        try:
            payload = self.payload()
            result = self.controller.submit(
                str(self.kind.currentData()),
                payload,
                title=self.title.text().strip() or default_title(payload),
                priority=str(self.priority.currentData()),
                max_attempts=self.max_attempts.value(),
            )
        except QueueError as exc:
            self._pristine = False
            self.message.show_error(str(exc))
            return False
        self.submit_result = result
        self.submitted.emit(result)
        self.accept()
        return True


# --------------------------------------------------------------------------- replay


class ReplayDialog(QDialog):
    """Preview of a replay: the input (editable), and what will happen.

    After ``accept()``, :attr:`new_job` is the job created.
    """

    def __init__(self, controller: Controller, job: Job, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle(f"Replay “{job.title}”")
        self.setObjectName("replayDialog")
        self.controller = controller
        self.job = job
        self.new_job: Job | None = None
        self._original = json.dumps(job.input, indent=2, ensure_ascii=False)

        explain = QLabel(
            f"A <b>new job</b> will be created from job <code>{job.id}</code> ({job.state}), with the input below. "
            "The original stays as it is; the two are linked in their timelines. The new job gets its own "
            "idempotency key, so it runs even if you leave the input unchanged."
        )
        explain.setWordWrap(True)
        explain.setTextFormat(Qt.TextFormat.RichText)
        self.editor = _mono_editor()
        self.editor.setObjectName("inputEditor")
        self.editor.setPlainText(self._original)
        self.message = InlineMessage()
        self.buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Cancel)
        self.replay_button = self.buttons.addButton("&Replay", QDialogButtonBox.ButtonRole.AcceptRole)
        layout = QVBoxLayout(self)
        layout.addWidget(explain)
        label = QLabel("&Input:")
        label.setBuddy(self.editor)
        layout.addWidget(label)
        layout.addWidget(self.editor, 1)
        layout.addWidget(self.message)
        layout.addWidget(self.buttons)
        self.resize(520, 420)
        self.replay_button.setDefault(True)  # after the layout (see SubmitDialog)
        self.editor.setFocus()
        self.editor.textChanged.connect(self._validate)
        self.buttons.accepted.connect(self.try_replay)
        self.buttons.rejected.connect(self.reject)
        self._validate()

    def edited(self) -> bool:
        try:
            return parse_json(self.editor.toPlainText()) != self.job.input
        except InvalidInput:
            return True

    def _validate(self) -> bool:
        try:
            payload = parse_json(self.editor.toPlainText())
            self.controller.validate(self.job.kind, payload)
        except QueueError as exc:
            self.message.show_error(str(exc))
            self.replay_button.setEnabled(False)
            return False
        self.replay_button.setEnabled(True)
        how = "with your edited input" if payload != self.job.input else "with the same input"
        self.message.show_info(
            f"Will queue a new {self.job.kind} job {how}, {self.job.priority} priority, "
            f"up to {self.job.max_attempts} attempts."
        )
        return True

    def try_replay(self) -> bool:
        if not self._validate():
            return False
        payload = parse_json(self.editor.toPlainText())
        try:
            self.new_job = self.controller.replay(self.job.id, payload if payload != self.job.input else None)
        except QueueError as exc:
            self.message.show_error(str(exc))
            return False
        self.accept()
        return True


# --------------------------------------------------------------------------- preferences


class PreferencesDialog(QDialog):
    """User preferences: General (``preferences/…``) and Providers (the profiles file).

    Args:
        prefs: the general preferences.
        provider: the provider profiles (default: as saved); one :class:`ProfileConfig`
            stands for a file holding just that profile.
        parent: the Qt parent.
        new_profile: open on the Providers tab with a new profile from this preset
            (True: the first preset; "Connect a provider").
    """

    def __init__(
        self,
        prefs: Preferences,
        provider: ProfileConfig | ProfileSet | None = None,
        parent: QWidget | None = None,
        *,
        new_profile: Preset | bool | None = None,
    ) -> None:
        from desktop_queue.ui.provider_prefs import ProfilesPage
        from desktop_queue.ui.settings import load_profiles_migrating

        super().__init__(parent)
        self.setWindowTitle("Preferences")
        self.setObjectName("preferencesDialog")
        self.concurrency = QSpinBox()
        self.concurrency.setRange(1, MAX_CONCURRENCY)
        self.concurrency.setValue(prefs.concurrency)
        self.concurrency.setToolTip("How many jobs this window runs at the same time")
        self.attempt_timeout = QSpinBox()
        self.attempt_timeout.setRange(0, 24 * 3600)
        self.attempt_timeout.setSuffix(" s")
        self.attempt_timeout.setSpecialValueText("each kind's default (text and images 10 min, speech 5 min)")
        self.attempt_timeout.setValue(int(prefs.attempt_timeout_s or 0))
        self.attempt_timeout.setToolTip(
            "An attempt that has not answered after this long ends as a retryable timeout. "
            "A job's input may set its own timeout_s."
        )
        general = QWidget()
        form = QFormLayout(general)
        form.addRow("Jobs running at &once:", self.concurrency)
        form.addRow("Give up on an &attempt after:", self.attempt_timeout)
        if isinstance(provider, ProfileConfig):
            provider = ProfileSet((provider,), provider.name)
        self.profiles_page = ProfilesPage(provider if provider is not None else load_profiles_migrating())
        self.tabs = QTabWidget()
        self.tabs.addTab(general, "&General")
        self.tabs.addTab(self.profiles_page, "&Providers")
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Ok | QDialogButtonBox.StandardButton.Cancel)
        buttons.accepted.connect(self.accept)
        buttons.rejected.connect(self.reject)
        layout = QVBoxLayout(self)
        layout.addWidget(self.tabs)
        layout.addWidget(buttons)
        if new_profile:
            from desktop_queue.providers.profiles import PRESETS

            self.profiles_page.add_profile(new_profile if isinstance(new_profile, Preset) else PRESETS[0])
            self.tabs.setCurrentWidget(self.profiles_page)
        # every hint readable in full, not cut off at "https://api.openai…" / "leave empty to k…"
        metrics = self.fontMetrics()
        widest = max(
            (e.fontMetrics().horizontalAdvance(e.placeholderText()) for e in self.findChildren(QLineEdit)),
            default=0,
        )
        labels = max(metrics.horizontalAdvance(t) for t in ("Requests per minute:", "Tokens per month:", "Start from:"))
        # label column, field (its hint in full), the form's and the scroll bar's margins
        self.profiles_page.stack.setMinimumWidth(labels + widest + 24 + 40)
        scroll_bar = self.style().pixelMetric(self.style().PixelMetric.PM_ScrollBarExtent)
        self.profiles_page.editor_scroll.setMinimumWidth(self.profiles_page.stack.minimumWidth() + scroll_bar + 4)
        self.setMinimumWidth(max(760, self.sizeHint().width()))
        self.resize(self.minimumWidth(), min(700, max(560, self.sizeHint().height())))

    def select_profile(self, name: str) -> bool:
        """Shows the Providers tab with the profile ``name`` selected; False if there is none."""
        self.tabs.setCurrentWidget(self.profiles_page)
        return self.profiles_page.select(name)

    @property
    def providers_page(self) -> Any:
        """The editor of the selected profile (a :class:`ProvidersPage`), or None when there is none."""
        return self.profiles_page.current_editor()

    def accept(self) -> None:
        """Saves the provider profiles (and keys) first; stays open if they cannot be saved."""
        if not self.profiles_page.save():
            self.tabs.setCurrentWidget(self.profiles_page)
            return
        super().accept()

    def preferences(self) -> Preferences:
        return Preferences(
            concurrency=self.concurrency.value(), attempt_timeout_s=float(self.attempt_timeout.value()) or None
        )

    def provider_profile(self) -> ProfileConfig:
        """The selected profile as edited."""
        editor = self.profiles_page.current_editor()
        return editor.profile() if editor is not None else ProfileConfig()

    def profile_set(self) -> ProfileSet:
        """Every profile as saved by OK."""
        return self.profiles_page.loaded
