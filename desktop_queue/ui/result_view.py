"""The Result view: what the selected job generated (text, JSON, an image, audio), or why there is none.

What a result document holds is decided in :mod:`desktop_queue.core.result_view`;
this view only shows it. Reading the document and decoding an image happen off the
GUI thread (:mod:`desktop_queue.ui.loader`); a big result says "loading…" at once, a
small one only if it takes longer than a blink. Long text is fed to its widget in
slices, so even a megabyte answer never freezes the window.

A running job shows its elapsed time against the usual run time of its kind and model
(:mod:`desktop_queue.core.estimate`).
"""

from __future__ import annotations

import importlib
import re
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from PySide6.QtCore import QSize, Qt, QTimer, QUrl, Signal
from PySide6.QtGui import (
    QDesktopServices,
    QFontDatabase,
    QGuiApplication,
    QImage,
    QImageReader,
    QPixmap,
    QShowEvent,
    QWheelEvent,
)
from PySide6.QtWidgets import (
    QCheckBox,
    QFileDialog,
    QLabel,
    QPlainTextEdit,
    QProgressBar,
    QPushButton,
    QScrollArea,
    QSizePolicy,
    QStackedWidget,
    QTextBrowser,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from desktop_queue.core.errors import QueueError
from desktop_queue.core.estimate import RunTimes, model_of, progress, run_times_of
from desktop_queue.core.model import Job, State
from desktop_queue.core.result_view import (
    LARGE_TEXT_BYTES,
    SHOWN_TEXT_LIMIT,
    ResultContent,
    ResultKind,
    duration_text,
    human_bytes,
    no_result_reason,
    read_result,
    result_size_hint,
    with_line_breaks,
)
from desktop_queue.core.store.fileio import atomic_write
from desktop_queue.ui.flow_layout import FlowLayout
from desktop_queue.ui.icons import icon
from desktop_queue.ui.loader import Loader

#: a read that takes longer than this says "loading…" (a quick one never flashes it)
LOADING_DELAY_MS = 150
#: long text goes into its widget this many characters per event-loop turn
TEXT_SLICE = 64 * 1024
#: zoom steps of the image preview
ZOOM_STEP, ZOOM_MIN, ZOOM_MAX = 1.25, 0.05, 16.0
#: the run-time history is read again after this long (seconds)
RUN_TIMES_TTL_S = 300.0
LOADING_TEXT = "loading…"
#: an audio or other file's name is shortened in the middle past this many characters
MEDIA_NAME_CHARS = 33


def open_url(url: QUrl) -> bool:
    """Opens a file or folder with the system's application (tests replace this)."""
    return QDesktopServices.openUrl(url)


def reveal_file(path: Path) -> bool:
    """Shows ``path`` selected in the desktop's file manager (freedesktop ``FileManager1`` over D-Bus).

    False where no file manager answers (not Linux, no session bus): the caller opens
    the folder instead. Tests replace this.
    """
    if sys.platform != "linux":
        return False
    try:
        from PySide6.QtDBus import QDBusConnection, QDBusInterface, QDBusMessage
    except ImportError:
        return False
    bus = QDBusConnection.sessionBus()
    if not bus.isConnected():
        return False
    manager = QDBusInterface(
        "org.freedesktop.FileManager1", "/org/freedesktop/FileManager1", "org.freedesktop.FileManager1", bus
    )
    if not manager.isValid():
        return False
    reply = manager.call("ShowItems", [QUrl.fromLocalFile(str(path)).toString()], "")
    return reply.type() != QDBusMessage.MessageType.ErrorMessage


def ask_save_path(parent: QWidget, title: str, suggested: str, filters: str) -> str | None:
    """The file a person chose to save to, or None (tests replace this)."""
    path, _ = QFileDialog.getSaveFileName(parent, title, suggested, filters)
    return path or None


def multimedia() -> Any:
    """PySide6's QtMultimedia module, or None where it is not installed (PySide6-Essentials)."""
    try:
        return importlib.import_module("PySide6.QtMultimedia")
    except ImportError:
        return None


def file_stem(title: str, fallback: str) -> str:
    """A file name from a job's title: ``A haiku about queues`` -> ``A-haiku-about-queues``."""
    stem = re.sub(r"[^\w.-]+", "-", title).strip("-.")[:60]
    return stem or fallback


@dataclass(frozen=True)
class _Loaded:
    content: ResultContent
    image: QImage | None = None
    image_error: str | None = None


def load_result(results: Any, job: Job) -> _Loaded:
    """Reads a job's result and decodes its image, if any (runs off the GUI thread)."""
    content = read_result(results, job)
    if content.kind is ResultKind.IMAGE and content.path is not None:
        reader = QImageReader(str(content.path))
        reader.setAutoTransform(True)
        image = reader.read()
        if image.isNull():
            return _Loaded(content, None, reader.errorString())
        return _Loaded(content, image)
    return _Loaded(content)


class ImagePreview(QScrollArea):
    """An image, fitted to the view (never enlarged) or at a zoom factor.

    Signals:
        zoom_changed(str): the zoom as people read it (``fit · 43 %``, ``200 %``).
    """

    zoom_changed = Signal(str)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("imagePreview")
        self.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.label = QLabel()
        self.label.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.label.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Ignored)
        self.setWidget(self.label)
        self.setWidgetResizable(False)
        self._pixmap: QPixmap | None = None
        #: None: fit to the view
        self.zoom: float | None = None

    def set_image(self, image: QImage | None) -> None:
        self._pixmap = QPixmap.fromImage(image) if image is not None else None
        self.zoom = None
        self._apply()

    @property
    def pixmap(self) -> QPixmap | None:
        return self._pixmap

    def scale(self) -> float:
        """The factor the image is shown at now."""
        if self._pixmap is None or self._pixmap.isNull():
            return 1.0
        if self.zoom is not None:
            return self.zoom
        area = self.viewport().size()
        size = self._pixmap.size()
        if size.width() <= 0 or size.height() <= 0:
            return 1.0
        return min(1.0, area.width() / size.width(), area.height() / size.height())

    def fit(self) -> None:
        self.zoom = None
        self._apply()

    def actual_size(self) -> None:
        self.zoom = 1.0
        self._apply()

    def zoom_in(self) -> None:
        self.zoom = min(ZOOM_MAX, self.scale() * ZOOM_STEP)
        self._apply()

    def zoom_out(self) -> None:
        self.zoom = max(ZOOM_MIN, self.scale() / ZOOM_STEP)
        self._apply()

    def zoom_text(self) -> str:
        percent = f"{self.scale() * 100:.0f} %"
        return f"fit · {percent}" if self.zoom is None else percent

    def _apply(self) -> None:
        if self._pixmap is None or self._pixmap.isNull():
            self.label.clear()
            self.label.resize(self.viewport().size())
            self.zoom_changed.emit("")
            return
        factor = self.scale()
        size = QSize(max(1, round(self._pixmap.width() * factor)), max(1, round(self._pixmap.height() * factor)))
        shown = (
            self._pixmap
            if size == self._pixmap.size()
            else self._pixmap.scaled(
                size, Qt.AspectRatioMode.KeepAspectRatio, Qt.TransformationMode.SmoothTransformation
            )
        )
        self.label.setPixmap(shown)
        self.label.resize(size.expandedTo(self.viewport().size()) if self.zoom is None else size)
        self.zoom_changed.emit(self.zoom_text())

    def resizeEvent(self, event: Any) -> None:  # noqa: N802 - Qt API
        super().resizeEvent(event)
        if self.zoom is None:
            self._apply()

    def wheelEvent(self, event: QWheelEvent) -> None:  # noqa: N802 - Qt API
        """Ctrl + wheel zooms, as in image viewers; the wheel alone scrolls."""
        if event.modifiers() & Qt.KeyboardModifier.ControlModifier and self._pixmap is not None:
            steps = event.angleDelta().y()
            if steps > 0:
                self.zoom_in()
            elif steps < 0:
                self.zoom_out()
            event.accept()
            return
        super().wheelEvent(event)


class ResultView(QWidget):
    """The selected job's result, with Copy, Save as…, zoom, play and Show in folder.

    Args:
        queue: the job engine (its result store, and its history for run-time estimates).

    Signals:
        shown(str): a job's result (or why there is none) is on screen: the job id.
    """

    shown = Signal(str)

    def __init__(self, queue: Any, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("resultView")
        self.queue = queue
        self.job: Job | None = None
        self.content: ResultContent | None = None
        self.image: QImage | None = None
        self._loaded_key: tuple[str, str, str | None] | None = None
        self._pending = False
        self._feed: tuple[str, int] | None = None
        self._partial_text: str | None = None
        #: job id -> the text its running attempt has streamed so far (the driver's ``partial_of``)
        self.partial_source: Any = None
        self.run_times: RunTimes | None = None
        self._run_times_at: float | None = None
        self._player: Any = None
        self._audio_out: Any = None

        self.loader = Loader(self)
        self.loader.loaded.connect(self._loaded)
        self.loader.failed.connect(self._failed)
        self.times_loader = Loader(self)
        self.times_loader.loaded.connect(self._times_loaded)
        self.times_loader.failed.connect(lambda _s, _e: self._times_loaded(self.times_loader.serial, RunTimes()))
        self._loading_timer = QTimer(self)
        self._loading_timer.setSingleShot(True)
        self._loading_timer.setInterval(LOADING_DELAY_MS)
        self._loading_timer.timeout.connect(self._show_loading)
        self._feed_timer = QTimer(self)
        self._feed_timer.setInterval(0)
        self._feed_timer.timeout.connect(self._feed_slice)

        # (hidden until a job is chosen: the body alone says what to do, as the other panes do)
        self.heading = QLabel()
        self.heading.setObjectName("resultHeading")
        self.heading.setTextFormat(Qt.TextFormat.PlainText)
        self.heading.setWordWrap(True)
        font = self.heading.font()
        font.setBold(True)
        self.heading.setFont(font)
        self.heading.hide()
        self.summary = QLabel()
        self.summary.setObjectName("resultSummary")
        self.summary.setTextFormat(Qt.TextFormat.PlainText)
        self.summary.setWordWrap(True)
        self.summary.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)

        self.progress = QProgressBar()
        self.progress.setObjectName("runProgress")
        self.progress.setRange(0, 1000)
        self.progress.setTextVisible(False)
        self.progress.setMaximumHeight(10)
        self.progress_label = QLabel()
        self.progress_label.setObjectName("runProgressText")
        self.progress_label.setWordWrap(True)
        self.progress_box = QWidget()
        box = QVBoxLayout(self.progress_box)
        box.setContentsMargins(0, 0, 0, 0)
        box.addWidget(self.progress)
        box.addWidget(self.progress_label)
        self.progress_box.hide()

        def button(text: str, tip: str, name: str, icon_name: str = "") -> QPushButton:
            b = QPushButton(icon(icon_name), text) if icon_name else QPushButton(text)
            b.setObjectName(name)
            b.setToolTip(tip)
            b.setAutoDefault(False)
            return b

        def small(text: str, tip: str, name: str) -> QToolButton:
            b = QToolButton()
            b.setText(text)
            b.setObjectName(name)
            b.setToolTip(tip)
            b.setMinimumWidth(32)
            return b

        self.copy_button = button(
            "&Copy", "Copy the result (text, image, or the file's path)", "copyResult", "action-copy"
        )
        self.save_button = button("Save &as…", "Save the result to a file", "saveResult")
        self.plain_check = QCheckBox("&Plain")
        self.plain_check.setObjectName("plainText")
        self.plain_check.setToolTip("Show the text as it is, without rendering its Markdown")
        self.zoom_out_button = small("−", "Zoom out", "zoomOut")
        self.zoom_label = QLabel()
        self.zoom_label.setObjectName("zoomLevel")
        self.zoom_label.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.zoom_label.setMinimumWidth(self.zoom_label.fontMetrics().horizontalAdvance("fit · 100 %") + 8)
        self.zoom_label.setMinimumHeight(self.copy_button.sizeHint().height())
        self.zoom_in_button = small("+", "Zoom in", "zoomIn")
        self.actual_button = small("100 %", "Show the image at its actual size", "zoomActual")
        self.fit_button = small("Fit", "Fit the image to the view (never enlarged)", "zoomFit")
        for b in (self.zoom_out_button, self.zoom_in_button, self.actual_button, self.fit_button):
            b.setMinimumHeight(self.copy_button.sizeHint().height())
        self.open_button = button("Op&en", "Open with the system's viewer or player", "openResult")
        # Play and Show in folder have no Alt letter: beside the panes' Replay and the File menu no letter is free
        self.play_button = button("Play", "Play the audio", "playAudio")
        self.folder_button = button("Show in folder", "Open the folder that holds the file", "showInFolder")
        self.tools = QWidget()
        self.tools.setObjectName("resultTools")
        tools = FlowLayout(self.tools)
        for widget in (
            self.copy_button,
            self.save_button,
            self.plain_check,
            self.zoom_out_button,
            self.zoom_label,
            self.zoom_in_button,
            self.actual_button,
            self.fit_button,
            self.play_button,
            self.open_button,
            self.folder_button,
        ):
            tools.addWidget(widget)
        self.note = QLabel()
        self.note.setObjectName("resultNote")
        self.note.setWordWrap(True)
        self.note.setTextFormat(Qt.TextFormat.PlainText)

        self.message = QLabel()
        self.message.setObjectName("resultMessage")
        self.message.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.message.setWordWrap(True)
        self.message.setTextFormat(Qt.TextFormat.PlainText)
        self.message.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.markdown = QTextBrowser()
        self.markdown.setObjectName("resultMarkdown")
        self.markdown.setOpenExternalLinks(True)
        self.plain = QPlainTextEdit()
        self.plain.setObjectName("resultPlain")
        self.plain.setReadOnly(True)
        self.plain.setTextInteractionFlags(
            Qt.TextInteractionFlag.TextSelectableByMouse | Qt.TextInteractionFlag.TextSelectableByKeyboard
        )
        self.image_view = ImagePreview()
        self.image_view.zoom_changed.connect(self.zoom_label.setText)
        self.media = QLabel()
        self.media.setObjectName("resultMedia")
        self.media.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.media.setWordWrap(True)
        self.media.setTextFormat(Qt.TextFormat.PlainText)
        self.media.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.pages = QStackedWidget()
        for page in (self.message, self.markdown, self.plain, self.image_view, self.media):
            self.pages.addWidget(page)

        top = QVBoxLayout(self)
        top.setContentsMargins(0, 0, 0, 0)
        top.addWidget(self.heading)
        top.addWidget(self.summary)
        top.addWidget(self.progress_box)
        top.addWidget(self.tools)
        top.addWidget(self.pages, 1)
        top.addWidget(self.note)

        self.copy_button.clicked.connect(self.copy)
        self.save_button.clicked.connect(self.save_as)
        self.plain_check.toggled.connect(self._show_text)
        self.zoom_in_button.clicked.connect(self.image_view.zoom_in)
        self.zoom_out_button.clicked.connect(self.image_view.zoom_out)
        self.actual_button.clicked.connect(self.image_view.actual_size)
        self.fit_button.clicked.connect(self.image_view.fit)
        self.open_button.clicked.connect(self.open_externally)
        self.play_button.clicked.connect(self.play)
        self.folder_button.clicked.connect(self.show_in_folder)
        self._set_tools(None)
        self._show_message("Select a job to see its result")

    # ----------------------------------------------------------------- feeding

    def show_job(self, job: Job | None) -> None:
        """Shows ``job``'s result (read when this view is visible), or a prompt to select one."""
        changed = job is None or self.job is None or job.id != self.job.id
        self.job = job
        if changed or job is None or job.state != State.RUNNING:
            self._partial_text = None
        if changed:
            self.note.clear()
            self._stop_audio()
        self._update_progress()
        if job is None:
            self.loader.cancel()
            self._loaded_key = None
            self.content = None
            self.heading.clear()
            self.heading.hide()
            self._set_summary("")
            self._set_tools(None)  # (no Copy or zoom buttons left over from the job shown before)
            self._show_message("Select a job to see its result")
            return
        self.heading.setText(f"{job.title}  ·  job {job.id}")
        self.heading.show()
        key = (job.id, job.state, job.result_ref)
        if key == self._loaded_key:
            return
        if self.isVisible():
            self._load()
        else:
            self._pending = True

    def update_job(self, job: Job) -> None:
        """The shown job changed (its state, its result): reads its result again if that changed."""
        if self.job is not None and job.id == self.job.id:
            if self.run_times is not None and job.state == State.SUCCEEDED:
                self.run_times.observe(_times_of(job))
            self.show_job(job)

    def tick(self) -> None:
        """The window's refresh tick: moves a running job's progress on (nothing while hidden)."""
        if self.isVisible():
            self._update_progress()

    def show_partial(self, job_id: str, text: str) -> None:
        """A streaming attempt's text so far (the driver's ``partial_text``): shown while the job runs.

        Nothing of it is kept: when the job succeeds its stored result replaces it.
        """
        job = self.job
        if job is None or job.id != job_id or job.state != State.RUNNING:
            return
        previous = self._partial_text
        self._partial_text = text
        self._set_summary(f"streaming… {len(text):,} characters so far (the answer is stored once complete)")
        self._set_tools(None)
        self.content = None
        as_markdown = not self.plain_check.isChecked() and len(text) <= LARGE_TEXT_BYTES
        if as_markdown:
            self.markdown.setMarkdown(with_line_breaks(text))
            self.pages.setCurrentWidget(self.markdown)
            bar = self.markdown.verticalScrollBar()
            bar.setValue(bar.maximum())
            return
        self.pages.setCurrentWidget(self.plain)
        if previous is not None and text.startswith(previous) and self.plain.document().characterCount() > 1:
            cursor = self.plain.textCursor()
            cursor.movePosition(cursor.MoveOperation.End)
            cursor.insertText(text[len(previous) :])
        else:
            self.plain.setPlainText(text)
        bar = self.plain.verticalScrollBar()
        bar.setValue(bar.maximum())

    @property
    def partial_text(self) -> str | None:
        """The streamed text shown for the running job, or None."""
        return self._partial_text

    def showEvent(self, event: QShowEvent) -> None:  # noqa: N802 - Qt API
        super().showEvent(event)
        self._update_progress()
        if self._pending and self.job is not None:
            self._load()

    def _load(self) -> None:
        job = self.job
        assert job is not None
        self._pending = False
        self._loaded_key = (job.id, job.state, job.result_ref)
        self._feed_timer.stop()
        self._feed = None
        if not job.result_ref:
            self.loader.cancel()
            self._loading_timer.stop()
            self._present(_Loaded(ResultContent(ResultKind.NONE, no_result_reason(job))))
            streamed = self.partial_source(job.id) if self.partial_source is not None else None
            if streamed and job.state == State.RUNNING:
                self.show_partial(job.id, streamed)  # opened mid-stream: what came so far
            return
        results = self.queue.results
        hint = result_size_hint(results, job)
        self.loader.start(lambda: load_result(results, job))
        if hint is not None and hint > LARGE_TEXT_BYTES:
            self._show_loading(f"{LOADING_TEXT} ({human_bytes(hint)})")
        else:
            self._loading_timer.start()

    def _show_loading(self, text: str = LOADING_TEXT) -> None:
        self._loading_timer.stop()
        self._set_summary("")  # (the page says it)
        self._set_tools(None)
        self._show_message(text)

    def _loaded(self, serial: int, value: object) -> None:
        if self.loader.is_current(serial) and isinstance(value, _Loaded):
            self._loading_timer.stop()
            self._present(value)

    def _failed(self, serial: int, error: object) -> None:
        if not self.loader.is_current(serial):
            return
        self._loading_timer.stop()
        why = str(error) if isinstance(error, QueueError) else f"{type(error).__name__}: {error}"
        self._present(_Loaded(ResultContent(ResultKind.NONE, f"the result could not be read: {why}", problem=why)))

    # ----------------------------------------------------------------- showing

    def _present(self, loaded: _Loaded) -> None:
        content = loaded.content
        self.content = content
        self.image = loaded.image
        # no result: the page says why ("running — no result yet"), once
        self._set_summary(content.message if content.kind is not ResultKind.NONE else "")
        self._set_tools(content)
        if content.kind is ResultKind.NONE:
            self._show_message(content.message)
        elif content.kind in (ResultKind.TEXT, ResultKind.JSON):
            self._show_text()
        elif content.kind is ResultKind.IMAGE:
            if loaded.image is None:
                self._show_message(f"The image could not be shown: {loaded.image_error or 'unknown format'}")
            else:
                self.image_view.set_image(loaded.image)
                self.pages.setCurrentWidget(self.image_view)
        else:
            self._show_media(content)
        if self.job is not None:
            self.shown.emit(self.job.id)

    def _set_summary(self, text: str) -> None:
        self.summary.setText(text)
        self.summary.setVisible(bool(text))

    def _show_message(self, text: str) -> None:
        self.message.setText(text)
        self.pages.setCurrentWidget(self.message)
        self.plain_check.setVisible(False)

    def _show_media(self, content: ResultContent) -> None:
        name = content.path.name if content.path is not None else "?"
        if len(name) > MEDIA_NAME_CHARS:
            # a result file is named by its key's hash: one word a label cannot wrap, which
            # ran past the pane's right edge; Show in folder and the tooltip have it whole
            half = (MEDIA_NAME_CHARS - 1) // 2
            name = f"{name[:half]}…{name[-half:]}"
        self.media.setToolTip(str(content.path) if content.path is not None else "")
        if content.kind is ResultKind.AUDIO:
            length = duration_text(content.duration_s) if content.duration_s is not None else "length unknown"
            text = f"Audio · {length}\n{content.mime} · {human_bytes(content.size)}\n{name}"
        else:
            text = f"A file: {name}\n{content.mime} · {human_bytes(content.size)}"
        self.media.setText(text)
        self.pages.setCurrentWidget(self.media)

    def _set_tools(self, content: ResultContent | None) -> None:
        kind = content.kind if content is not None else ResultKind.NONE
        textual = kind in (ResultKind.TEXT, ResultKind.JSON)
        self.copy_button.setVisible(kind is not ResultKind.NONE)
        self.save_button.setVisible(kind is not ResultKind.NONE)
        self.plain_check.setVisible(kind is ResultKind.TEXT)
        too_big = content is not None and (content.size or 0) > LARGE_TEXT_BYTES
        self.plain_check.setEnabled(not too_big)
        self.plain_check.setToolTip(
            "Markdown is not rendered for text over 256 KiB: it is shown plain"
            if too_big
            else "Show the text as it is, without rendering its Markdown"
        )
        image = kind is ResultKind.IMAGE
        for widget in (self.zoom_out_button, self.zoom_label, self.zoom_in_button, self.actual_button, self.fit_button):
            widget.setVisible(image)
        self.play_button.setVisible(kind is ResultKind.AUDIO)
        has_mm = multimedia() is not None
        self.play_button.setText("Play" if has_mm else "Play in system player")
        self.open_button.setVisible(content is not None and content.is_artifact)
        self.open_button.setText("Op&en with system viewer" if image else "Op&en")
        self.folder_button.setVisible(content is not None and content.path is not None and content.path.exists())
        if not textual:
            self.plain.clear()
            self.markdown.clear()

    def _show_text(self, *_: object) -> None:
        content = self.content
        if content is None or content.text is None:
            return
        text = content.text
        cut = len(text) > SHOWN_TEXT_LIMIT
        shown = text[:SHOWN_TEXT_LIMIT] if cut else text
        if cut:
            self.note.setText(
                f"Showing the first {human_bytes(SHOWN_TEXT_LIMIT)} of {human_bytes(content.size)}: "
                "Copy and Save as… take all of it."
            )
        big = (content.size or 0) > LARGE_TEXT_BYTES
        as_markdown = content.kind is ResultKind.TEXT and not self.plain_check.isChecked() and not big
        if as_markdown:
            self.markdown.setMarkdown(with_line_breaks(shown))
            self.pages.setCurrentWidget(self.markdown)
            return
        fixed = content.kind is ResultKind.JSON
        self.plain.setFont(
            QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont) if fixed else QGuiApplication.font()
        )
        self.pages.setCurrentWidget(self.plain)
        if len(shown) <= TEXT_SLICE:
            self.plain.setPlainText(shown)
            return
        self.plain.clear()
        self._feed = (shown, 0)
        self._feed_slice()
        self._feed_timer.start()

    def _feed_slice(self) -> None:
        if self._feed is None:
            self._feed_timer.stop()
            return
        text, at = self._feed
        cursor = self.plain.textCursor()
        cursor.movePosition(cursor.MoveOperation.End)
        cursor.insertText(text[at : at + TEXT_SLICE])
        at += TEXT_SLICE
        if at >= len(text):
            self._feed = None
            self._feed_timer.stop()
            self.plain.moveCursor(cursor.MoveOperation.Start)
        else:
            self._feed = (text, at)

    @property
    def feeding(self) -> bool:
        """True while long text is still going into its widget."""
        return self._feed is not None

    # ----------------------------------------------------------------- progress

    def _update_progress(self) -> None:
        job = self.job
        if job is None or job.state != State.RUNNING or job.started_at is None:
            self.progress_box.hide()
            return
        if self.run_times is None or (
            self._run_times_at is not None and time.monotonic() - self._run_times_at > RUN_TIMES_TTL_S
        ):
            self._read_run_times()
        elapsed = max(0.0, self.queue.clock.now() - job.started_at)
        usual = self.run_times.usual(job.kind, model_of({"input": job.input})) if self.run_times else None
        estimate = progress(elapsed, usual)
        if estimate.fraction is None:
            if usual is None:
                self.progress.setRange(0, 1000)  # nothing to compare with: an empty bar, not a busy one
                self.progress.setValue(0)
            else:
                self.progress.setRange(0, 0)  # past the usual time: busy
        else:
            self.progress.setRange(0, 1000)
            self.progress.setValue(round(estimate.fraction * 1000))
        self.progress_label.setText(estimate.text)
        self.progress_box.show()

    def _read_run_times(self) -> None:
        if self._run_times_at is not None and self.run_times is None:
            return  # a read is under way
        self._run_times_at = time.monotonic()
        queue = self.queue
        self.times_loader.start(lambda: run_times_of(queue))

    def _times_loaded(self, serial: int, value: object) -> None:
        if self.times_loader.is_current(serial) and isinstance(value, RunTimes):
            self.run_times = value
            self._run_times_at = time.monotonic()
            self._update_progress()

    # ----------------------------------------------------------------- actions

    def copy(self) -> None:
        """Copies the text, the image, or the artifact file's path."""
        content = self.content
        if content is None or not content.has_result:
            return
        clipboard = QGuiApplication.clipboard()
        if content.text is not None:
            clipboard.setText(content.text)
            self.note.setText(f"Copied {len(content.text):,} characters")
        elif content.kind is ResultKind.IMAGE and self.image is not None:
            clipboard.setImage(self.image)
            self.note.setText("Copied the image")
        elif content.path is not None:
            clipboard.setText(str(content.path))
            self.note.setText(f"Copied the path: {content.path}")

    def suggested_name(self) -> str:
        content = self.content
        job = self.job
        stem = file_stem(job.title, job.id) if job is not None else "result"
        if content is None:
            return stem
        if content.path is not None:
            return f"{stem}{content.path.suffix}"
        if content.kind is ResultKind.JSON:
            return f"{stem}.json"
        return f"{stem}.txt" if self.plain_check.isChecked() else f"{stem}.md"

    def save_as(self) -> None:
        """Asks where to, then writes the whole result there (atomically)."""
        content = self.content
        if content is None or not content.has_result:
            return
        if content.path is not None:
            filters = f"{content.mime} (*{content.path.suffix});;All files (*)"
        elif content.kind is ResultKind.JSON:
            filters = "JSON (*.json);;All files (*)"
        else:
            filters = "Markdown (*.md);;Text (*.txt);;All files (*)"
        target = ask_save_path(self, "Save result", self.suggested_name(), filters)
        if not target:
            return
        try:
            data = content.text.encode() if content.text is not None else Path(str(content.path)).read_bytes()
            atomic_write(Path(target), data)
        except (OSError, QueueError) as exc:
            self.note.setText(f"Could not save to {target}: {getattr(exc, 'strerror', None) or exc}")
            return
        self.note.setText(f"Saved {human_bytes(len(data))} to {target}")

    def open_externally(self) -> None:
        """Opens the artifact with the system's viewer or player."""
        path = self.content.path if self.content is not None else None
        if path is not None and not open_url(QUrl.fromLocalFile(str(path))):
            self.note.setText(f"No application opens {path.name} on this system")

    def show_in_folder(self) -> None:
        """Shows the artifact file in the file manager (selected where it can), else opens its folder."""
        if self.content is not None and self.content.path is not None:
            folder = self.content.path.parent
            if reveal_file(self.content.path):
                self.note.setText(f"Shown in the file manager: {self.content.path}")
            elif open_url(QUrl.fromLocalFile(str(folder))):
                self.note.setText(f"The file is {self.content.path.name} in {folder}")
            else:
                self.note.setText(f"Could not open {folder}")

    def play(self) -> None:
        """Plays the audio here (QtMultimedia) or in the system's player."""
        content = self.content
        if content is None or content.path is None:
            return
        mm = multimedia()
        if mm is None:
            self.open_externally()
            return
        if self._player is not None and self._player.isPlaying():
            self._stop_audio()
            return
        if self._player is None:
            self._player = mm.QMediaPlayer(self)
            self._audio_out = mm.QAudioOutput(self)
            self._player.setAudioOutput(self._audio_out)
        self._player.setSource(QUrl.fromLocalFile(str(content.path)))
        self._player.play()
        self.play_button.setText("Stop")

    def _stop_audio(self) -> None:
        if self._player is not None:
            self._player.stop()
            self.play_button.setText("Play")


def _times_of(job: Job) -> dict[str, Any]:
    return {
        "id": job.id,
        "kind": job.kind,
        "state": job.state,
        "started_at": job.started_at,
        "finished_at": job.finished_at,
        "input": {"model": model_of({"input": job.input})},
    }
