"""The Replay dialog edits the input with the kind's generated form (JSON tab beside it), with
the preview live and "Discard this prompt?" before edits are thrown away."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from keyring.backend import KeyringBackend
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QComboBox

from desktop_queue.core import Outcome
from desktop_queue.core.model import State
from desktop_queue.providers.demo import DemoProvider
from desktop_queue.providers.openai_compat import key_fingerprint, make_providers
from desktop_queue.providers.profiles import ProfileSet, save_profiles
from desktop_queue.providers.setup import ProfileConfig
from desktop_queue.ui.dialogs import ReplayDialog


class EmptyKeyring(KeyringBackend):
    """A keyring with nothing in it (never the user's)."""

    priority = 1  # type: ignore[assignment]

    def get_password(self, service: str, username: str) -> str | None:
        return None

    def set_password(self, service: str, username: str, password: str) -> None:
        raise AssertionError("the test stores no key")

    def delete_password(self, service: str, username: str) -> None:
        return None


@pytest.fixture
def providers(stubborn: Any) -> dict[str, Any]:
    """The demo and the openai kinds of one environment profile (never called: nothing is leased)."""
    return {"demo": DemoProvider(tick_s=0.01), **make_providers(), "stubborn": stubborn}


def dead(session: Any, kind: str, payload: Any, status: int = 401, key_fp: str | None = None) -> Any:
    """A job of ``kind`` dead-lettered with a fatal HTTP ``status`` (the runtime is not leasing)."""
    queue = session.queue
    job = queue.submit(kind, payload, title="the original", max_attempts=1).job
    lease = queue.lease("test")
    assert lease is not None and lease.job_id == job.id
    queue.fail(lease, Outcome.failure("fatal", f"{kind}: HTTP {status} refused", status=status, key_fp=key_fp))
    found = queue.get(job.id)
    assert found.state == State.DEAD
    return found


def open_replay(qtbot: Any, session: Any, job: Any) -> ReplayDialog:
    dialog = ReplayDialog(session.controller, job, session.window)
    qtbot.addWidget(dialog)
    dialog.open()
    return dialog


@pytest.fixture
def still(open_session: Any, data_dir: Path) -> Any:
    session = open_session(data_dir, lease=False)
    assert not isinstance(session, int)
    session.window.show()
    return session


def test_the_form_edits_the_input_and_the_preview_follows(qtbot: Any, still: Any, prompts: Any) -> None:
    job = dead(still, "demo", {"prompt": "A poem about otters", "duration_s": 0.0})
    dialog = open_replay(qtbot, still, job)
    assert dialog.form is not None and dialog.tabs.currentIndex() == dialog.FORM_TAB
    assert dialog.form.isEnabled() and dialog.form.values()["prompt"] == "A poem about otters"
    assert dialog.focusWidget() is dialog.form.editor("prompt")
    assert "likely to fail again" in dialog.preview.text()
    assert not dialog.edited()
    # editing the prompt in the form: the preview names the new job by it, the JSON tab follows
    dialog.form.set_value("prompt", "An otter poem, take two\nwith rhyme")
    assert dialog.edited() and dialog.current_preview.edited
    assert "An otter poem, take two" in dialog.preview.text()
    assert json.loads(dialog.json_text()) == {"prompt": "An otter poem, take two\nwith rhyme", "duration_s": 0.0}
    # and back: the JSON tab edits the form
    dialog.tabs.setCurrentIndex(dialog.JSON_TAB)
    dialog.editor.setPlainText('{"prompt": "Otters, third take", "duration_s": 0.0}')
    assert dialog.form.values()["prompt"] == "Otters, third take"
    assert "Otters, third take" in dialog.preview.text()
    dialog.tabs.setCurrentIndex(dialog.FORM_TAB)
    # Escape asks first; "Keep editing" keeps everything
    prompts.answer = False
    qtbot.keyClick(dialog, Qt.Key.Key_Escape)
    assert dialog.isVisible() and prompts.confirms[-1].startswith("Discard this prompt?")
    assert dialog.form.values()["prompt"] == "Otters, third take"
    assert still.queue.counts()["queued"] == 0  # the preview queues nothing
    assert dialog.try_replay()
    new = still.queue.get(dialog.new_job.id) if dialog.new_job else None
    assert new is not None and new.replay_of == job.id
    assert new.input == {"prompt": "Otters, third take", "duration_s": 0.0}
    assert new.title == "Otters, third take"


def test_an_unedited_replay_keeps_the_input_exactly_and_closes_without_asking(
    qtbot: Any, still: Any, prompts: Any
) -> None:
    original = {"prompt": "same again", "duration_s": 0.0, "fail_times": 0}  # a default spelled out
    job = dead(still, "demo", original)
    dialog = open_replay(qtbot, still, job)
    assert dialog.form is not None and dialog.form.isEnabled()
    assert not dialog.edited() and dialog.payload() == original
    assert json.loads(dialog.json_text()) == original
    assert "with the same input" in dialog.message.text.text()
    asked = len(prompts.confirms)
    qtbot.keyClick(dialog, Qt.Key.Key_Escape)
    assert not dialog.isVisible() and len(prompts.confirms) == asked
    again = open_replay(qtbot, still, job)
    assert again.try_replay() and again.new_job is not None
    assert still.queue.get(again.new_job.id).input == original


def test_an_input_the_form_cannot_show_is_edited_as_json(qtbot: Any, still: Any) -> None:
    job = dead(still, "openai.chat", {"prompt": "x", "stop": ["\n"]}, status=400)
    dialog = open_replay(qtbot, still, job)
    assert dialog.form is not None and not dialog.form.isEnabled()
    assert dialog.tabs.currentIndex() == dialog.JSON_TAB
    assert not dialog.form_note.isHidden() and '"stop"' in dialog.form_note.text.text()
    assert "HTTP 400" in dialog.preview.text()
    dialog.editor.setPlainText('{"prompt": "now it fits"}')
    assert dialog.form.isEnabled() and dialog.form.values()["prompt"] == "now it fits"
    dialog.editor.setPlainText("{broken")
    assert not dialog.replay_button.isEnabled() and "not valid JSON" in dialog.message.text.text()
    assert not dialog.form.isEnabled()


def test_an_image_replay_is_one_job_and_keeps_its_copy_number(qtbot: Any, still: Any) -> None:
    job = dead(still, "openai.image", {"prompt": "a lighthouse", "copy": 2}, status=400)
    dialog = open_replay(qtbot, still, job)
    assert dialog.form is not None and dialog.form.isEnabled()
    assert not dialog.form.editor("count").isVisibleTo(dialog)  # a replay is one job
    assert dialog.payload() == {"prompt": "a lighthouse", "copy": 2}
    dialog.form.set_value("prompt", "a lighthouse at dusk")
    assert dialog.payload() == {"prompt": "a lighthouse at dusk", "copy": 2}
    dialog.form.set_value("prompt", "a lighthouse")
    assert not dialog.edited()


@pytest.fixture
def lab_session(open_session: Any, data_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    monkeypatch.setenv("DESKTOP_QUEUE_CONFIG_DIR", str(tmp_path / "config"))
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    save_profiles(
        ProfileSet(
            (
                ProfileConfig(name="main", base_url="http://127.0.0.1:9/v1", model="main-model", require_key=False),
                ProfileConfig(name="lab", base_url="http://127.0.0.1:8/v1", model="lab-model", models=("lab-small",)),
            ),
            default="main",
        )
    )
    import keyring

    previous = keyring.get_keyring()
    keyring.set_keyring(EmptyKeyring())  # lab has no key in it
    session = open_session(data_dir, providers=None, lease=False)
    assert not isinstance(session, int)
    session.window.show()
    yield session
    keyring.set_keyring(previous)


def test_a_dead_job_of_profile_lab_is_previewed_and_edited_as_lab(qtbot: Any, lab_session: Any) -> None:
    job = dead(lab_session, "openai.chat", {"profile": "lab", "prompt": "tides"}, key_fp=key_fingerprint("sk-x"))
    dialog = open_replay(qtbot, lab_session, job)
    assert dialog.form is not None and dialog.form.isEnabled()
    profile, model = dialog.form.editor("profile"), dialog.form.editor("model")
    assert isinstance(profile, QComboBox) and isinstance(model, QComboBox)
    assert profile.currentData() == "lab"
    assert [model.itemText(i) for i in range(model.count())] == ["lab-model", "lab-small"]
    text = dialog.preview.text()
    assert "Profile lab cannot run jobs now: no API key for profile lab" in text, text
    assert "profile lab has no key now" in text
    assert "profile main" not in text
    # replaying on main instead: the preview says lab refused the key, and main has nothing against it
    profile.setCurrentIndex(profile.findData("main"))
    text = dialog.preview.text()
    assert "runs on profile main instead" in text and "no API key for profile lab" not in text
    assert [model.itemText(i) for i in range(model.count())] == ["main-model"]
    assert json.loads(dialog.json_text())["profile"] == "main"
    assert dialog.try_replay() and dialog.new_job is not None
    assert lab_session.queue.get(dialog.new_job.id).input == {"profile": "main", "prompt": "tides"}


def test_the_preview_ends_a_provider_s_own_sentence_once(qtbot: Any, still: Any, prompts: Any) -> None:
    """LiteLLM's 400 ended "… to view available models for your key." and the preview added another stop."""
    queue = still.queue
    job = queue.submit("demo", {"prompt": "p", "duration_s": 0.0}, title="the original", max_attempts=1).job
    lease = queue.lease("test")
    assert lease is not None
    message = "demo: HTTP 400: Invalid model name. Call `/v1/models` to view available models for your key."
    queue.fail(lease, Outcome.failure("fatal", message, status=400))
    dialog = open_replay(qtbot, still, queue.get(job.id))
    text = dialog.preview.text()
    assert "for your key." in text and "key.." not in text and ".." not in text
    dialog.reject()


def test_the_profile_choice_shows_its_whole_label(qtbot: Any, still: Any, prompts: Any) -> None:
    """Replay's profile box read "the default profile (llamacp": 18 characters wide for 30."""
    from PySide6.QtGui import QFontMetrics
    from PySide6.QtWidgets import QComboBox

    job = dead(still, "openai.chat", {"prompt": "hello"}, status=400)
    dialog = open_replay(qtbot, still, job)
    assert dialog.form is not None
    combo = dialog.form.editor("profile")
    assert isinstance(combo, QComboBox)
    text = combo.currentText()
    assert text.startswith("the default profile (")
    assert combo.minimumContentsLength() >= len(text)  # (it kept 18 characters: a longer name was cut)
    qtbot.waitUntil(lambda: combo.width() > QFontMetrics(combo.font()).horizontalAdvance(text) + 20, timeout=3000)
    dialog.reject()
