"""The Details view: the selected job's input, kind, model, profile, usage and cost, ids and times.

The rows come from :func:`desktop_queue.core.result_view.job_details`. The input is
the user's own data on their own machine: it is shown here, and only here (never in
events or logs). The result document and the spend ledger are read off the GUI
thread; every value is selectable, and the ids, the key, the prompt and the input
have Copy buttons.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from PySide6.QtCore import Qt, QTimer
from PySide6.QtGui import QFontDatabase, QGuiApplication, QResizeEvent, QShowEvent
from PySide6.QtWidgets import (
    QFormLayout,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPlainTextEdit,
    QPushButton,
    QScrollArea,
    QSizePolicy,
    QVBoxLayout,
    QWidget,
)

from desktop_queue.core.ledger import SpendLedger
from desktop_queue.core.model import Job
from desktop_queue.core.result_view import JobDetails, job_details, spend_of
from desktop_queue.ui.flow_layout import FlowLayout
from desktop_queue.ui.icons import icon
from desktop_queue.ui.loader import Loader

#: (kind, input) -> the provider profile a job of that kind and input runs on
ProfileOf = Callable[[str, Any], str | None]

#: rows with a Copy button beside their value
COPYABLE = frozenset({"Job id", "Provider request id", "Provider job id", "Idempotency key"})
LOADING_DELAY_MS = 150


class WrapLabel(QLabel):
    """A word-wrapped label that asks for the height its wrapped text needs at its width.

    In a form inside a scroll area Qt gives a wrapped label the height of one line;
    this one sets its minimum height from ``heightForWidth`` whenever its width changes.
    """

    def resizeEvent(self, event: QResizeEvent) -> None:  # noqa: N802 - Qt API
        super().resizeEvent(event)
        height = self.heightForWidth(self.width())
        if height > 0 and height != self.minimumHeight():
            self.setMinimumHeight(height)


def read_details(queue: Any, job: Job, profile_of: ProfileOf | None = None) -> JobDetails:
    """The details of ``job``: its result document and its attempts' ledger entries (off the GUI thread).

    The profile shown is the one its last attempt ran on (the ledger says), else the one
    it runs on now (``profile_of``: the input's, else the default profile): an
    ``openai.chat`` job on a profile named "litellm" said "openai", its kind's prefix.
    """
    doc = queue.results.get(job.idempotency_key) if job.result_ref else None
    try:
        ledger = SpendLedger(queue.data_dir)
        spend = spend_of(ledger.entries(since=job.created_at), job.id) if ledger.dir.exists() else []
    except (OSError, ValueError):
        spend = None
    profile = spend[-1].profile if spend else None
    if profile is None and profile_of is not None:
        try:
            profile = profile_of(job.kind, job.input)
        except Exception:  # (a details view never fails on configuration)
            profile = None
    return job_details(job, doc, spend=spend, profile=profile)


class DetailsView(QWidget):
    """The selected job's details (read when this view is visible).

    Args:
        queue: the job engine (its result store and data dir, for the ledger).
    """

    def __init__(self, queue: Any, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("detailsView")
        self.queue = queue
        #: (kind, input) -> the provider profile a job runs on (the window sets flow control's)
        self.profile_of: ProfileOf | None = None
        self.job: Job | None = None
        self.details: JobDetails | None = None
        self._shown_key: tuple[str, str, float] | None = None
        self._pending = False
        self.loader = Loader(self)
        self.loader.loaded.connect(self._loaded)
        self.loader.failed.connect(self._failed)
        self._loading_timer = QTimer(self)
        self._loading_timer.setSingleShot(True)
        self._loading_timer.setInterval(LOADING_DELAY_MS)

        self.status = QLabel("Select a job to see its details")
        self.status.setObjectName("detailsStatus")
        self.status.setWordWrap(True)
        self._loading_timer.timeout.connect(lambda: self.status.setText("loading…"))
        self.form_host = QWidget()
        self.form = QFormLayout(self.form_host)
        self.form.setFieldGrowthPolicy(QFormLayout.FieldGrowthPolicy.ExpandingFieldsGrow)
        self.form.setRowWrapPolicy(QFormLayout.RowWrapPolicy.WrapLongRows)
        self.values: dict[str, QLabel | QLineEdit] = {}
        self.input_label = QLabel("I&nput (shown only here: never in events or logs)")
        self.input_view = QPlainTextEdit()
        self.input_view.setObjectName("detailsInput")
        self.input_view.setReadOnly(True)
        self.input_view.setFont(QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont))
        self.input_view.setMinimumHeight(120)
        self.input_label.setBuddy(self.input_view)
        self.copy_input = QPushButton(icon("action-copy"), "Copy input")
        self.copy_input.setObjectName("copyInput")
        self.copy_input.setToolTip("Copy the job's input (JSON) to the clipboard")
        self.copy_prompt = QPushButton(icon("action-copy"), "Copy pro&mpt")
        self.copy_prompt.setObjectName("copyPrompt")
        self.copy_prompt.setToolTip("Copy the prompt text to the clipboard")
        self.copy_input.clicked.connect(lambda: self._copy(self.details.input_text if self.details else None))
        self.copy_prompt.clicked.connect(lambda: self._copy(self.details.prompt if self.details else None))
        self.input_label.setWordWrap(True)
        button_row = QWidget()
        buttons = FlowLayout(button_row)
        buttons.addWidget(self.copy_prompt)
        buttons.addWidget(self.copy_input)

        body = QWidget()
        inner = QVBoxLayout(body)
        inner.setContentsMargins(0, 0, 0, 0)
        inner.addWidget(self.form_host)
        inner.addWidget(self.input_label)
        inner.addWidget(button_row)
        inner.addWidget(self.input_view, 1)
        scroll = QScrollArea()
        scroll.setWidgetResizable(True)
        scroll.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        scroll.setWidget(body)
        scroll.setFrameShape(QScrollArea.Shape.NoFrame)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.status)
        layout.addWidget(scroll, 1)
        self._body = scroll
        self._set_enabled(False)

    def show_job(self, job: Job | None) -> None:
        """Shows ``job``'s details (read when this view is visible)."""
        self.job = job
        if job is None:
            self.loader.cancel()
            self._shown_key = None
            self.details = None
            self._clear_rows()
            self.input_view.clear()
            self._set_enabled(False)
            self.status.setText("Select a job to see its details")
            return
        key = (job.id, job.state, job.updated_at)
        if key == self._shown_key:
            return
        if self.isVisible():
            self._load()
        else:
            self._pending = True

    def update_job(self, job: Job) -> None:
        if self.job is not None and job.id == self.job.id:
            self.show_job(job)

    def showEvent(self, event: QShowEvent) -> None:  # noqa: N802 - Qt API
        super().showEvent(event)
        if self._pending and self.job is not None:
            self._load()

    def _load(self) -> None:
        job = self.job
        assert job is not None
        self._pending = False
        self._shown_key = (job.id, job.state, job.updated_at)
        queue, profile_of = self.queue, self.profile_of
        self.loader.start(lambda: read_details(queue, job, profile_of))
        self._loading_timer.start()

    def _loaded(self, serial: int, value: object) -> None:
        if not self.loader.is_current(serial) or not isinstance(value, JobDetails):
            return
        self._loading_timer.stop()
        self.details = value
        self.status.setText(f"{self.job.title}  ·  job {self.job.id}" if self.job else "")
        self._show_rows(value)

    def _failed(self, serial: int, error: object) -> None:
        if self.loader.is_current(serial):
            self._loading_timer.stop()
            self.status.setText(f"The details could not be read: {type(error).__name__}: {error}")

    def _clear_rows(self) -> None:
        while self.form.rowCount():
            self.form.removeRow(0)
        self.values.clear()

    def _show_rows(self, details: JobDetails) -> None:
        same = list(self.values) == [label for label, _ in details.rows]
        if not same:
            self._clear_rows()
        for label, text in details.rows:
            if same:
                shown = self.values[label]
                if shown.text() != text:
                    shown.setText(text)
                    shown.setToolTip(text)
                    if isinstance(shown, QLineEdit):
                        shown.setCursorPosition(0)
                continue
            value: QLabel | QLineEdit
            if label in COPYABLE:
                # an id or a key has no spaces to wrap at: a read-only line scrolls instead of widening the view
                value = QLineEdit(text)
                value.setReadOnly(True)
                value.setFrame(False)
                value.setCursorPosition(0)
                value.setStyleSheet("QLineEdit { background: transparent; }")
            else:
                value = WrapLabel(text)
                value.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Preferred)
                value.setTextFormat(Qt.TextFormat.PlainText)
                value.setWordWrap(True)
                value.setTextInteractionFlags(
                    Qt.TextInteractionFlag.TextSelectableByMouse | Qt.TextInteractionFlag.TextSelectableByKeyboard
                )
            value.setObjectName(f"detail-{label.lower().replace(' ', '-')}")
            value.setToolTip(text)
            self.values[label] = value
            if label in COPYABLE:
                row = QWidget()
                line = QHBoxLayout(row)
                line.setContentsMargins(0, 0, 0, 0)
                line.addWidget(value, 1)
                copy = QPushButton(icon("action-copy"), "")
                copy.setObjectName(f"copy-{label.lower().replace(' ', '-')}")
                copy.setToolTip(f"Copy the {label.lower()}")
                copy.setFlat(True)
                copy.clicked.connect(lambda _c=False, lb=label: self._copy(self._raw(lb)))
                line.addWidget(copy)
                self.form.addRow(f"{label}:", row)
            else:
                self.form.addRow(f"{label}:", value)
        if self.input_view.toPlainText() != details.input_text:
            self.input_view.setPlainText(details.input_text)
        self._set_enabled(True)
        self.copy_prompt.setEnabled(details.prompt is not None)

    def _raw(self, label: str) -> str | None:
        """The value a Copy button copies: the bare key, without the note after it."""
        if label == "Idempotency key" and self.job is not None:
            return self.job.idempotency_key
        value = self.values.get(label)
        return value.text() if value is not None else None

    def _set_enabled(self, on: bool) -> None:
        self.copy_input.setEnabled(on)
        self.copy_prompt.setEnabled(on)
        # (no job: "Select a job…" alone, not an empty input box under greyed buttons)
        self._body.setVisible(on)

    def _copy(self, text: str | None) -> None:
        if text and text != "—":
            QGuiApplication.clipboard().setText(text)
