"""The Schedules pane: every schedule with its next and last run, and the dialog that edits one.

The buttons act on the selected schedule through :class:`SchedulesModel`'s verbs; the
pane holds no rule of its own (what a window runs, catch-up, overlap: core.schedules).
"""

from __future__ import annotations

import json
import zoneinfo
from collections.abc import Callable, Iterable
from typing import Any

from PySide6.QtCore import Qt, QTimer, Signal
from PySide6.QtWidgets import (
    QAbstractItemView,
    QComboBox,
    QDialog,
    QDialogButtonBox,
    QFormLayout,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPlainTextEdit,
    QPushButton,
    QSpinBox,
    QTableView,
    QVBoxLayout,
    QWidget,
)

from desktop_queue.core import QueueError
from desktop_queue.core.errors import InvalidInput
from desktop_queue.core.inputspec import spec_for
from desktop_queue.core.model import Priority
from desktop_queue.core.schedules import (
    CATCH_UP,
    DEFAULT_PAUSE_AFTER,
    OVERLAP,
    Entry,
    JobTemplate,
    Schedule,
    check_zone,
    describe_cron,
    local_zone_name,
    new_schedule,
    next_window,
    validate,
)
from desktop_queue.ui.columns import ColumnFitter
from desktop_queue.ui.models.schedules_model import COLUMNS, NOT_CURRENT, ScheduleRole, SchedulesModel

#: how often the pane looks at the schedules file and its runs while it is shown
REFRESH_MS = 2000

CATCH_UP_TEXT = {
    "skip": "Skip missed windows (next window only)",
    "latest": "Run the latest missed window once",
    "all": "Run every missed window (at most 10)",
}
OVERLAP_TEXT = {"skip": "Skip while the previous run is queued or running", "allow": "Allow runs to overlap"}


class ScheduleDialog(QDialog):
    """Add or edit a schedule: name, cron and zone, the job template, catch-up and overlap.

    After ``accept()``, :attr:`result_schedule` holds the validated schedule.

    Args:
        kinds: the job kinds to offer.
        now: wall time (a new schedule is created then; the next run is shown from it).
        entry: the schedule to edit (None: a new one).
        parent: the Qt parent.
        template: a new schedule's job, written in the New job dialog's form (its name
            is suggested from the title; the cron is what is left to choose).
        input_for: ``kind -> a fresh input`` (its form's defaults, the prompt empty): the
            input a new schedule starts from, and takes again when the kind changes while
            it is untouched (a speech job's "input" is not a chat job's "prompt").
        save: stores the validated schedule (raises QueueError when refused: a name taken
            meanwhile, a file that cannot be written); the dialog then stays open and says
            why, with what was typed (None: the caller stores :attr:`result_schedule`).
    """

    def __init__(
        self,
        kinds: Iterable[str],
        now: float,
        entry: Entry | None = None,
        parent: QWidget | None = None,
        template: JobTemplate | None = None,
        input_for: Callable[[str], Any] | None = None,
        save: Callable[[Schedule], Any] | None = None,
    ):
        super().__init__(parent)
        self.setObjectName("scheduleDialog")
        self.setWindowTitle("Edit schedule" if entry else "New schedule")
        self.now = now
        self.entry = entry
        self.result_schedule: Schedule | None = None
        self.name = QLineEdit()
        self.cron = QLineEdit("0 * * * *")
        self.cron.setToolTip("minute hour day-of-month month day-of-week, e.g. '0 9 * * 1-5' for 09:00 on weekdays")
        self.tz = QComboBox()
        self.tz.setEditable(True)
        self.tz.addItems(sorted(zoneinfo.available_timezones()))
        self.tz.setCurrentText(local_zone_name())
        self.kind = QComboBox()
        for kind in sorted(kinds, key=lambda k: (k != "demo", k)):
            self.kind.addItem(kind, kind)
        self._input_for = input_for
        self._save = save
        self._fresh_text: str | None = None  # the input as the kind gave it (None: someone's own)
        self.input = QPlainTextEdit()
        self.input.setObjectName("scheduleInput")
        self._fresh_input()
        self.title = QLineEdit()
        self.title.setPlaceholderText("Optional (default: the schedule's name)")
        self.priority = QComboBox()
        self.priority.addItem("Background", str(Priority.BACKGROUND))
        self.priority.addItem("Interactive (runs first)", str(Priority.INTERACTIVE))
        self.max_attempts = QSpinBox()
        self.max_attempts.setRange(1, 100)
        self.max_attempts.setValue(5)
        self.catch_up = QComboBox()
        for value in CATCH_UP:
            self.catch_up.addItem(CATCH_UP_TEXT[value], value)
        self.overlap = QComboBox()
        for value in OVERLAP:
            self.overlap.addItem(OVERLAP_TEXT[value], value)
        self.pause_after = QSpinBox()
        self.pause_after.setRange(0, 100)
        self.pause_after.setValue(DEFAULT_PAUSE_AFTER)
        self.pause_after.setSpecialValueText("never")
        self.pause_after.setSuffix(" dead runs in a row")
        self.next_label = QLabel()
        self.next_label.setObjectName("scheduleNext")
        self.next_label.setWordWrap(True)  # (the cron in words and two times: it widened the dialog)
        self.message = QLabel()
        self.message.setObjectName("scheduleMessage")
        self.message.setWordWrap(True)
        form = QFormLayout()
        form.addRow("&Name:", self.name)
        form.addRow("&Cron:", self.cron)
        form.addRow("&Time zone:", self.tz)
        form.addRow("", self.next_label)
        form.addRow("&Kind:", self.kind)
        form.addRow("&Input (JSON):", self.input)
        form.addRow("T&itle:", self.title)
        form.addRow("&Priority:", self.priority)
        form.addRow("&Max attempts:", self.max_attempts)
        form.addRow("Catch-&up:", self.catch_up)
        form.addRow("&Overlap:", self.overlap)
        form.addRow("Pause a&fter:", self.pause_after)
        self.buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Save | QDialogButtonBox.StandardButton.Cancel)
        layout = QVBoxLayout(self)
        layout.addLayout(form)
        layout.addWidget(self.message)
        layout.addWidget(self.buttons)
        self.buttons.accepted.connect(self.try_accept)
        self.buttons.rejected.connect(self.reject)
        self.cron.textChanged.connect(self._update_next)
        self.kind.currentIndexChanged.connect(self._kind_changed)
        self.tz.currentTextChanged.connect(self._update_next)
        if entry is not None:
            self._load(entry.schedule)
        elif template is not None:
            self._load_template(template)
        self._update_next()

    def _fresh_input(self) -> None:
        """The chosen kind's fresh input in the editor (``{"prompt": ""}`` when none is known)."""
        fresh: Any = None
        if self._input_for is not None:
            fresh = self._input_for(str(self.kind.currentData()))
        text = json.dumps(fresh if fresh is not None else {"prompt": ""}, indent=2, ensure_ascii=False)
        self.input.setPlainText(text)
        self._fresh_text = text

    def _kind_changed(self) -> None:
        if self._fresh_text is not None and self.input.toPlainText() == self._fresh_text:
            self._fresh_input()  # untouched: the new kind's own starting input

    def _load_job(self, job: Schedule | JobTemplate) -> None:
        """The job fields a schedule and a template share: kind, input, title, priority, attempts."""
        self._fresh_text = None  # (its own input: a kind changed now keeps it, and none is made to be replaced)
        if self.kind.findData(job.kind) < 0:
            self.kind.addItem(job.kind, job.kind)
        self.kind.setCurrentIndex(self.kind.findData(job.kind))
        self.input.setPlainText(json.dumps(job.input, indent=2, ensure_ascii=False))
        self.title.setText(job.title or "")
        self.priority.setCurrentIndex(max(0, self.priority.findData(job.priority)))
        self.max_attempts.setValue(job.max_attempts or 5)

    def _load_template(self, t: JobTemplate) -> None:
        self.name.setText(t.suggested_name())
        self._load_job(t)
        self.message.setText("The job is the one you wrote; choose when it runs.")
        self.cron.setFocus()
        self.cron.selectAll()

    def _load(self, s: Schedule) -> None:
        self.name.setText(s.name)
        self.cron.setText(s.cron)
        self.tz.setCurrentText(s.tz)
        self._load_job(s)
        self.catch_up.setCurrentIndex(max(0, self.catch_up.findData(s.catch_up)))
        self.overlap.setCurrentIndex(max(0, self.overlap.findData(s.overlap)))
        self.pause_after.setValue(s.pause_after)

    def _update_next(self) -> None:
        """The next run in the chosen zone and here, or why the cron or zone is not read."""
        try:
            probe = validate(self._build(check_input=False))
            nxt = next_window(probe, self.now)
        except QueueError as exc:
            self.next_label.setText(str(exc))
            return
        import datetime as dt

        there = dt.datetime.fromtimestamp(nxt, check_zone(probe.tz)).strftime("%Y-%m-%d %H:%M %Z")
        here = dt.datetime.fromtimestamp(nxt).strftime("%Y-%m-%d %H:%M")
        said = describe_cron(probe.cron)
        self.next_label.setText((f"{said}. " if said else "") + f"Next run: {there} ({here} here)")

    def _build(self, check_input: bool = True) -> Schedule:
        try:
            payload: Any = json.loads(self.input.toPlainText() or "null")
        except json.JSONDecodeError as exc:
            if check_input:
                raise InvalidInput(f"the input is not valid JSON: {exc}") from None
            payload = None
        fields: dict[str, Any] = {
            "tz": self.tz.currentText().strip(),
            "title": self.title.text().strip() or None,
            "priority": str(self.priority.currentData()),
            "max_attempts": self.max_attempts.value(),
            "catch_up": str(self.catch_up.currentData()),
            "overlap": str(self.overlap.currentData()),
            "pause_after": self.pause_after.value(),
        }
        name, cron, kind = self.name.text().strip() or "schedule", self.cron.text(), str(self.kind.currentData())
        if self.entry is None:
            return new_schedule(name, cron, kind, payload, now=self.now, **fields)
        import dataclasses

        return validate(
            dataclasses.replace(self.entry.schedule, name=name, cron=cron, kind=kind, input=payload, **fields)
        )

    def try_accept(self) -> bool:
        """Accepts a valid schedule; otherwise says what is wrong and stays open."""
        if not self.name.text().strip():
            self.message.setText("Give the schedule a name.")
            return False
        try:
            schedule = self._build()
            if self._save is not None:
                self._save(schedule)
        except QueueError as exc:
            self.message.setText(str(exc))
            return False
        self.result_schedule = schedule
        self.accept()
        return True


class SchedulesPane(QWidget):
    """The schedules table, the buttons that act on the selected one, and its last good result.

    Args:
        model: the schedules model.
        kinds: ``() -> job kinds`` the dialog offers.
        parent: the Qt parent.

    Signals:
        job_requested(str): a person asked to see a schedule's job (its id).
    """

    job_requested = Signal(str)

    def __init__(
        self,
        model: SchedulesModel,
        kinds: Any,
        parent: QWidget | None = None,
        input_for: Callable[[str], Any] | None = None,
    ) -> None:
        super().__init__(parent)
        self.setObjectName("schedulesPane")
        self.model = model
        self.kinds = kinds
        self.input_for = input_for
        self.view = QTableView()
        self.view.setObjectName("schedulesView")
        self.view.setModel(model)
        self.view.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.view.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.view.verticalHeader().hide()
        self.view.setWordWrap(False)
        # the name, its times and the last run widen to what they show ("Summarise t…" and
        # "*/30 * * * * (E…" beside an empty result column that took the rest)
        self.columns = ColumnFitter(
            self.view,
            [key for _heading, key in COLUMNS],
            "result",
            {"name": 160, "cron": 150, "next": 120, "last": 100},
            content_keys=("name", "cron", "next", "last"),
        )
        self.add_button = QPushButton("Ne&w…")
        self.add_button.setObjectName("scheduleAdd")
        self.edit_button = QPushButton("Chan&ge…")
        self.edit_button.setObjectName("scheduleEdit")
        self.toggle_button = QPushButton("Disa&ble")
        self.toggle_button.setObjectName("scheduleToggle")
        self.run_button = QPushButton("&Run now")
        self.run_button.setObjectName("scheduleRunNow")
        self.remove_button = QPushButton("Rem&ove")
        self.remove_button.setObjectName("scheduleRemove")
        self.detail = QLabel()
        self.detail.setObjectName("scheduleDetail")
        self.detail.setWordWrap(True)
        self.detail.setTextFormat(Qt.TextFormat.PlainText)
        self.detail.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        # (named after the button, whose text it must match: it read "Add…" beside "New…")
        self.empty = QLabel(
            f"No schedules yet: {self.add_button.text().replace('&', '')} makes a job run on a cron schedule,"
            " e.g. every hour."
        )
        self.empty.setObjectName("schedulesEmpty")
        self.empty.setAlignment(Qt.AlignmentFlag.AlignCenter)
        bar = QHBoxLayout()
        bar.setContentsMargins(0, 0, 0, 0)
        for button in (self.add_button, self.edit_button, self.toggle_button, self.run_button, self.remove_button):
            bar.addWidget(button)
        bar.addStretch(1)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addLayout(bar)
        layout.addWidget(self.view, 1)
        layout.addWidget(self.empty, 1)
        layout.addWidget(self.detail)
        self.timer = QTimer(self)
        self.timer.setObjectName("schedulesRefresh")
        self.timer.setInterval(REFRESH_MS)
        self.timer.timeout.connect(self.refresh)
        self.add_button.clicked.connect(self.add)
        self.edit_button.clicked.connect(self.edit)
        self.toggle_button.clicked.connect(self.toggle)
        self.run_button.clicked.connect(self.run_now)
        self.remove_button.clicked.connect(self.remove)
        self.view.doubleClicked.connect(lambda _i: self.edit())
        self.view.selectionModel().selectionChanged.connect(lambda *_: self._update())
        for signal in (model.rowsInserted, model.rowsRemoved, model.modelReset, model.dataChanged):
            signal.connect(lambda *_: self._update())
        self.dialog: ScheduleDialog | None = None
        self._update()

    def _ask(self, text: str) -> bool:
        from desktop_queue.ui import dialogs  # the window's one confirmation (tests answer it)

        return dialogs.confirm(self, "Remove schedule", text, "Remove")

    # ------------------------------------------------------------------ life

    def showEvent(self, event: Any) -> None:  # noqa: N802 - Qt API
        """Looks at once, then every few seconds while shown (a hidden pane reads nothing)."""
        super().showEvent(event)
        self.refresh()
        self.timer.start()

    def hideEvent(self, event: Any) -> None:  # noqa: N802 - Qt API
        super().hideEvent(event)
        self.timer.stop()

    def refresh(self) -> None:
        self.model.refresh()

    # ------------------------------------------------------------------ selection

    def selected(self) -> Entry | None:
        rows = self.view.selectionModel().selectedRows()
        if not rows:
            return None
        entry = self.model.data(rows[0], ScheduleRole.ENTRY)
        return entry if isinstance(entry, Entry) else None

    def select(self, name: str) -> bool:
        row = self.model.row_of(name)
        if row < 0:
            return False
        self.view.selectRow(row)
        return True

    def _update(self) -> None:
        empty = self.model.rowCount() == 0
        self.view.setVisible(not empty)
        self.empty.setVisible(empty)
        entry = self.selected()
        for button in (self.edit_button, self.toggle_button, self.run_button, self.remove_button):
            button.setEnabled(entry is not None)
        paused = entry is not None and entry.state.paused
        self.toggle_button.setText("Ena&ble" if paused else "Disa&ble")
        self.detail.setText(self.detail_text(entry))

    def detail_text(self, entry: Entry | None) -> str:
        """The selected schedule's state in words: paused and why, last good result (not current)."""
        if entry is None:
            return ""
        row = self.model.row_of(entry.schedule.name)
        run = self.model.data(self.model.index(row, 0), ScheduleRole.LAST_RUN) if row >= 0 else None
        lines = []
        if entry.state.paused:
            lines.append(entry.state.paused_reason or "paused")
        elif entry.state.last_skipped:
            lines.append(entry.state.last_skipped)
        if run is not None and run.stale:
            lines.append(f"The latest run is {run.state}. Last good result ({NOT_CURRENT}):")
            lines.append(self.model.result_text(entry, run).split(": ", 1)[-1])
        elif run is not None and run.good_job_id:
            lines.append(f"Last result: {self.model.result_text(entry, run)}")
        return "\n".join(lines)

    # ------------------------------------------------------------------ verbs

    def open_dialog(self, entry: Entry | None = None, template: JobTemplate | None = None) -> ScheduleDialog:
        """Shows the add (or edit) dialog without blocking; saving it adds or changes the schedule."""
        dialog = ScheduleDialog(
            self.kinds(),
            self.model.clock(),
            entry,
            self,
            template=template,
            input_for=self.input_for,
            save=lambda s: self._save(entry, s),
        )
        dialog.accepted.connect(lambda: self.select(dialog.result_schedule.name) if dialog.result_schedule else None)
        self.dialog = dialog
        dialog.open()
        return dialog

    def _save(self, entry: Entry | None, s: Schedule) -> None:
        """Adds ``s``, or changes ``entry`` into it (raises QueueError, to the dialog, when refused)."""
        if entry is None:
            self.model.add(s, report=False)
        else:
            old = entry.schedule
            changes = {
                f: getattr(s, f)
                for f in (
                    "name",
                    "cron",
                    "tz",
                    "kind",
                    "input",
                    "title",
                    "priority",
                    "max_attempts",
                    "catch_up",
                    "overlap",
                    "pause_after",
                )
                if getattr(s, f) != getattr(old, f)
            }
            if changes:
                self.model.edit(old.name, report=False, **changes)

    def add(self) -> ScheduleDialog:
        return self.open_dialog(None)

    def add_from(self, template: JobTemplate) -> ScheduleDialog:
        """The add dialog on a job written elsewhere (New job's "Schedule…")."""
        return self.open_dialog(None, template)

    def edit(self) -> ScheduleDialog | None:
        entry = self.selected()
        return self.open_dialog(entry) if entry is not None else None

    def toggle(self) -> None:
        entry = self.selected()
        if entry is not None:
            self.model.set_paused(entry.schedule.name, not entry.state.paused)

    def run_now(self) -> str | None:
        entry = self.selected()
        return self.model.run_now(entry.schedule.name) if entry is not None else None

    def remove(self) -> None:
        entry = self.selected()
        if entry is not None and self._ask(
            f"Remove the schedule {entry.schedule.name}? Its jobs stay; no new ones are made."
        ):
            self.model.remove(entry.schedule.name)


def fresh_input(provider: Any, profiles: Any = None) -> dict[str, Any] | None:
    """A kind's input as its form starts: defaults written, the prompt empty (None: no form)."""
    spec = spec_for(provider, profiles)
    if spec is None:
        return None
    payload = spec.build(spec.fresh())
    if spec.prompt_field:
        payload = {spec.prompt_field: "", **payload}
    return payload
