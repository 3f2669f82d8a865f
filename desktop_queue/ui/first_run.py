"""The queue pane's first-run state: what to do when the store holds no job yet.

Signals go to the window, which submits the demo job or opens Preferences on a new
provider profile; this widget holds no business rule.
"""

from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import QHBoxLayout, QLabel, QPushButton, QVBoxLayout, QWidget

from desktop_queue.ui.icons import icon

#: the demo job "Try a demo job" submits: short, so the whole life of a job is seen at once
DEMO_INPUT = {"prompt": "Hello from Desktop Queue: this is what a finished job looks like", "duration_s": 3}
DEMO_TITLE = "My first demo job"


class FirstRunPanel(QWidget):
    """ "No jobs yet": a short explanation and the two first steps.

    Signals:
        demo_requested(): "Try a demo job" was clicked.
        connect_requested(): "Connect a provider" was clicked.
    """

    demo_requested = Signal()
    connect_requested = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("firstRun")
        picture = QLabel()
        picture.setPixmap(icon("app").pixmap(64, 64))
        picture.setAlignment(Qt.AlignmentFlag.AlignCenter)
        title = QLabel("No jobs yet")
        title.setObjectName("firstRunTitle")
        font = title.font()
        font.setPointSizeF(font.pointSizeF() * 1.5)
        font.setBold(True)
        title.setFont(font)
        title.setAlignment(Qt.AlignmentFlag.AlignCenter)
        text = QLabel(
            "Desktop Queue runs AI jobs (chat, images, speech) on this machine and never loses one: "
            "jobs wait, retry and resume after a crash.\n\n"
            "Try a demo job to watch one run (it calls no provider and costs nothing), or connect a "
            "provider: OpenAI with an API key, or a server on this machine such as Ollama, "
            "llama.cpp or LM Studio."
        )
        text.setObjectName("firstRunText")
        text.setWordWrap(True)
        text.setAlignment(Qt.AlignmentFlag.AlignCenter)
        text.setMaximumWidth(520)
        self.demo_button = QPushButton(icon("action-new"), "&Try a demo job")
        self.demo_button.setObjectName("tryDemo")
        self.demo_button.setToolTip("Submits a short demo job and selects it, so you can follow its timeline")
        self.demo_button.setDefault(True)
        self.connect_button = QPushButton(icon("action-preferences"), "&Connect a provider…")
        self.connect_button.setObjectName("connectProvider")
        self.connect_button.setToolTip(
            "Opens Preferences on a new provider profile (OpenAI, Ollama, llama.cpp, LM Studio)"
        )
        self.demo_button.clicked.connect(self.demo_requested)
        self.connect_button.clicked.connect(self.connect_requested)
        buttons = QHBoxLayout()
        buttons.addStretch(1)
        buttons.addWidget(self.demo_button)
        buttons.addWidget(self.connect_button)
        buttons.addStretch(1)
        hint = QLabel("Or press Ctrl+N to write a job, or submit from a terminal: desktop-queue submit demo …")
        hint.setObjectName("firstRunHint")
        hint.setWordWrap(True)
        hint.setAlignment(Qt.AlignmentFlag.AlignCenter)
        hint.setEnabled(False)  # greyed: secondary
        layout = QVBoxLayout(self)
        layout.addStretch(2)
        layout.addWidget(picture)
        layout.addWidget(title)
        layout.addSpacing(8)
        row = QHBoxLayout()
        row.addStretch(1)
        row.addWidget(text, 0)
        row.addStretch(1)
        layout.addLayout(row)
        layout.addSpacing(16)
        layout.addLayout(buttons)
        layout.addSpacing(12)
        layout.addWidget(hint)
        layout.addStretch(3)
