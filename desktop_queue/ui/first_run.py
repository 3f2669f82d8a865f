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


#: the explanation's second paragraph, without a provider profile and with one
_NOTHING_SET_UP = (
    "Try a demo job to watch one run (it calls no provider and costs nothing), or connect a "
    "provider: OpenAI with an API key, or a server on this machine such as Ollama, "
    "llama.cpp or LM Studio."
)
_SET_UP = (
    "Your {providers} {names} {is_are} set up: write a job, or try a demo job to watch one run "
    "(it calls no provider and costs nothing). Preferences → Providers adds another."
)


class FirstRunPanel(QWidget):
    """ "No jobs yet": a short explanation and the two first steps.

    Without a provider profile the steps are a demo job and connecting a provider; once
    one is set up (:meth:`set_profiles`), writing a job for it comes first.

    Signals:
        demo_requested(): "Try a demo job" was clicked.
        connect_requested(): "Connect a provider" was clicked.
        write_requested(): "Write a job" was clicked (a provider is set up).
    """

    demo_requested = Signal()
    connect_requested = Signal()
    write_requested = Signal()

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
        self.text = text = QLabel()
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
        self.write_button = QPushButton(icon("action-new"), "&Write a job…")
        self.write_button.setObjectName("writeJob")
        self.write_button.setToolTip("Opens New job on your provider (Ctrl+N)")
        self.write_button.hide()
        self.demo_button.clicked.connect(self.demo_requested)
        self.connect_button.clicked.connect(self.connect_requested)
        self.write_button.clicked.connect(self.write_requested)
        buttons = QHBoxLayout()
        buttons.addStretch(1)
        buttons.addWidget(self.write_button)
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
        self._profiles: list[str] | None = None
        self.set_profiles([])

    def set_profiles(self, names: list[str]) -> None:
        """The provider profiles set up (none: the demo and "Connect a provider" are the steps)."""
        if names == self._profiles:
            return
        self._profiles = list(names)
        intro = (
            "Desktop Queue runs AI jobs (chat, images, speech) on this machine and never loses one: "
            "jobs wait, retry and resume after a crash.\n\n"
        )
        if names:
            shown = ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
            one = len(names) == 1
            self.text.setText(
                intro
                + _SET_UP.format(
                    providers="provider" if one else "providers", names=shown, is_are="is" if one else "are"
                )
            )
        else:
            self.text.setText(intro + _NOTHING_SET_UP)
        self.write_button.setVisible(bool(names))
        self.connect_button.setVisible(not names)
        self.write_button.setDefault(bool(names))
        self.demo_button.setDefault(not names)
