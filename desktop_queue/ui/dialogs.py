"""Dialogs: submit a job, preview a replay, preferences; and the confirmation helpers.

The dialogs check input inline as it is typed (the provider's own ``validate``), and ask
the :class:`~desktop_queue.ui.controller.Controller` to act; nothing is created while
the input is invalid.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from PySide6.QtCore import QSettings, Qt, QTimer, Signal
from PySide6.QtGui import QFontDatabase, QKeyEvent, QPalette
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QDialog,
    QDialogButtonBox,
    QFileDialog,
    QFormLayout,
    QFrame,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QMessageBox,
    QPlainTextEdit,
    QPushButton,
    QScrollArea,
    QSpinBox,
    QTabWidget,
    QVBoxLayout,
    QWidget,
)

from desktop_queue.api import DEFAULT_PORT, HOST
from desktop_queue.core import Job, QueueError, SubmitResult
from desktop_queue.core.batchinput import BatchFormat, BatchRead, detect_format, read_batch
from desktop_queue.core.drafts import NEW_JOB, keep_draft, take_draft
from desktop_queue.core.errors import InvalidInput, StoreError
from desktop_queue.core.fingerprint import canonical_json
from desktop_queue.core.inputspec import FieldType, InputSpec, spec_for, title_for
from desktop_queue.core.model import Priority
from desktop_queue.core.queue import MAX_BATCH, MAX_BATCH_BYTES, MAX_INPUT_BYTES
from desktop_queue.core.schedules import JobTemplate
from desktop_queue.core.wording import sentence
from desktop_queue.providers.profiles import Preset, ProfileSet
from desktop_queue.providers.setup import ProfileConfig
from desktop_queue.ui.controller import Controller
from desktop_queue.ui.forms import FieldProblem, InputForm, add_labelled_row, error_colour, mnemonics
from desktop_queue.ui.icons import icon
from desktop_queue.ui.run_when import RunWhen
from desktop_queue.ui.settings import APPLICATION, MAX_CONCURRENCY, ORGANIZATION, Preferences

log = logging.getLogger(__name__)

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


def default_title(payload: Any, spec: InputSpec | None = None) -> str | None:
    """The first line of the input's prompt, shortened (None: let the queue name the job).

    The rule is :func:`desktop_queue.core.inputspec.title_for` (the CLI's too). Without
    it every job submitted from the dialog was listed as "demo job".
    """
    return title_for(spec, payload)


def format_size(size: int) -> str:
    """A byte count for people: "812 bytes", "3.2 KiB", "1.0 MiB"."""
    if size < 1024:
        return f"{size:,} byte{'s' if size != 1 else ''}"
    if size < 1024 * 1024:
        return f"{size / 1024:.1f} KiB"
    return f"{size / (1024 * 1024):.1f} MiB"


def size_text(size: int) -> str:
    """The live size line of an input: "3.2 KiB of 1 MiB"."""
    return f"{format_size(size)} of 1 MiB"


class SizeLabel(QLabel):
    """The input's size against the 1 MiB limit, red above it."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("sizeLabel")
        self.setToolTip("The size of the job's input (as stored) against the 1 MiB limit")
        self.over = False
        self.show_size(0)

    def show_size(self, size: int, largest: bool = False) -> None:
        """Shows ``size`` (``largest``: of a batch's largest input)."""
        self.over = size > MAX_INPUT_BYTES
        self.setText(("largest input: " if largest else "") + size_text(size) + (" — too large" if self.over else ""))
        self.setStyleSheet(f"color: {error_colour(self)}; font-weight: bold;" if self.over else "")
        self.setAccessibleDescription(self.text())


BATCH_FORMATS = (
    ("Detect", None),
    ("One prompt a line", BatchFormat.TEXT),
    ("CSV (a header row of field names)", BatchFormat.CSV),
    ("JSON Lines (one input object a line)", BatchFormat.JSONL),
)
#: problems listed in the batch preview (the rest are counted)
BATCH_PROBLEMS_SHOWN = 5


class BatchPage(QWidget):
    """The New dialog's Batch tab: pasted lines or an imported file, and a preview.

    Signals:
        changed(): the text or the format changed.
    """

    changed = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("batchPage")
        self.file_name: str | None = None
        explain = QLabel(
            "One job a line: paste prompts (each goes into the form's prompt, the form's other fields "
            "are the template), or import a CSV file (a column per field, with a header row) or JSON Lines "
            "(one whole input object a line). All jobs are created in one commit, or none."
        )
        explain.setWordWrap(True)
        self.text = QPlainTextEdit()
        self.text.setObjectName("batchEditor")
        self.text.setTabChangesFocus(True)
        self.text.setLineWrapMode(QPlainTextEdit.LineWrapMode.NoWrap)
        self.text.setPlaceholderText("A haiku about queues\nA limerick about retries\nA sonnet about dead letters")
        self.format = QComboBox()
        self.format.setObjectName("batchFormat")
        for label, fmt in BATCH_FORMATS:
            self.format.addItem(label, fmt)
        self.import_button = QPushButton("&Import file…")
        self.import_button.setObjectName("batchImport")
        self.summary = QLabel()
        self.summary.setObjectName("batchSummary")
        self.summary.setWordWrap(True)
        self.problems = QLabel()
        self.problems.setObjectName("batchProblems")
        self.problems.setWordWrap(True)
        self.problems.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        row = QHBoxLayout()
        lines_label = QLabel("&Lines are:")
        lines_label.setBuddy(self.format)
        row.addWidget(lines_label)
        row.addWidget(self.format, 1)
        row.addWidget(self.import_button)
        layout = QVBoxLayout(self)
        layout.addWidget(explain)
        layout.addLayout(row)
        layout.addWidget(self.text, 1)
        layout.addWidget(self.summary)
        layout.addWidget(self.problems)
        self.text.textChanged.connect(self.changed)
        self.format.currentIndexChanged.connect(self.changed)
        self.import_button.clicked.connect(self._choose_file)

    def chosen_format(self) -> BatchFormat:
        chosen = self.format.currentData()  # (Qt hands the enum back as a plain str)
        if isinstance(chosen, str) and chosen in BatchFormat.__members__.values():
            return BatchFormat(chosen)
        return detect_format(self.file_name, self.text.toPlainText())

    def _choose_file(self) -> None:
        path, _ = QFileDialog.getOpenFileName(
            self,
            "Import a batch",
            "",
            "Batch files (*.txt *.csv *.jsonl *.ndjson);;All files (*)",
        )
        if path:
            self.import_file(path)

    def import_file(self, path: str) -> str | None:
        """Reads a batch file into the editor; the reason if it cannot (the editor is kept)."""
        try:
            with open(path, "rb") as fh:
                data = fh.read(MAX_BATCH_BYTES + 1)
        except OSError as exc:
            return f"cannot read {path}: {exc.strerror or exc}"
        if len(data) > MAX_BATCH_BYTES:
            return f"{path} is over the batch limit of 64 MiB"
        try:
            text = data.decode("utf-8-sig")
        except UnicodeDecodeError as exc:
            return f"{path} is not UTF-8 text (byte {exc.start})"
        self.file_name = path
        fmt = detect_format(path, text)
        self.format.blockSignals(True)
        self.format.setCurrentIndex(max(0, self.format.findData(fmt)))
        self.format.blockSignals(False)
        self.text.setPlainText(text)
        return None

    def show_read(self, read: BatchRead, fmt: BatchFormat) -> None:
        how = {
            BatchFormat.TEXT: "one prompt a line",
            BatchFormat.CSV: "CSV",
            BatchFormat.JSONL: "JSON Lines",
        }[fmt]
        self.summary.setText(f"Read as {how}: {read.summary()}.")
        shown = [str(p) for p in read.problems[:BATCH_PROBLEMS_SHOWN]]
        more = len(read.problems) - len(shown)
        if more > 0:
            shown.append(f"… and {more:,} more")
        self.problems.setText("\n".join(shown))
        self.problems.setVisible(bool(shown))
        self.summary.setStyleSheet(f"color: {error_colour(self)};" if read.problems else "")


#: QSettings key of the kind last submitted (the New dialog opens on it)
LAST_KIND_KEY = "submit/last_kind"
#: the kind of a first job once a provider profile is set up (before any kind was submitted)
FIRST_PROVIDER_KIND = "openai.chat"


class SubmitDialog(QDialog):
    """Submit jobs: a kind, its input (a form from the provider's description, JSON for any
    kind, or a batch of lines), title, priority and attempts.

    The JSON tab is the input as it will be stored; the form writes it, and editing the
    JSON updates the form when the form can show it. After ``accept()``,
    :attr:`submit_result` holds what the submission did (``duplicate`` included) and,
    for several jobs, :attr:`batch_results` every result.

    Signals:
        submitted(object): the :class:`SubmitResult` of a submission (of a batch: its
            first new job).
        batch_submitted(list): every :class:`SubmitResult` of a batch (or of a count).
    """

    submitted = Signal(object)
    batch_submitted = Signal(list)
    schedule_requested = Signal(object)

    FORM_TAB, JSON_TAB, BATCH_TAB = 0, 1, 2

    def __init__(self, controller: Controller, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("New job")
        self.setObjectName("submitDialog")
        self.controller = controller
        self.submit_result: SubmitResult | None = None
        self.batch_results: list[SubmitResult] = []
        self.batch_read: BatchRead | None = None
        self._syncing = False
        self._pristine = True  # nothing typed yet: say what is missing without an error mark
        self._ended = False  # submitted or closed (done() was called)
        self._fits = True  # the JSON tab's input is what the form shows
        self._clean_json = ""  # the JSON of an untouched form (nothing typed)
        self._json_dirty = False  # the JSON tab lags the form (written when shown)
        self.spec: InputSpec | None = None
        self.form: InputForm | None = None

        self.kind = QComboBox()
        self.kind.setObjectName("kindChooser")
        for kind in sorted(controller.providers, key=lambda k: (k != "demo", k)):
            self.kind.addItem(kind, kind)
        last = QSettings(ORGANIZATION, APPLICATION).value(LAST_KIND_KEY)
        if not isinstance(last, str) and controller.configured_profiles():
            last = FIRST_PROVIDER_KIND  # a first job once a provider is set up: one for it, not the demo
        if isinstance(last, str) and self.kind.findData(last) >= 0:
            self.kind.setCurrentIndex(self.kind.findData(last))  # people submit the same kind again
        self.form_note = InlineMessage()
        self.form_note.setObjectName("formNote")
        self.form_note.hide()
        self.form_scroll = QScrollArea()
        self.form_scroll.setWidgetResizable(True)
        self.form_scroll.setFrameShape(QFrame.Shape.NoFrame)
        self.form_scroll.setObjectName("formScroll")
        # the form sits on the tab page's own background, not the scroll area's darker one
        self.form_scroll.setStyleSheet(
            "QScrollArea#formScroll, QScrollArea#formScroll > QWidget > QWidget { background: transparent; }"
        )
        form_page = QWidget()
        form_layout = QVBoxLayout(form_page)
        form_layout.addWidget(self.form_note)
        form_layout.addWidget(self.form_scroll, 1)
        self.editor = _mono_editor()
        self.editor.setObjectName("inputEditor")
        self.editor.setPlaceholderText('{"prompt": "…"}')
        self.batch = BatchPage()
        self.tabs = QTabWidget()
        self.tabs.addTab(form_page, "&Form")
        self.tabs.addTab(self.editor, "&JSON")
        self.tabs.addTab(self.batch, "&Batch")
        self.title = QLineEdit()
        self.title.setPlaceholderText("Optional: how this job is listed (default: the start of the prompt)")
        self.priority = QComboBox()
        self.priority.addItem("Background", str(Priority.BACKGROUND))
        self.priority.addItem("Interactive (runs first)", str(Priority.INTERACTIVE))
        self.max_attempts = QSpinBox()
        self.max_attempts.setRange(1, 100)
        self.max_attempts.setValue(controller.queue.policy.max_attempts)
        self.size_label = SizeLabel()
        self.message = InlineMessage()
        self.message.setObjectName("submitMessage")
        self.buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Cancel)
        self.cancel_button = self.buttons.button(QDialogButtonBox.StandardButton.Cancel)
        self.submit_button = self.buttons.addButton("&Submit", QDialogButtonBox.ButtonRole.AcceptRole)
        self.submit_button.setToolTip("Submit (Ctrl+Enter from anywhere in the dialog)")
        self.schedule_button = self.buttons.addButton("Sc&hedule…", QDialogButtonBox.ButtonRole.ActionRole)
        self.schedule_button.setObjectName("scheduleJob")
        self.schedule_button.setToolTip("Run this job on a cron schedule instead of once now: choose when next")
        self.schedule_button.clicked.connect(self.schedule_this)

        top = QFormLayout()
        top.addRow("&Kind:", self.kind)
        options = QFormLayout()
        options.addRow("&Title:", self.title)
        lane = QHBoxLayout()
        lane.addWidget(self.priority, 1)
        attempts_label = QLabel("&Max attempts:")
        attempts_label.setBuddy(self.max_attempts)
        lane.addWidget(attempts_label)
        lane.addWidget(self.max_attempts)
        priority_label = add_labelled_row(options, "P&riority:", lane, self.priority)
        self.run_when = RunWhen(controller.queue.clock.now)
        options.addRow("R&un:", self.run_when)
        #: the Alt letters of the dialog's own controls: a kind's form gives its fields others
        labels = [top.labelForField(self.kind), options.labelForField(self.title), options.labelForField(self.run_when)]
        self._reserved = mnemonics(
            [
                *(label.text() for label in (*labels, priority_label, attempts_label) if isinstance(label, QLabel)),
                *(button.text() for button in self.buttons.buttons()),
                *(self.tabs.tabText(i) for i in range(self.tabs.count())),
            ]
        )
        status = QHBoxLayout()
        status.addWidget(self.message, 1)
        status.addWidget(self.size_label, 0, Qt.AlignmentFlag.AlignTop)
        layout = QVBoxLayout(self)
        layout.addLayout(top)
        layout.addWidget(self.tabs, 1)
        layout.addLayout(options)
        layout.addLayout(status)
        layout.addWidget(self.buttons)
        self.setMinimumSize(520, 420)  # fits an 800x500 screen; the form scrolls
        self.resize(680, 680)
        # only once the buttons are in the dialog: set earlier, Qt made Cancel the default
        # and Enter threw the user's input away
        self.submit_button.setDefault(True)
        QWidget.setTabOrder(self.max_attempts, self.submit_button)
        QWidget.setTabOrder(self.submit_button, self.cancel_button)

        self._batch_timer = QTimer(self)
        self._batch_timer.setObjectName("batchPreviewTimer")
        self._batch_timer.setSingleShot(True)
        self._batch_timer.setInterval(150)
        self._batch_timer.timeout.connect(self.update_batch)
        self.kind.currentIndexChanged.connect(self._kind_changed)
        self.editor.textChanged.connect(self._editor_changed)
        self.tabs.currentChanged.connect(self._tab_changed)
        self.batch.changed.connect(self._batch_changed)
        self.title.textEdited.connect(self._touch)
        self.buttons.accepted.connect(self.try_submit)
        self.buttons.rejected.connect(self.reject)
        self._kind_changed()
        self._restore_draft()
        self._focus_first()

    # ----------------------------------------------------------------- a draft

    def draft(self) -> dict[str, str] | None:
        """What was typed and not submitted (kind, the input as JSON, title, batch lines), or None."""
        if not self.has_typed_input():
            return None
        return {
            "kind": self.current_kind(),
            "input": self.json_text(),
            "title": self.title.text(),
            "batch": self.batch.text.toPlainText(),
        }

    def put_aside(self) -> None:
        """Closes without asking, keeping what was typed for the next New job.

        For a logout, a shutdown or ``kill``: nobody is there to answer "Discard this
        prompt?", and a question left open kept the window from quitting until the
        session killed it.
        """
        if self._ended:
            return  # (submitted or closed already, its deletion still to come)
        draft = self.draft()
        if draft is not None:
            try:  # (in the data dir, not the settings file: see core.drafts)
                keep_draft(self.controller.queue.data_dir, NEW_JOB, draft)
            except StoreError as exc:
                log.warning("the prompt being written in New job could not be kept: %s", exc)
        self.done(QDialog.DialogCode.Rejected.value)  # (done, not reject: nothing asks)

    def done(self, result: int) -> None:
        self._ended = True
        super().done(result)

    def _restore_draft(self) -> None:
        """Opens on the draft :meth:`put_aside` kept, once (then it is the dialog's to keep or lose)."""

        def available(draft: dict[str, str]) -> bool:
            if self.kind.findData(draft.get("kind", "")) >= 0:
                return True
            # (its provider profile is gone for now: the draft stays for when it is back)
            log.warning(
                "the New job draft is of kind %s, which is not available here: kept for later", draft.get("kind")
            )
            return False

        draft = take_draft(self.controller.queue.data_dir, NEW_JOB, accept=available)
        if draft is None:
            return
        kind, text = draft.get("kind", ""), draft.get("input", "")
        title, batch = draft.get("title", ""), draft.get("batch", "")
        self.kind.setCurrentIndex(self.kind.findData(kind))
        self.editor.setPlainText(text)
        self.title.setText(title)
        self.batch.text.setPlainText(batch)
        if batch.strip():
            self.tabs.setCurrentIndex(self.BATCH_TAB)
        self._pristine = False
        self.form_note.show_info("This is what you were writing when Desktop Queue was last closed.", ok=True)
        self.form_note.show()

    # ----------------------------------------------------------------- kinds and forms

    def current_kind(self) -> str:
        return str(self.kind.currentData())

    def _focus_first(self) -> None:
        target = self.form.first_editor() if self.form is not None else None
        (target or self.editor).setFocus()

    def _kind_changed(self) -> None:
        kind = self.current_kind()
        provider = self.controller.providers.get(kind)
        carried = self._prompt_text()
        old = self.form_scroll.takeWidget()
        if old is not None:
            old.deleteLater()
        self.spec = spec_for(provider, self.controller.profiles)  # every configured profile, the default picked
        self.form = None
        self._fits = True
        self.form_note.hide()
        if self.spec is not None:
            self.form = InputForm(self.spec, provider, reserved=self._reserved)
            self.form.changed.connect(self._form_touched)
            self.form.changed.connect(self._form_changed)
            self.form.submit_requested.connect(self.try_submit)
            self.form_scroll.setWidget(self.form)
            self._clean_json = self._dump(self.spec.build(self.spec.fresh()))
            if carried and self.spec.prompt_field:
                self.form.set_value(self.spec.prompt_field, carried)
            self.tabs.setTabEnabled(self.FORM_TAB, True)
            if self.tabs.currentIndex() != self.BATCH_TAB:
                self.tabs.setCurrentIndex(self.FORM_TAB)
            self._json_dirty = True
            self.flush_json()  # a new kind: its JSON at once (small), so the tab never shows another kind's
            self._validate()
            QWidget.setTabOrder(self.kind, self.tabs)
        else:
            self._clean_json = ""
            empty = QLabel(f"{kind} gives no description of its input: write it on the JSON tab.")
            empty.setWordWrap(True)
            empty.setAlignment(Qt.AlignmentFlag.AlignCenter)
            self.form_scroll.setWidget(empty)
            self.tabs.setTabEnabled(self.FORM_TAB, False)
            if self.tabs.currentIndex() == self.FORM_TAB:
                self.tabs.setCurrentIndex(self.JSON_TAB)
            self._validate()
        self._batch_changed()

    def _prompt_text(self) -> str | None:
        if self.form is None or self.spec is None or not self.spec.prompt_field:
            return None
        try:
            text = self.form.values().get(self.spec.prompt_field)
        except FieldProblem:
            return None
        return text if isinstance(text, str) and text else None

    @staticmethod
    def _dump(payload: Any) -> str:
        return json.dumps(payload, indent=2, ensure_ascii=False)

    def _write_json(self) -> None:
        """Marks the JSON tab out of date; writes it now if it is showing.

        Writing a large input into the JSON tab on every keystroke made typing in a
        long prompt lag: it is written when the tab is shown (or :meth:`flush_json`).
        """
        self._json_dirty = self.form is not None
        if self.tabs.currentIndex() == self.JSON_TAB:
            self.flush_json()
        self._validate()

    def flush_json(self) -> None:
        """Writes the form's input into the JSON tab (unless a field's own text is broken)."""
        if self.form is None or not self._json_dirty or not self._fits:
            return
        try:
            text = self._dump(self.form.payload())
        except FieldProblem:
            return
        self._json_dirty = False
        self._syncing = True
        try:
            if self.editor.toPlainText() != text:
                self.editor.setPlainText(text)
        finally:
            self._syncing = False

    def json_text(self) -> str:
        """The JSON tab's text, brought up to date with the form first."""
        self.flush_json()
        return self.editor.toPlainText()

    def _touch(self) -> None:
        self._pristine = False

    def _form_changed(self) -> None:
        if self._syncing:
            return
        self._write_json()
        if self.batch.text.toPlainText().strip():
            self._batch_changed()

    def _editor_changed(self) -> None:
        if self._syncing:
            return
        self._pristine = False
        if self.form is not None:
            try:
                reason = self.form.load(parse_json(self.editor.toPlainText()))
            except InvalidInput as exc:
                reason = str(exc)
            self._fits = reason is None
            self.form.setEnabled(self._fits)
            if reason is None:
                self.form_note.hide()
            else:
                self.form_note.show_info(
                    f"The JSON tab's input does not fit this form ({reason}); edit it on the JSON tab.", ok=False
                )
                self.form_note.show()
        self._validate()

    def _tab_changed(self, index: int) -> None:
        batch = index == self.BATCH_TAB
        self.title.setEnabled(not batch)
        self.title.setPlaceholderText(
            "Each job of a batch is listed by the start of its prompt"
            if batch
            else "Optional: how this job is listed (default: the start of the prompt)"
        )
        if index == self.JSON_TAB:
            self.flush_json()
        if batch:
            self.update_batch()
        else:
            self._validate()

    # ----------------------------------------------------------------- the input

    def _from_form(self) -> bool:
        """True while the form is the input (the JSON tab then only mirrors it)."""
        return self.form is not None and self._fits

    def payload(self) -> Any:
        """The input as it stands; raises :class:`InvalidInput` if it is not acceptable."""
        if self.form is not None and self._fits:
            problems = self.form.problems()
            if problems:
                raise InvalidInput(problems[0])
            payload: Any = self.form.payload()
        else:
            payload = parse_json(self.editor.toPlainText())
        size = len(canonical_json(payload))
        self.size_label.show_size(size)
        if size > MAX_INPUT_BYTES:
            raise InvalidInput(f"the input is {size:,} bytes; the limit is {MAX_INPUT_BYTES:,} bytes (1 MiB)")
        self.controller.validate(self.current_kind(), payload)
        if self.spec is not None and self._fits and self.form is not None:
            for f in self.spec.fields:
                value = self.form.values().get(f.name)
                if f.required and isinstance(value, str) and not value.strip():
                    raise InvalidInput(f"{f.title} is empty")
        return payload

    def payloads(self) -> list[Any]:
        """Every input the Form or JSON tab makes (several when the form has a count)."""
        payload = self.payload()
        if self.form is not None and self._fits and self.spec is not None and self.spec.count_field:
            return self.form.payloads()
        return [payload]

    def _show_size_of_text(self) -> None:
        self.size_label.show_size(len(self.editor.toPlainText().encode("utf-8")))

    def _validate(self) -> bool:
        if self._syncing:
            return True
        if self.tabs.currentIndex() == self.BATCH_TAB:
            return self.update_batch()
        try:
            payloads = self.payloads()
        except QueueError as exc:
            if not self.size_label.over and not self._from_form():
                try:
                    self.size_label.show_size(len(canonical_json(parse_json(self.editor.toPlainText()))))
                except InvalidInput:
                    self._show_size_of_text()
            if self._pristine:
                self.message.show_info(sentence(f"To submit: {exc}"), ok=False)
            else:
                self.message.show_error(str(exc))
            if self.form is not None:
                self.form.mark(None if self._pristine or not self._from_form() else str(exc))
            self.submit_button.setText("&Submit")
            return False
        if self.form is not None:
            self.form.mark(None)
        n = len(payloads)
        self.submit_button.setText("&Submit" if n == 1 else f"&Submit {n} jobs")
        if n > 1:
            unit = self.spec.field(self.spec.count_field).unit if self.spec and self.spec.count_field else ""
            each = f", one {unit} each" if unit else ""
            self.message.show_info(f"Ready: {n} jobs will be created in one commit{each}.")
        else:
            self.message.show_info("Ready to submit. The job is saved to disk before it is listed.")
        return True

    # ----------------------------------------------------------------- batch

    def _batch_changed(self) -> None:
        self._batch_timer.start()
        if self.batch.text.toPlainText().strip():
            self._pristine = False

    def batch_template(self) -> dict[str, Any] | None:
        """The values a batch line fills in (the form's, else the spec's defaults)."""
        if self.spec is None:
            return None
        if self.form is not None:
            try:
                return self.form.values()
            except FieldProblem:
                pass
        return self.spec.fresh()

    def update_batch(self) -> bool:
        """Reads the Batch tab's lines now and shows the preview; True if they can be submitted."""
        self._batch_timer.stop()
        text = self.batch.text.toPlainText()
        provider = self.controller.providers.get(self.current_kind())
        fmt = self.batch.chosen_format()
        read = read_batch(
            text,
            fmt,
            self.spec,
            template=self.batch_template(),
            validate=getattr(provider, "validate", None),
        )
        self.batch_read = read
        self.batch.show_read(read, fmt)
        if self.tabs.currentIndex() != self.BATCH_TAB:
            return read.ok
        n = len(read.items)
        ok = read.ok and n <= MAX_BATCH
        self.submit_button.setText(f"&Submit {n:,} job{'s' if n != 1 else ''}" if ok else "&Submit")
        self.size_label.show_size(max((len(canonical_json(i.payload)) for i in read.items), default=0), largest=True)
        if ok:
            self.message.show_info(f"Ready: {n:,} job{'s' if n != 1 else ''}, created in one commit.")
        elif not text.strip():
            self.message.show_info("To submit: paste one prompt a line, or import a file.", ok=False)
        else:
            self.message.show_error(read.summary())
        return ok

    # ----------------------------------------------------------------- submit and discard

    def try_submit(self) -> bool:
        """Submits if the input is valid; otherwise explains why inline and creates nothing."""
        if self.tabs.currentIndex() == self.BATCH_TAB:
            if self.run_when.current_mode() != "now":
                self.message.show_error("A start time applies to one job: choose Run now for a batch.")
                return False
            return self._submit_batch()
        try:
            payloads = self.payloads()
            run_after = self.run_when.run_after()
            if run_after is not None and len(payloads) > 1:
                raise InvalidInput("a start time applies to one job: choose Run now for several")
            if len(payloads) > 1:
                title = self.title.text().strip() or default_title(payloads[0], self.spec)
                titles = [f"{title} ({i} of {len(payloads)})" if title else None for i in range(1, len(payloads) + 1)]
                return self._submit_many(payloads, titles)
            payload = payloads[0]
            result = self.controller.submit(
                self.current_kind(),
                payload,
                title=self.title.text().strip() or default_title(payload, self.spec),
                priority=str(self.priority.currentData()),
                max_attempts=self.max_attempts.value(),
                run_after=run_after,
            )
        except QueueError as exc:
            self._pristine = False
            self.message.show_error(str(exc))
            return False
        self.submit_result = result
        self._remember_kind()
        self.submitted.emit(result)
        self.accept()
        return True

    def schedule_this(self) -> bool:
        """Hands the job as written to a new schedule (the window opens its dialog); submits nothing.

        The window hides this dialog meanwhile, and closes it once the schedule is saved,
        or shows it again, with what was typed, when the schedule is cancelled.

        Returns whether it did: an input that is not valid, a batch or a count of several,
        or a start time is explained inline instead (a schedule runs one job at its times).
        """
        try:
            if self.tabs.currentIndex() == self.BATCH_TAB:
                raise InvalidInput("a schedule runs one job each time: write it on the Form or JSON tab")
            if self.run_when.current_mode() != "now":
                raise InvalidInput("a schedule starts its jobs at its own times: choose Run now, then its cron")
            payloads = self.payloads()
            if len(payloads) != 1:
                raise InvalidInput("a schedule runs one job each time: make it one")
            payload = payloads[0]
            validate = getattr(self.controller.providers.get(self.current_kind()), "validate", None)
            if validate is not None:
                validate(payload)
        except QueueError as exc:
            self._pristine = False
            self.message.show_error(str(exc))
            return False
        template = JobTemplate(
            kind=self.current_kind(),
            input=payload,
            title=self.title.text().strip() or default_title(payload, self.spec),
            priority=str(self.priority.currentData()),
            max_attempts=self.max_attempts.value(),
        )
        self._remember_kind()
        self.schedule_requested.emit(template)  # (the window hides this dialog until the schedule is saved)
        return True

    def _remember_kind(self) -> None:
        QSettings(ORGANIZATION, APPLICATION).setValue(LAST_KIND_KEY, self.current_kind())

    def _submit_batch(self) -> bool:
        if not self.update_batch():
            self._pristine = False
            read = self.batch_read
            if read is not None and not read.items and not read.problems:
                self.message.show_error("Nothing to submit: paste one prompt a line, or import a file.")
            return False
        assert self.batch_read is not None
        items = self.batch_read.items
        return self._submit_many([i.payload for i in items], [i.title for i in items])

    def _submit_many(self, payloads: list[Any], titles: list[str | None]) -> bool:
        try:
            results = self.controller.submit_many(
                self.current_kind(),
                payloads,
                titles=titles,
                priority=str(self.priority.currentData()),
                max_attempts=self.max_attempts.value(),
            )
        except QueueError as exc:
            self.message.show_error(str(exc))
            return False
        self.batch_results = results
        self.submit_result = next((r for r in results if not r.duplicate), results[0])
        self._remember_kind()
        self.batch_submitted.emit(results)
        self.submitted.emit(self.submit_result)
        self.accept()
        return True

    def keyPressEvent(self, event: QKeyEvent) -> None:  # noqa: N802 (Qt's name)
        """Ctrl+Enter submits from anywhere (Enter alone is a new line in a prompt)."""
        if event.key() in (Qt.Key.Key_Return, Qt.Key.Key_Enter) and (
            event.modifiers() & Qt.KeyboardModifier.ControlModifier
        ):
            event.accept()
            self.try_submit()
            return
        super().keyPressEvent(event)

    def _typed_in_form(self) -> bool:
        """True if a text field holds something people wrote (a prompt, a schema).

        A profile, model or number picked is no reason to ask before closing, nor to
        turn "what is missing" into an error.
        """
        if self.form is None or self.spec is None:
            return False
        fresh = self.spec.fresh()
        for f in self.spec.fields:
            if f.type not in (FieldType.TEXT, FieldType.STRING, FieldType.JSON) or f.choices_from is not None:
                continue
            try:
                value = self.form.editors[f.name].value()
            except FieldProblem:
                return True
            if value not in (None, "") and value != fresh.get(f.name):
                return True
        return False

    def _form_touched(self) -> None:
        if self._typed_in_form():
            self._pristine = False

    def has_typed_input(self) -> bool:
        """True if closing would throw away something the user typed."""
        if self._pristine:
            return False
        if self.title.text().strip() or self.batch.text.toPlainText().strip():
            return True
        if self._from_form():
            return self._typed_in_form()
        text = self.editor.toPlainText()
        return bool(text.strip()) and text != self._clean_json

    def reject(self) -> None:
        """Escape, Cancel or the close button: asks first when typed input would be lost."""
        if self.has_typed_input() and not confirm(
            self,
            "Discard this prompt?",
            "Discard this prompt? What you typed in this New job dialog has not been submitted and will be lost.",
            "Discard",
            "Keep editing",
        ):
            return
        super().reject()


# --------------------------------------------------------------------------- replay


#: finding level -> (icon, colour) of the replay preview (an icon per level: never colour alone)
PREVIEW_LOOK = {
    "fail": ("state-dead", "#c0392b"),
    "wait": ("event-throttled", "#b9770e"),
    "info": ("event-info", ""),
    "ok": ("state-succeeded", "#1e8449"),
}


def preview_html(preview: Any) -> str:
    """The replay preview as the dialog shows it: the verdict, how the original ended, the findings."""
    from html import escape

    def line(level: str, text: str, bold: bool = False) -> str:
        icon_name, colour = PREVIEW_LOOK.get(level, ("event-info", ""))
        style = f' style="color:{colour}"' if colour and bold else ""
        body = f"<b>{escape(text)}</b>" if bold else escape(text)
        # (◷, not ⏳: Linux desktops without an emoji font draw an empty box for that)
        mark = {"fail": "✖", "wait": "◷", "info": "ℹ", "ok": "✔"}.get(level, "•")  # noqa: RUF001
        mark_style = f' style="color:{colour}"' if colour else ""
        return f'<tr><td valign="top"{mark_style}>{mark}&nbsp;</td><td{style}>{body}</td></tr>'

    rows = [line(str(preview.verdict), preview.headline, bold=True)]
    rows.append(line("info", sentence(f"The original ended {preview.ended}")))
    rows.extend(line(str(f.level), sentence(f.text)) for f in preview.findings)
    rows.append(line("info", f"The new job will be called “{preview.title}”."))
    return "<table cellspacing='2'>" + "".join(rows) + "</table>"


class ReplayDialog(QDialog):
    """Preview of a replay: the input, edited with the kind's form (or as JSON), and what will happen.

    The form is the New dialog's for the kind (:func:`~desktop_queue.core.inputspec.spec_for`:
    every configured profile, the model list following it), loaded with the original's
    input; the JSON tab beside it is the input as it will be stored, and editing either
    updates the other where the form can show the input. What will happen is
    :func:`desktop_queue.core.preview.preview_replay`: how the original ended, and what
    would make the new job fail again or wait (an auth error with the same key, a
    profile that cannot run, an input still invalid), updated as the input is edited.
    Nothing is queued until Replay is pressed.

    After ``accept()``, :attr:`new_job` is the job created.
    """

    FORM_TAB, JSON_TAB = 0, 1

    def __init__(self, controller: Controller, job: Job, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle(f"Replay “{job.title}”")
        self.setObjectName("replayDialog")
        self.controller = controller
        self.job = job
        self.new_job: Job | None = None
        self._original = json.dumps(job.input, indent=2, ensure_ascii=False)
        self._syncing = False
        self._fits = False  # the JSON tab's input is what the form shows
        self._json_dirty = False  # the JSON tab lags the form (written when shown)
        self._baseline: Any = None  # the form's input just after loading the original's

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
        self.preview = QLabel()
        self.preview.setObjectName("replayPreview")
        self.preview.setTextFormat(Qt.TextFormat.RichText)
        self.preview.setWordWrap(True)
        self.preview.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.preview.setFrameShape(QFrame.Shape.StyledPanel)
        self.preview.setMargin(8)
        self.preview.setAutoFillBackground(True)
        self.preview.setBackgroundRole(QPalette.ColorRole.AlternateBase)
        self.current_preview: Any = None

        # the form: the New dialog's for this kind, with the original's input in it
        self.spec = spec_for(controller.providers.get(job.kind), controller.profiles)
        self.form: InputForm | None = None
        self.form_note = InlineMessage()
        self.form_note.setObjectName("formNote")
        self.form_note.hide()
        self.form_scroll = QScrollArea()
        self.form_scroll.setWidgetResizable(True)
        self.form_scroll.setFrameShape(QFrame.Shape.NoFrame)
        self.form_scroll.setObjectName("formScroll")
        self.form_scroll.setStyleSheet(
            "QScrollArea#formScroll, QScrollArea#formScroll > QWidget > QWidget { background: transparent; }"
        )
        form_page = QWidget()
        form_layout = QVBoxLayout(form_page)
        form_layout.addWidget(self.form_note)
        form_layout.addWidget(self.form_scroll, 1)
        self.tabs = QTabWidget()
        self.tabs.addTab(form_page, "&Form")
        self.tabs.addTab(self.editor, "&JSON")
        self.buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Cancel)
        self.replay_button = self.buttons.addButton("&Replay", QDialogButtonBox.ButtonRole.AcceptRole)
        self.replay_button.setToolTip("Queue the new job (Ctrl+Enter from anywhere in the dialog)")
        input_label = QLabel("&Input:")
        input_label.setBuddy(self.tabs)
        if self.spec is not None:
            # (its fields' Alt letters clear of the dialog's own)
            reserved = mnemonics(
                [
                    *(self.tabs.tabText(i) for i in range(self.tabs.count())),
                    *(button.text() for button in self.buttons.buttons()),
                    input_label.text(),
                ]
            )
            self.form = InputForm(self.spec, controller.providers.get(job.kind), reserved=reserved)
            self.form.setObjectName("replayForm")
            count = self.spec.count_field
            if count is not None:  # a replay is one job: no count
                self.form.main.setRowVisible(self.form.editors[count].row, False)
            self.form_scroll.setWidget(self.form)
            self._fits = self._load_form(job.input)
            # the form as loaded stands for the original input exactly (defaults it spells out included)
            self._baseline = self._form_payload() if self._fits else None
            self.form.changed.connect(self._form_changed)
            self.form.submit_requested.connect(self.try_replay)
        else:
            empty = QLabel(f"{job.kind} gives no description of its input: edit it on the JSON tab.")
            empty.setWordWrap(True)
            empty.setAlignment(Qt.AlignmentFlag.AlignCenter)
            self.form_scroll.setWidget(empty)
            self.tabs.setTabEnabled(self.FORM_TAB, False)
        self.tabs.setCurrentIndex(self.FORM_TAB if self._fits else self.JSON_TAB)

        layout = QVBoxLayout(self)
        layout.addWidget(explain)
        heading = QLabel("What will happen")
        font = heading.font()
        font.setBold(True)
        heading.setFont(font)
        layout.addWidget(heading)
        layout.addWidget(self.preview)
        layout.addWidget(input_label)
        layout.addWidget(self.tabs, 1)
        layout.addWidget(self.message)
        layout.addWidget(self.buttons)
        self.resize(680, 720)
        self.replay_button.setDefault(True)  # after the layout (see SubmitDialog)
        self.cancel_button = self.buttons.button(QDialogButtonBox.StandardButton.Cancel)
        last = self.form.last_editor() if self.form is not None and self._fits else None
        QWidget.setTabOrder(last or self.editor, self.replay_button)
        QWidget.setTabOrder(self.replay_button, self.cancel_button)
        self.setMinimumSize(480, 420)  # fits an 800x500 screen; the form scrolls
        first = self.form.first_editor() if self.form is not None and self._fits else None
        (first or self.editor).setFocus()
        self.editor.textChanged.connect(self._editor_changed)
        self.tabs.currentChanged.connect(self._tab_changed)
        self.buttons.accepted.connect(self.try_replay)
        self.buttons.rejected.connect(self.reject)
        self._validate()

    # ----------------------------------------------------------------- form and JSON

    def _load_form(self, payload: Any) -> bool:
        """Shows ``payload`` in the form; False (and a note) when the form cannot show it exactly."""
        assert self.form is not None
        reason = self.form.load(payload)
        self.form.setEnabled(reason is None)
        if reason is None:
            self.form_note.hide()
        else:
            self.form_note.show_info(f"This input does not fit the form ({reason}); edit it on the JSON tab.", ok=False)
            self.form_note.show()
        return reason is None

    def _from_form(self) -> bool:
        return self.form is not None and self._fits

    def _form_payload(self) -> Any:
        """The form's input, with the original's copy number kept (a count makes numbered copies)."""
        assert self.form is not None
        problems = self.form.problems()
        if problems:
            raise InvalidInput(problems[0])
        payload: Any = self.form.payload()
        original = self.job.input
        if self.spec is not None and self.spec.count_field and isinstance(original, dict) and "copy" in original:
            payload = {**payload, "copy": original["copy"]}
        return payload

    def payload(self) -> Any:
        """The new job's input as it stands; raises :class:`InvalidInput` if it is not readable.

        A form left as loaded gives the original input itself (not a rewrite of it that
        leaves out the defaults it spelled out), so an unedited replay is one.
        """
        if self._from_form():
            payload = self._form_payload()
            return self.job.input if self._baseline is not None and payload == self._baseline else payload
        return parse_json(self.editor.toPlainText())

    def _form_changed(self) -> None:
        if self._syncing:
            return
        self._json_dirty = True
        if self.tabs.currentIndex() == self.JSON_TAB:
            self.flush_json()
        self._validate()

    def flush_json(self) -> None:
        """Writes the form's input into the JSON tab (unless a field's own text is broken)."""
        if not self._json_dirty or not self._from_form():
            return
        try:
            text = json.dumps(self.payload(), indent=2, ensure_ascii=False)
        except InvalidInput:
            return
        self._json_dirty = False
        self._syncing = True
        try:
            if self.editor.toPlainText() != text:
                self.editor.setPlainText(text)
        finally:
            self._syncing = False

    def json_text(self) -> str:
        """The JSON tab's text, brought up to date with the form first."""
        self.flush_json()
        return self.editor.toPlainText()

    def _editor_changed(self) -> None:
        if self._syncing:
            return
        if self.form is not None:
            try:
                payload = parse_json(self.editor.toPlainText())
            except InvalidInput as exc:
                self._fits = False
                self.form.setEnabled(False)
                self.form_note.show_info(f"The JSON tab's input is not readable ({exc}); fix it there.", ok=False)
                self.form_note.show()
            else:
                self._syncing = True
                try:
                    self._fits = self._load_form(payload)
                finally:
                    self._syncing = False
                self._json_dirty = False
        self._validate()

    def _tab_changed(self, index: int) -> None:
        if index == self.JSON_TAB:
            self.flush_json()
        self._validate()

    # ----------------------------------------------------------------- preview and replay

    def edited(self) -> bool:
        try:
            return bool(self.payload() != self.job.input)
        except InvalidInput:
            return True

    def _show_preview(self, payload: Any) -> None:
        try:
            preview = self.controller.preview_replay(self.job, None if payload == self.job.input else payload)
        except QueueError as exc:
            self.preview.setText(f"Could not tell what will happen: {exc}")
            return
        self.current_preview = preview
        self.preview.setText(preview_html(preview))

    def keyPressEvent(self, event: QKeyEvent) -> None:  # noqa: N802 (Qt's name)
        """Ctrl+Enter replays from anywhere (Enter alone is a new line in a prompt)."""
        if event.key() in (Qt.Key.Key_Return, Qt.Key.Key_Enter) and (
            event.modifiers() & Qt.KeyboardModifier.ControlModifier
        ):
            event.accept()
            self.try_replay()
            return
        super().keyPressEvent(event)

    def put_aside(self) -> None:
        """Closes without asking (a logout or ``kill``: nobody is there to answer)."""
        if not self.isVisible():
            return  # (closed already, its deletion still to come: done() again would say so twice)
        if self.edited():
            log.info("the window was closed by a signal: the replay being edited was not made")
        self.done(QDialog.DialogCode.Rejected.value)  # (done, not reject: nothing asks)

    def reject(self) -> None:
        """Escape, Cancel or the close button: asks first when the edited input would be lost."""
        if self.edited() and not confirm(
            self,
            "Discard this prompt?",
            "Discard this prompt? Your edits to the input have not been replayed and will be lost.",
            "Discard",
            "Keep editing",
        ):
            return
        super().reject()

    def _validate(self) -> bool:
        if self._syncing:
            return True
        try:
            payload = self.payload()
        except QueueError as exc:
            self.message.show_error(str(exc))
            self.replay_button.setEnabled(False)
            if self.form is not None and self._from_form():
                self.form.mark(str(exc))
            return False
        self._show_preview(payload)
        try:
            self.controller.validate(self.job.kind, payload)
            if self._from_form() and self.spec is not None and self.form is not None:
                values = self.form.values()
                for f in self.spec.fields:
                    value = values.get(f.name)
                    if f.required and isinstance(value, str) and not value.strip():
                        raise InvalidInput(f"{f.title} is empty")
        except QueueError as exc:
            self.message.show_error(str(exc))
            self.replay_button.setEnabled(False)
            if self.form is not None:
                self.form.mark(str(exc) if self._from_form() else None)
            return False
        if self.form is not None:
            self.form.mark(None)
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
        payload = self.payload()
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
        self.api_enabled = QCheckBox(f"Serve the &local API at http://{HOST}:{DEFAULT_PORT} while this window is open")
        self.api_enabled.setChecked(prefs.api_enabled)
        self.api_enabled.setToolTip(
            "The HTTP API of desktop-queue serve, for scripts on this computer only; requests need the "
            "token in the api-token file of the config folder. Provider webhooks go to /webhooks/PROFILE."
        )
        form.addRow(self.api_enabled)
        self._add_store_field(form)
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
        # (no minimum width of its own: one would replace the layout's, which only showing
        # the pages makes known, and the editor would be cut off on the right)
        self.resize(max(760, self.sizeHint().width()), min(700, max(560, self.sizeHint().height())))

    def _add_store_field(self, form: QFormLayout) -> None:
        """Store: the data directory (empty, the default) or a PostgreSQL URL, applied at the next start."""
        from desktop_queue.ui.settings import saved_store_url

        self._saved_store = saved_store_url()
        self.store = QLineEdit(self._saved_store)
        self.store.setObjectName("storeField")
        self.store.setPlaceholderText("the data directory (default), or postgresql://user@host/database")
        self.store.setToolTip(
            "Where the jobs are kept. A PostgreSQL queue is shared by every machine that uses it. "
            "A password in the URL is kept in the OS keyring, never in the settings."
        )
        self.store_test = QPushButton("&Test")
        self.store_test.setToolTip("Connect to this store once, now")
        self.store_test.clicked.connect(self.test_store)
        row = QHBoxLayout()
        row.addWidget(self.store, 1)
        row.addWidget(self.store_test)
        add_labelled_row(form, "&Store:", row, self.store)
        self.store_status = QLabel()
        self.store_status.setObjectName("storeStatus")
        self.store_status.setWordWrap(True)
        form.addRow("", self.store_status)
        self._store_form = form
        form.setRowVisible(self.store_status, False)  # (shown with something to say: no blank row)
        self.store_note = QLabel(
            "A new store is used when Desktop Queue starts again (restart to switch). "
            "--store and DESKTOP_QUEUE_STORE, when given, come first. Copy jobs across with "
            "desktop-queue migrate."
        )
        self.store_note.setWordWrap(True)
        # (at the top of its row: a wrapped label's row is sized for a narrower width first,
        # and centred text then floated below a blank gap under the Store field)
        self.store_note.setAlignment(Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignTop)
        self.store_status.setAlignment(Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignTop)
        form.addRow("", self.store_note)

    def _store_url(self) -> str:
        """The Store field's URL, with the saved password when it is the saved store."""
        from desktop_queue.ui.settings import load_store

        text = self.store.text().strip()
        return load_store() if text and text == self._saved_store else text

    def test_store(self) -> bool:
        """Connects to the Store field's store once; says what happened below the field."""
        from desktop_queue.ui.settings import probe_store

        self.setCursor(Qt.CursorShape.WaitCursor)
        try:
            ok, text = probe_store(self._store_url())
        finally:
            self.unsetCursor()
        self._say_store(text)
        return ok

    def _save_store(self) -> bool:
        """Saves the Store field if it changed; False (and why, below it) if it cannot be."""
        from desktop_queue.providers.openai_compat import KeyringUnavailable
        from desktop_queue.ui.settings import check_store_url, save_store, split_store_password

        text = self.store.text().strip()
        problem = check_store_url(text)
        if problem is not None:
            self._say_store(problem)
            return False
        if text == self._saved_store:
            return True
        try:
            save_store(text)
        except KeyringUnavailable as exc:
            self._say_store(str(exc))
            return False
        self._saved_store = split_store_password(text)[0]
        self._say_store("Saved: used when Desktop Queue starts again.")
        return True

    def _say_store(self, text: str) -> None:
        """What the Store field's test or save found, in the row below it, as a sentence."""
        self.store_status.setText(text[:1].upper() + text[1:])
        self._store_form.setRowVisible(self.store_status, bool(text))

    def select_profile(self, name: str) -> bool:
        """Shows the Providers tab with the profile ``name`` selected; False if there is none."""
        self.tabs.setCurrentWidget(self.profiles_page)
        return self.profiles_page.select(name)

    @property
    def providers_page(self) -> Any:
        """The editor of the selected profile (a :class:`ProvidersPage`), or None when there is none."""
        return self.profiles_page.current_editor()

    def accept(self) -> None:
        """Saves the provider profiles (and keys) and the store first; stays open if they cannot be saved."""
        if not self._save_store():
            self.tabs.setCurrentIndex(0)
            return
        if not self.profiles_page.save():
            self.tabs.setCurrentWidget(self.profiles_page)
            return
        super().accept()

    def preferences(self) -> Preferences:
        return Preferences(
            concurrency=self.concurrency.value(),
            attempt_timeout_s=float(self.attempt_timeout.value()) or None,
            api_enabled=self.api_enabled.isChecked(),
        )

    def provider_profile(self) -> ProfileConfig:
        """The selected profile as edited."""
        editor = self.profiles_page.current_editor()
        return editor.profile() if editor is not None else ProfileConfig()

    def profile_set(self) -> ProfileSet:
        """Every profile as saved by OK."""
        return self.profiles_page.loaded
