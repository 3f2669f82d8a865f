"""The openai.* forms offer the configured profiles; the model list follows the profile picked;
the input names the profile and runs on that profile's server (a real fake server per profile)."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QComboBox

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "providers"))

from fakeserver import FakeOpenAI  # noqa: E402

from desktop_queue.core.batchinput import BatchFormat  # noqa: E402
from desktop_queue.core.model import State  # noqa: E402
from desktop_queue.providers.profiles import ProfileSet, save_profiles  # noqa: E402
from desktop_queue.providers.setup import ProfileConfig  # noqa: E402
from desktop_queue.ui.dialogs import SubmitDialog  # noqa: E402


@pytest.fixture
def servers() -> Iterator[dict[str, FakeOpenAI]]:
    found = {"main": FakeOpenAI(api_key=None), "lab": FakeOpenAI(api_key=None)}
    for server in found.values():
        server.start()
    yield found
    for server in found.values():
        server.stop()


@pytest.fixture
def two_profiles(servers: dict[str, FakeOpenAI], monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> ProfileSet:
    monkeypatch.setenv("DESKTOP_QUEUE_CONFIG_DIR", str(tmp_path / "config"))
    profiles = ProfileSet(
        (
            ProfileConfig(
                name="main",
                base_url=servers["main"].url,
                model="main-model",
                models=("main-model", "main-big"),
                require_key=False,
            ),
            ProfileConfig(
                name="lab", base_url=servers["lab"].url, model="lab-model", models=("lab-small",), require_key=False
            ),
        ),
        default="main",
    )
    save_profiles(profiles)
    return profiles


@pytest.fixture
def win(open_session: Any, data_dir: Path, two_profiles: ProfileSet) -> Any:
    session = open_session(data_dir, providers=None)  # the providers of the profiles file, as the app runs them
    assert not isinstance(session, int)
    session.window.show()
    return session


def chat_dialog(session: Any) -> SubmitDialog:
    dialog = session.window.new_job()
    dialog.kind.setCurrentIndex(dialog.kind.findData("openai.chat"))
    assert dialog.form is not None
    return dialog


def items(combo: Any) -> list[tuple[str, Any]]:
    assert isinstance(combo, QComboBox)
    return [(combo.itemText(i), combo.itemData(i)) for i in range(combo.count())]


def pick(combo: Any, value: Any) -> None:
    index = combo.findData(value)
    assert index >= 0, (value, items(combo))
    combo.setCurrentIndex(index)


def test_the_form_offers_both_profiles_and_the_model_list_follows(qtbot: Any, win: Any) -> None:
    dialog = chat_dialog(win)
    assert dialog.form is not None
    profile, model = dialog.form.editor("profile"), dialog.form.editor("model")
    assert isinstance(profile, QComboBox) and isinstance(model, QComboBox)
    assert items(profile) == [("main (default)", "main"), ("lab", "lab")]
    assert profile.currentData() == "main"  # the default pre-selected
    assert [text for text, _ in items(model)] == ["main-model", "main-big"]
    assert model.lineEdit().placeholderText() == "main-model (main's default)"

    pick(profile, "lab")
    assert [text for text, _ in items(model)] == ["lab-model", "lab-small"]
    assert model.lineEdit().placeholderText() == "lab-model (lab's default)"
    # a model picked from main's list that lab does not offer is not carried over
    pick(profile, "main")
    model.setCurrentIndex(1)
    assert dialog.form.values()["model"] == "main-big"
    pick(profile, "lab")
    assert dialog.form.values()["model"] is None
    # a model typed by hand stays
    model.setEditText("my-own-model")
    pick(profile, "main")
    assert dialog.form.values()["model"] == "my-own-model"
    pick(profile, "lab")
    model.setEditText("")
    dialog.reject()


def test_list_models_asks_the_picked_profiles_server(qtbot: Any, win: Any, servers: dict[str, FakeOpenAI]) -> None:
    dialog = chat_dialog(win)
    form = dialog.form
    assert form is not None and form.lister is not None
    pick(form.editor("profile"), "lab")
    with qtbot.waitSignal(form.lister.listed, timeout=5000):
        form.model_button.click()
    assert servers["lab"].count("models") == 1 and servers["main"].count("models") == 0
    model = form.editor("model")
    assert [text for text, _ in items(model)] == ["lab-model", "lab-small", "model-a", "model-b"]
    assert "profile lab" in form.model_button.toolTip() or "listed" in form.model_button.toolTip()
    pick(form.editor("profile"), "main")  # main's list, not lab's answer
    assert [text for text, _ in items(model)] == ["main-model", "main-big"]
    pick(form.editor("profile"), "lab")  # lab's answer was remembered
    assert "model-a" in [text for text, _ in items(model)]
    dialog.reject()


def test_the_submitted_input_names_the_profile_and_runs_on_its_server(
    qtbot: Any, win: Any, servers: dict[str, FakeOpenAI]
) -> None:
    dialog = chat_dialog(win)
    form = dialog.form
    assert form is not None
    pick(form.editor("profile"), "lab")
    form.editor("model").setCurrentIndex(1)  # lab-small
    form.set_value("system", "Answer in one word")
    form.set_value("prompt", "Name a colour of the sea\nand nothing else")
    assert dialog.message.ok, dialog.message.text.text()
    payload = json.loads(dialog.json_text())
    assert payload["profile"] == "lab" and payload["model"] == "lab-small"
    with qtbot.waitSignal(dialog.submitted, timeout=3000) as blocker:
        dialog.submit_button.click()
    job_id = blocker.args[0].job.id
    job = win.queue.get(job_id)
    assert job.input["profile"] == "lab"
    assert job.title == "Name a colour of the sea"  # from the prompt, not the system prompt
    qtbot.waitUntil(lambda: win.queue.get(job_id).state == State.SUCCEEDED, timeout=10_000)
    assert servers["lab"].count("chat") == 1 and servers["main"].count("chat") == 0
    assert servers["lab"].of("chat")[0].body["model"] == "lab-small"

    # the default profile, left as picked, is named too, and runs on main's server
    again = chat_dialog(win)
    assert again.form is not None
    again.form.set_value("prompt", "hello main")
    with qtbot.waitSignal(again.submitted, timeout=3000) as blocker:
        again.submit_button.click()
    second = blocker.args[0].job.id
    assert win.queue.get(second).input["profile"] == "main"
    qtbot.waitUntil(lambda: win.queue.get(second).state == State.SUCCEEDED, timeout=10_000)
    assert servers["main"].count("chat") == 1 and servers["main"].of("chat")[0].body["model"] == "main-model"


def test_an_input_naming_no_profile_shows_the_default_profile(win: Any) -> None:
    dialog = chat_dialog(win)
    assert dialog.form is not None
    dialog.tabs.setCurrentIndex(dialog.JSON_TAB)
    dialog.editor.setPlainText('{"prompt": "from a script"}')
    profile = dialog.form.editor("profile")
    assert dialog.form.isEnabled() and profile.currentData() is None
    assert profile.currentText() == "the default profile (main)"
    assert dialog.form.payload() == {"prompt": "from a script"}  # shown as it is, nothing added
    assert [text for text, _ in items(dialog.form.editor("model"))] == ["main-model", "main-big"]
    dialog.editor.setPlainText('{"prompt": "to the lab", "profile": "lab"}')
    assert profile.currentData() == "lab"
    assert [text for text, _ in items(dialog.form.editor("model"))] == ["lab-model", "lab-small"]
    dialog.tabs.setCurrentIndex(dialog.FORM_TAB)
    dialog.reject()


def test_a_batch_template_or_csv_column_may_name_a_second_profile(qtbot: Any, win: Any) -> None:
    dialog = chat_dialog(win)
    assert dialog.form is not None
    pick(dialog.form.editor("profile"), "lab")
    dialog.tabs.setCurrentIndex(dialog.BATCH_TAB)
    dialog.batch.text.setPlainText("one\ntwo")
    assert dialog.update_batch()
    assert dialog.batch_read is not None
    assert [i.payload["profile"] for i in dialog.batch_read.items] == ["lab", "lab"]
    dialog.batch.text.setPlainText("prompt,profile\nfirst,main\nsecond,lab\n")
    dialog.batch.format.setCurrentIndex(dialog.batch.format.findData(BatchFormat.CSV))
    assert dialog.update_batch(), dialog.batch.summary.text()
    assert [i.payload.get("profile") for i in dialog.batch_read.items] == ["main", "lab"]
    dialog.batch.text.setPlainText("")
    dialog.tabs.setCurrentIndex(dialog.FORM_TAB)
    dialog.reject()


def test_picking_a_profile_is_not_typed_input_worth_a_question(qtbot: Any, win: Any, prompts: Any) -> None:
    dialog = chat_dialog(win)
    assert dialog.form is not None
    pick(dialog.form.editor("profile"), "lab")
    # still "what is missing", not an error mark: nothing was typed yet
    assert dialog.message.text.text().startswith("To submit:") and not dialog.form.labels["prompt"].styleSheet()
    qtbot.keyClick(dialog, Qt.Key.Key_Escape)
    assert not dialog.isVisible() and prompts.confirms == []
    typed = chat_dialog(win)
    assert typed.form is not None
    typed.form.set_value("system", "Be brief")
    prompts.answer = False
    qtbot.keyClick(typed, Qt.Key.Key_Escape)
    assert typed.isVisible() and prompts.confirms[-1].startswith("Discard this prompt?")


def test_new_job_shows_every_row_of_its_form_at_its_first_size(qtbot: Any, win: Any) -> None:
    """The chat form scrolled by 24 px at the dialog's first size, with "Advanced" out of
    sight: the prompt box's own size hint (192 px) counted, not the room it needs."""
    from PySide6.QtWidgets import QApplication

    dialog = win.window.new_job()
    qtbot.waitUntil(dialog.isVisible, timeout=3000)
    kinds = [dialog.kind.itemData(i) for i in range(dialog.kind.count())]
    assert "openai.chat" in kinds
    for i, kind in enumerate(kinds):
        dialog.kind.setCurrentIndex(i)
        QApplication.processEvents()
        assert dialog.form_scroll.verticalScrollBar().maximum() == 0, kind
    dialog.kind.setCurrentIndex(kinds.index("openai.chat"))
    QApplication.processEvents()
    assert dialog.form is not None
    prompt = dialog.form.editors["prompt"].widget
    assert prompt.height() > prompt.minimumHeight() + 40  # the prompt still takes the room there is
