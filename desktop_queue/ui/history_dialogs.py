"""Dialogs of the dead letters and the history: resolve note, delete before a date, export, progress.

The ``ask_*`` functions are the only modal prompts; tests replace them.
"""

from __future__ import annotations

import datetime as _dt
from dataclasses import dataclass
from pathlib import Path

from PySide6.QtCore import QDate, Qt
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QDateEdit,
    QDialog,
    QDialogButtonBox,
    QFileDialog,
    QFormLayout,
    QHBoxLayout,
    QInputDialog,
    QLabel,
    QLineEdit,
    QProgressDialog,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from desktop_queue.core.wording import counted
from desktop_queue.ui.controller import BulkTask
from desktop_queue.ui.forms import add_labelled_row


def ask_note(parent: QWidget | None, count: int) -> str | None:
    """Asks why the dead letters are closed (optional); None if the user cancelled."""
    noun = "this dead letter" if count == 1 else f"these {count:,} dead letters"
    text, ok = QInputDialog.getText(
        parent,
        "Resolve dead letters",
        f"Resolve {noun}: they stay dead, leave the list and no longer count.\n"
        "Note (optional, kept in the timeline; no secrets):",
        QLineEdit.EchoMode.Normal,
        "",
    )
    return text if ok else None


@dataclass(frozen=True)
class DeleteBefore:
    """What "Delete finished before…" asked for."""

    before: float
    states: list[str]


class DeleteBeforeDialog(QDialog):
    """A date and the finished states whose jobs go (with their results)."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("Delete finished jobs")
        self.setObjectName("deleteBeforeDialog")
        self.date = QDateEdit(QDate.currentDate().addDays(-30))
        self.date.setCalendarPopup(True)
        self.date.setDisplayFormat("yyyy-MM-dd")
        self.date.setMaximumDate(QDate.currentDate().addDays(1))
        self.states = {
            name: QCheckBox(label)
            for name, label in (("succeeded", "&Succeeded"), ("dead", "&Dead letters"), ("cancelled", "&Cancelled"))
        }
        for box in self.states.values():
            box.setChecked(True)
        form = QFormLayout()
        form.addRow("Finished &before:", self.date)
        row = QHBoxLayout()
        for box in self.states.values():
            row.addWidget(box)
        form.addRow("Jobs that:", row)
        note = QLabel(
            "Their timelines, results and files are removed for good. You are asked once more, with the count."
        )
        note.setWordWrap(True)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Cancel)
        self.ok = buttons.addButton("&Continue…", QDialogButtonBox.ButtonRole.AcceptRole)
        buttons.accepted.connect(self.accept)
        buttons.rejected.connect(self.reject)
        layout = QVBoxLayout(self)
        layout.addLayout(form)
        layout.addWidget(note)
        layout.addWidget(buttons)
        for box in self.states.values():
            box.toggled.connect(lambda _on: self.ok.setEnabled(bool(self.choice().states)))

    def choice(self) -> DeleteBefore:
        day = self.date.date().toPython()
        assert isinstance(day, _dt.date)
        start = _dt.datetime.combine(day, _dt.time()).astimezone()  # local midnight
        return DeleteBefore(start.timestamp(), [n for n, box in self.states.items() if box.isChecked()])


def ask_delete_before(parent: QWidget | None) -> DeleteBefore | None:
    dialog = DeleteBeforeDialog(parent)
    return dialog.choice() if dialog.exec() else None


@dataclass(frozen=True)
class ExportChoice:
    path: Path
    fmt: str
    with_inputs: bool
    with_results: bool = False


class ExportDialog(QDialog):
    """Where to, which format, and whether the prompts and the results go too (not unless asked)."""

    def __init__(self, what: str, parent: QWidget | None = None, default_dir: Path | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("Export jobs")
        self.setObjectName("exportDialog")
        self.format = QComboBox()
        self.format.addItem("CSV (spreadsheets)", "csv")
        self.format.addItem("JSON Lines (scripts, import)", "jsonl")
        self.with_inputs = QCheckBox("Include &inputs (prompts)")
        self.with_inputs.setObjectName("includeInputs")
        self.with_inputs.setChecked(False)
        self.with_inputs.setToolTip("Prompts are your own data: leave them out of a file you share")
        self.with_results = QCheckBox("Include &results (answers, images, audio)")
        self.with_results.setObjectName("includeResults")
        self.with_results.setChecked(False)
        self.with_results.setToolTip(
            "Importing the file stores them with their jobs, so a duplicate is not paid for again; "
            "images and audio make the file large"
        )
        stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M")
        self.path = QLineEdit(str((default_dir or Path.home()) / f"desktop-queue-{stamp}.csv"))
        self.path.setObjectName("exportPath")
        browse = QPushButton("&Browse…")
        browse.clicked.connect(self._browse)
        where = QHBoxLayout()
        where.addWidget(self.path, 1)
        where.addWidget(browse)
        form = QFormLayout()
        form.addRow(QLabel(f"Exports {what}, with their timelines."))
        form.addRow("&Format:", self.format)
        form.addRow("", self.with_inputs)
        form.addRow("", self.with_results)
        add_labelled_row(form, "&Save to:", where, self.path)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Cancel)
        self.ok = buttons.addButton("&Export", QDialogButtonBox.ButtonRole.AcceptRole)
        self.ok.setDefault(True)
        buttons.accepted.connect(self.accept)
        buttons.rejected.connect(self.reject)
        layout = QVBoxLayout(self)
        layout.addLayout(form)
        layout.addWidget(buttons)
        self.format.currentIndexChanged.connect(self._suffix)
        self.resize(520, 0)

    def _suffix(self) -> None:
        path = Path(self.path.text())
        self.path.setText(str(path.with_suffix(f".{self.format.currentData()}")))

    def _browse(self) -> None:
        fmt = self.format.currentData()
        name, _ = QFileDialog.getSaveFileName(self, "Export to", self.path.text(), f"{fmt.upper()} (*.{fmt})")
        if name:
            self.path.setText(name)

    def choice(self) -> ExportChoice:
        return ExportChoice(
            Path(self.path.text()).expanduser(),
            self.format.currentData(),
            self.with_inputs.isChecked(),
            self.with_results.isChecked(),
        )


def ask_export(parent: QWidget | None, what: str) -> ExportChoice | None:
    dialog = ExportDialog(what, parent)
    return dialog.choice() if dialog.exec() else None


class BulkProgressDialog(QProgressDialog):
    """Shows a bulk action's progress; Cancel stops it between two chunks.

    It closes itself when the action ends (done, cancelled or failed).
    """

    def __init__(self, task: BulkTask, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.task = task
        self.setObjectName("bulkProgress")
        self.setWindowTitle(task.verb)
        self.setWindowModality(Qt.WindowModality.WindowModal)
        self.setMinimumDuration(0)
        self.setAutoClose(False)
        self.setAutoReset(False)
        self.setCancelButtonText("&Stop")
        self.setMinimumWidth(380)
        self.setRange(0, max(0, task.total))
        self.setValue(0)
        noun = "jobs" if task.total != 1 else "job"
        self.setLabelText(f"{task.verb} {task.total:,} {noun}…" if task.total else f"{task.verb}…")
        self.canceled.connect(self._stop)
        task.progress.connect(self._progress)
        task.finished.connect(lambda _r: self.done(0))
        task.failed.connect(lambda _m: self.done(0))

    def _progress(self, done: int, total: int) -> None:
        if total:
            self.setMaximum(total)
            self.setValue(done)
            self.setLabelText(f"{self.task.verb}: {done:,} of {total:,}…")
        else:
            self.setLabelText(f"{self.task.verb}: {counted(done, 'job')} so far…")

    def _stop(self) -> None:
        self.task.cancel()
        self.setLabelText(f"{self.task.verb}: stopping after this chunk…")
        self.show()  # (QProgressDialog hides itself on cancel: say that it is stopping)
