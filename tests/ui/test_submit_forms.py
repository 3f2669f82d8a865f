"""The New dialog: forms generated from each provider's description, JSON sync, batches, manners."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import pytest
from PySide6.QtCore import Qt
from PySide6.QtWidgets import (
    QApplication,
    QCheckBox,
    QComboBox,
    QDoubleSpinBox,
    QLineEdit,
    QPlainTextEdit,
    QSpinBox,
    QWidget,
)

from desktop_queue.core import Outcome, RunContext
from desktop_queue.core.inputspec import FieldType, InputField, InputSpec, spec_for, spec_of
from desktop_queue.providers.demo import DemoProvider
from desktop_queue.providers.openai_compat import make_providers
from desktop_queue.ui.dialogs import SubmitDialog
from desktop_queue.ui.forms import error_colour

WIDGETS = {
    FieldType.TEXT: QPlainTextEdit,
    FieldType.JSON: QPlainTextEdit,
    FieldType.INTEGER: QSpinBox,
    FieldType.NUMBER: QDoubleSpinBox,
    FieldType.BOOLEAN: QCheckBox,
    FieldType.CHOICE: QComboBox,
    FieldType.STRING: QLineEdit,
}


class WidgetsProvider:
    """A plug-in kind whose description uses every field type (and a model list)."""

    kind = "widgets"
    version = "1"

    def __init__(self) -> None:
        self.listed = threading.Event()

    def input_spec(self) -> InputSpec:
        return InputSpec(
            kind=self.kind,
            fields=(
                InputField("prompt", FieldType.TEXT, "&Prompt:", default="", required=True),
                InputField("model", FieldType.STRING, "&Model:", choices_from="models", free_text=True),
                InputField("name", FieldType.STRING, "&Name:", max_length=10),
                InputField("steps", FieldType.INTEGER, "&Steps:", default=20, minimum=1, maximum=150),
                InputField("scale", FieldType.NUMBER, "S&cale:", minimum=0, maximum=10),
                InputField("hdr", FieldType.BOOLEAN, "&HDR:", default=False),
                InputField("style", FieldType.CHOICE, "St&yle:", default="plain", choices=(), advanced=True).__class__(
                    "style",
                    FieldType.CHOICE,
                    "St&yle:",
                    default="plain",
                    choices=spec_choices("plain", "bold"),
                    advanced=True,
                ),
                InputField("extra", FieldType.JSON, "E&xtra:", advanced=True),
            ),
        )

    def validate(self, payload: Any) -> None:
        from desktop_queue.core.errors import InvalidInput

        if not isinstance(payload, dict) or not str(payload.get("prompt", "")).strip():
            raise InvalidInput("widgets needs a prompt")

    def test_connection(self) -> list[str]:
        self.listed.set()
        return ["model-a", "model-b"]

    def run(self, job: Any, context: RunContext) -> Outcome:
        return Outcome.success({"text": "ok"})

    def classify(self, error: BaseException) -> Outcome:
        return Outcome.failure("retryable", type(error).__name__)


def spec_choices(*values: str) -> Any:
    from desktop_queue.core.inputspec import choices

    return choices(*values)


@pytest.fixture
def providers(stubborn: Any) -> dict[str, Any]:
    """Every built-in kind (the openai ones never called), a plug-in with every field type, one without."""
    return {"demo": DemoProvider(tick_s=0.01), **make_providers(), "widgets": WidgetsProvider(), "stubborn": stubborn}


def new_dialog(session: Any, kind: str = "demo") -> SubmitDialog:
    dialog = session.window.new_job()
    dialog.kind.setCurrentIndex(dialog.kind.findData(kind))
    assert dialog.current_kind() == kind
    return dialog


def jobs(session: Any) -> list[Any]:
    return session.queue.list()


@pytest.mark.parametrize(
    "kind", ["demo", "openai.chat", "openai.responses", "openai.image", "openai.speech", "widgets"]
)
def test_every_kind_gets_a_form_from_its_description(session: Any, kind: str) -> None:
    dialog = new_dialog(session, kind)
    # (the description, its profile field offering the configured profiles)
    spec = spec_for(session.controller.providers[kind], session.controller.profiles)
    assert spec is not None and dialog.form is not None and dialog.form.spec == spec
    assert [f.name for f in spec.fields] == [f.name for f in spec_of(session.controller.providers[kind]).fields]
    assert dialog.tabs.isTabEnabled(dialog.FORM_TAB) and dialog.tabs.currentIndex() == dialog.FORM_TAB
    for f in spec.fields:
        widget = dialog.form.editor(f.name)
        expected = QComboBox if (f.choices or f.choices_from) else WIDGETS[f.type]
        assert isinstance(widget, expected), (f.name, type(widget))
        if f.help:
            assert widget.toolTip() == f.help
        assert dialog.form.advanced_box.isAncestorOf(widget) is f.advanced
    # the advanced section starts closed, and opens on its toggle
    has_advanced = any(f.advanced for f in spec.fields)
    assert dialog.form.advanced_toggle.isVisible() is has_advanced
    assert not dialog.form.advanced_box.isVisible()
    if has_advanced:
        dialog.form.advanced_toggle.click()
        assert dialog.form.advanced_box.isVisible()
    # the defaults and a prompt give an input the provider accepts
    assert spec.prompt_field is not None
    dialog.form.set_value(spec.prompt_field, "a prompt")
    assert dialog.message.ok, dialog.message.text.text()
    payload = json.loads(dialog.json_text())
    session.controller.validate(kind, payload)
    assert dialog.form.first_editor() is dialog.form.editor(spec.prompt_field)
    dialog.reject()


def test_the_demo_keeps_its_fault_knobs_under_advanced(session: Any) -> None:
    dialog = new_dialog(session)
    assert dialog.form is not None
    for name in ("fail_times", "fail_with", "retry_after_s"):
        assert dialog.form.advanced_box.isAncestorOf(dialog.form.editor(name))
    for name in ("prompt", "duration_s"):
        assert not dialog.form.advanced_box.isAncestorOf(dialog.form.editor(name))
    # JSON that sets a fault knob opens the section, so the form shows what will be sent
    dialog.tabs.setCurrentIndex(dialog.JSON_TAB)
    dialog.editor.setPlainText('{"prompt": "x", "fail_times": 2}')
    assert dialog.form.advanced_box.isVisibleTo(dialog.form)
    assert dialog.form.editor("fail_times").value() == 2


def test_a_kind_without_a_description_gets_the_json_tab_only(session: Any) -> None:
    dialog = new_dialog(session, "stubborn")
    assert dialog.form is None
    assert not dialog.tabs.isTabEnabled(dialog.FORM_TAB)
    assert dialog.tabs.currentIndex() == dialog.JSON_TAB
    dialog.editor.setPlainText('{"anything": 1}')
    assert dialog.message.ok


def test_a_100000_character_prompt_is_kept_whole(qtbot: Any, session: Any) -> None:
    """A QLineEdit cut a pasted prompt at 32,767 characters without a word."""
    prompt = ("".join(f"{i:06d} " for i in range(100_000 // 7)) + "the end")[-100_000:]
    assert len(prompt) == 100_000
    dialog = new_dialog(session, "openai.chat")
    editor = dialog.form.editor("prompt") if dialog.form else None
    assert isinstance(editor, QPlainTextEdit)
    QApplication.clipboard().setText(prompt)
    editor.setFocus()
    editor.paste()
    assert json.loads(dialog.json_text())["prompt"] == prompt
    dialog.kind.setCurrentIndex(dialog.kind.findData("demo"))  # the prompt is carried to the next kind
    assert dialog.form is not None and dialog.form.values()["prompt"] == prompt
    dialog.form.set_value("duration_s", 0.0)
    with qtbot.waitSignal(dialog.submitted, timeout=3000) as blocker:
        dialog.submit_button.click()
    stored = session.queue.get(blocker.args[0].job.id)
    assert stored.input["prompt"] == prompt and len(stored.input["prompt"]) == 100_000


def test_the_size_label_is_live_and_turns_red_over_1_mib(session: Any) -> None:
    dialog = new_dialog(session)
    assert dialog.form is not None
    dialog.form.set_value("prompt", "x" * 3000)
    assert dialog.size_label.text() == "2.9 KiB of 1 MiB"
    assert not dialog.size_label.over and dialog.size_label.styleSheet() == ""
    dialog.form.set_value("prompt", "x" * 40)
    assert dialog.size_label.text() == "53 bytes of 1 MiB"
    dialog.form.set_value("prompt", "x" * (1024 * 1024 + 10))
    assert dialog.size_label.over and "too large" in dialog.size_label.text()
    assert error_colour(dialog) in dialog.size_label.styleSheet()
    assert "1 MiB" in dialog.message.text.text() and not dialog.message.ok
    assert not dialog.try_submit()
    assert jobs(session) == []
    prompt = dialog.form.editor("prompt")
    assert isinstance(prompt, QPlainTextEdit)
    # a megabyte without a space is shown unwrapped: Qt took 45 s to wrap it
    assert prompt.lineWrapMode() is QPlainTextEdit.LineWrapMode.NoWrap
    dialog.form.set_value("prompt", "small again")
    assert not dialog.size_label.over
    assert prompt.lineWrapMode() is QPlainTextEdit.LineWrapMode.WidgetWidth


def test_the_form_and_the_json_tab_stay_in_sync_both_ways(session: Any) -> None:
    dialog = new_dialog(session, "openai.chat")
    form = dialog.form
    assert form is not None
    form.set_value("prompt", "hello")
    form.set_value("system", "be brief")
    form.set_value("temperature", 0.5)
    assert json.loads(dialog.json_text()) == {
        "profile": "openai",  # the profile picked (the default): routing reads it there
        "messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hello"}],
        "temperature": 0.5,
    }
    dialog.tabs.setCurrentIndex(dialog.JSON_TAB)
    dialog.editor.setPlainText('{"prompt": "from json", "max_tokens": 300, "response_format": {"type": "json_object"}}')
    values = form.values()
    assert values["prompt"] == "from json" and values["max_tokens"] == 300 and values["system"] is None
    assert values["profile"] is None  # an input naming no profile: "the default profile" is shown
    assert values["output_format"] == "json_object"
    assert form.isEnabled() and not dialog.form_note.isVisible()
    # what the form cannot show: the form steps aside and says why, the JSON is kept
    dialog.editor.setPlainText('{"prompt": "x", "stop": ["\\n"]}')
    assert not form.isEnabled()
    assert not dialog.form_note.isHidden() and '"stop"' in dialog.form_note.text.text()
    assert dialog.message.ok  # the input itself is fine: it is submitted from the JSON
    assert json.loads(dialog.json_text())["stop"] == ["\n"]
    dialog.editor.setPlainText('{"prompt": "back"}')
    assert form.isEnabled() and form.values()["prompt"] == "back"


def test_a_schema_field_appears_for_json_schema_output_and_broken_json_is_explained(session: Any) -> None:
    dialog = new_dialog(session, "openai.chat")
    form = dialog.form
    assert form is not None
    form.set_value("prompt", "a card")
    schema = form.editor("schema")
    assert not schema.isVisibleTo(dialog)
    output = form.editor("output_format")
    assert isinstance(output, QComboBox)
    output.setCurrentIndex(output.findData("json_schema"))
    assert schema.isVisibleTo(dialog)
    assert isinstance(schema, QPlainTextEdit)
    schema.setPlainText('{"type": "object", "required": ["title"')
    assert "Schema: not valid JSON" in dialog.message.text.text() and not dialog.message.ok
    assert not dialog.try_submit()
    schema.setPlainText('{"type": "object", "required": ["title"]}')
    payload = json.loads(dialog.json_text())
    assert payload["response_format"]["json_schema"]["schema"] == {"type": "object", "required": ["title"]}
    assert dialog.message.ok


def test_an_image_count_makes_that_many_jobs_in_one_commit(qtbot: Any, session: Any) -> None:
    dialog = new_dialog(session, "openai.image")
    assert dialog.form is not None
    dialog.form.set_value("prompt", "a lighthouse at dusk")
    dialog.form.set_value("count", 3)
    assert dialog.submit_button.text() == "&Submit 3 jobs"
    with qtbot.waitSignal(dialog.batch_submitted, timeout=3000) as blocker:
        dialog.submit_button.click()
    results = blocker.args[0]
    assert [r.job.title for r in results] == [f"a lighthouse at dusk ({i} of 3)" for i in (1, 2, 3)]
    assert sorted(j.input.get("copy") for j in jobs(session)) == [1, 2, 3]


def test_editing_the_json_keeps_the_image_count(session: Any) -> None:
    dialog = new_dialog(session, "openai.image")
    assert dialog.form is not None
    dialog.form.set_value("count", 2)
    dialog.tabs.setCurrentIndex(dialog.JSON_TAB)
    dialog.editor.setPlainText('{"prompt": "a fox", "size": "1024x1024"}')
    assert dialog.form.values()["count"] == 2 and dialog.form.values()["size"] == "1024x1024"
    assert len(dialog.payloads()) == 2


def test_pasted_lines_become_a_batch_with_the_form_as_template(qtbot: Any, session: Any) -> None:
    dialog = new_dialog(session)
    assert dialog.form is not None
    dialog.form.set_value("duration_s", 0.0)
    dialog.tabs.setCurrentIndex(dialog.BATCH_TAB)
    assert not dialog.title.isEnabled()
    dialog.batch.text.setPlainText("\n".join(f"prompt {i}" for i in range(1, 11)) + "\n\n")
    assert dialog.update_batch()
    assert dialog.batch.summary.text() == "Read as one prompt a line: 10 jobs will be created."
    assert dialog.submit_button.text() == "&Submit 10 jobs"
    with qtbot.waitSignal(dialog.batch_submitted, timeout=3000) as blocker:
        dialog.submit_button.click()
    assert len(blocker.args[0]) == 10
    stored = sorted(jobs(session), key=lambda j: int(j.input["prompt"].split()[1]))
    assert [j.input for j in stored] == [{"prompt": f"prompt {i}", "duration_s": 0.0} for i in range(1, 11)]
    assert [j.title for j in stored][:2] == ["prompt 1", "prompt 2"]


def test_a_csv_file_is_imported_a_column_per_field(qtbot: Any, session: Any, tmp_path: Path) -> None:
    path = tmp_path / "jobs.csv"
    path.write_text('prompt,duration_s\n"one, two",0\n"three\nlines",0\n', encoding="utf-8")
    dialog = new_dialog(session)
    dialog.tabs.setCurrentIndex(dialog.BATCH_TAB)
    assert dialog.batch.import_file(str(path)) is None
    assert dialog.batch.format.currentText().startswith("CSV")
    assert dialog.update_batch()
    with qtbot.waitSignal(dialog.batch_submitted, timeout=3000):
        dialog.submit_button.click()
    assert sorted(j.input["prompt"] for j in jobs(session)) == ["one, two", "three\nlines"]


def test_a_bad_json_lines_line_is_named_and_nothing_is_created(qtbot: Any, session: Any, tmp_path: Path) -> None:
    path = tmp_path / "jobs.jsonl"
    path.write_text('{"prompt": "a"}\n{"prompt": "b"}\n{"prompt": ""}\n{"prompt": "c"\n', encoding="utf-8")
    dialog = new_dialog(session)
    dialog.tabs.setCurrentIndex(dialog.BATCH_TAB)
    assert dialog.batch.import_file(str(path)) is None
    assert not dialog.update_batch()
    problems = dialog.batch.problems.text().splitlines()
    assert problems[0].startswith('line 3: demo input needs a non-empty "prompt"')
    assert problems[1].startswith("line 4: not valid JSON")
    assert "2 lines have problems" in dialog.batch.summary.text()
    assert not dialog.try_submit()
    assert dialog.isVisible() and jobs(session) == []
    missing = dialog.batch.import_file(str(tmp_path / "missing.jsonl"))
    assert missing is not None and "cannot read" in missing


def test_escape_asks_before_discarding_typed_input(qtbot: Any, session: Any, prompts: Any) -> None:
    untouched = new_dialog(session)
    qtbot.keyClick(untouched, Qt.Key.Key_Escape)
    assert not untouched.isVisible() and prompts.confirms == []  # nothing typed: nothing to ask
    dialog = new_dialog(session)
    assert dialog.form is not None
    dialog.form.set_value("prompt", "a long prompt I wrote")
    prompts.answer = False
    qtbot.keyClick(dialog, Qt.Key.Key_Escape)
    assert prompts.confirms and prompts.confirms[-1].startswith("Discard this prompt?")
    assert dialog.isVisible() and dialog.form.values()["prompt"] == "a long prompt I wrote"
    dialog.cancel_button.click()
    assert len(prompts.confirms) == 2 and dialog.isVisible()
    prompts.answer = True
    qtbot.keyClick(dialog, Qt.Key.Key_Escape)
    assert not dialog.isVisible()
    batch = new_dialog(session)
    batch.tabs.setCurrentIndex(batch.BATCH_TAB)
    batch.batch.text.setPlainText("one\ntwo")
    prompts.answer = False
    batch.reject()
    assert batch.isVisible() and len(prompts.confirms) == 4


def test_tab_reaches_submit_before_cancel_and_submit_is_the_default(session: Any) -> None:
    dialog = new_dialog(session)
    assert dialog.submit_button.isDefault() and not dialog.cancel_button.isDefault()
    assert 500 <= dialog.minimumWidth() <= 800 and 400 <= dialog.minimumHeight() <= 480  # fits 800x500
    assert dialog.focusWidget() is dialog.form.editor("prompt") if dialog.form else False
    seen: list[QWidget] = []
    widget: QWidget = dialog.max_attempts
    for _ in range(50):
        widget = widget.nextInFocusChain()
        if widget in (dialog.submit_button, dialog.cancel_button):
            seen.append(widget)
            if len(seen) == 2:
                break
    assert seen == [dialog.submit_button, dialog.cancel_button]
    # from the prompt, Tab moves on (it does not type a tab into the prompt)
    prompt = dialog.form.editor("prompt") if dialog.form else None
    assert isinstance(prompt, QPlainTextEdit) and prompt.tabChangesFocus()


def test_a_model_field_lists_the_servers_models_on_request(qtbot: Any, session: Any) -> None:
    dialog = new_dialog(session, "widgets")
    assert dialog.form is not None and dialog.form.lister is not None
    with qtbot.waitSignal(dialog.form.lister.listed, timeout=3000):
        dialog.form.model_button.click()
    combo = dialog.form.editor("model")
    assert isinstance(combo, QComboBox)
    assert [combo.itemText(i) for i in range(combo.count())] == ["model-a", "model-b"]
    assert dialog.form.values()["model"] is None  # listing does not pick one
    again = new_dialog(session, "widgets")  # remembered for the session
    assert again.form is not None
    combo = again.form.editor("model")
    assert isinstance(combo, QComboBox) and combo.count() == 2


def test_the_replay_dialog_asks_before_discarding_an_edited_input(qtbot: Any, session: Any, prompts: Any) -> None:
    from desktop_queue.ui.dialogs import ReplayDialog

    job = session.controller.submit("demo", {"prompt": "orig"}, title="orig", priority="background", max_attempts=1)
    dialog = ReplayDialog(session.controller, session.queue.get(job.job.id), session.window)
    qtbot.addWidget(dialog)
    dialog.open()
    dialog.editor.setPlainText('{"prompt": "edited"}')
    prompts.answer = False
    qtbot.keyClick(dialog, Qt.Key.Key_Escape)
    assert dialog.isVisible() and prompts.confirms[-1].startswith("Discard this prompt?")
    assert dialog.replay_button.nextInFocusChain() is dialog.cancel_button
    prompts.answer = True
    dialog.cancel_button.click()
    assert not dialog.isVisible()


def test_ctrl_enter_submits_from_the_prompt(qtbot: Any, session: Any) -> None:
    dialog = new_dialog(session)
    assert dialog.form is not None
    prompt = dialog.form.editor("prompt")
    qtbot.keyClicks(prompt, "first line")
    qtbot.keyClick(prompt, Qt.Key.Key_Return)  # Enter is a new line in a prompt
    qtbot.keyClicks(prompt, "second line")
    assert dialog.isVisible()
    with qtbot.waitSignal(dialog.submitted, timeout=3000) as blocker:
        qtbot.keyClick(prompt, Qt.Key.Key_Return, Qt.KeyboardModifier.ControlModifier)
    assert session.queue.get(blocker.args[0].job.id).input["prompt"] == "first line\nsecond line"


def test_the_dialog_opens_on_the_kind_last_submitted(qtbot: Any, session: Any) -> None:
    first = new_dialog(session)
    assert first.form is not None
    first.form.set_value("prompt", "x")
    first.kind.setCurrentIndex(first.kind.findData("widgets"))
    assert first.form is not None and first.form.values()["prompt"] == "x"  # carried over
    with qtbot.waitSignal(first.submitted, timeout=3000):
        first.submit_button.click()
    again = session.window.new_job()
    assert again.current_kind() == "widgets"
    assert again.focusWidget() is (again.form.editor("prompt") if again.form else None)


def test_the_field_a_validation_message_names_is_marked(session: Any) -> None:
    dialog = new_dialog(session)
    form = dialog.form
    assert form is not None
    assert form.labels["prompt"].styleSheet() == ""  # nothing typed yet: no error marks
    form.set_value("prompt", "x")
    form.set_value("prompt", "   ")
    assert "prompt" in dialog.message.text.text() and not dialog.message.ok
    assert error_colour(dialog) in form.labels["prompt"].styleSheet()
    assert form.editor("prompt").accessibleDescription().startswith("Error:")
    form.set_value("prompt", "fine")
    assert form.labels["prompt"].styleSheet() == "" and dialog.message.ok
    assert form.mark('"retry_after_s" must be a number of seconds') == "retry_after_s"
    assert form.advanced_box.isVisibleTo(form)  # a problem in the Advanced section opens it


def test_problem_text_stays_readable_on_a_dark_palette(qtbot: Any) -> None:
    from PySide6.QtGui import QColor, QPalette

    light, dark = QWidget(), QWidget()
    qtbot.addWidget(light)
    qtbot.addWidget(dark)
    palette = QPalette()
    palette.setColor(QPalette.ColorRole.Window, QColor("#2b2b2e"))
    dark.setPalette(palette)
    palette.setColor(QPalette.ColorRole.Window, QColor("#f0f0f0"))
    light.setPalette(palette)
    assert error_colour(light) == "#c62828" and error_colour(dark) == "#ff6b6b"
