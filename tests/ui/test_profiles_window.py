"""Several provider profiles in the window: Preferences' list, the status bar's real states,
the Spend view and the first-run state. Real servers on 127.0.0.1, an in-memory keyring."""

from __future__ import annotations

import random
import socket
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from PySide6.QtCore import QSettings, Qt, QThreadPool
from PySide6.QtWidgets import QDialog, QLabel

sys.path.insert(0, str(Path(__file__).parents[1] / "providers"))

from fakeserver import FakeOpenAI  # noqa: E402
from provider_helpers import CANARY_KEY, MemoryKeyring, memory_keyring, server  # noqa: E402, F401  (fixtures)

from desktop_queue.core import Queue, RetryPolicy  # noqa: E402
from desktop_queue.core.ledger import PriceTable, SpendLedger, Usage  # noqa: E402
from desktop_queue.providers.demo import DemoProvider  # noqa: E402
from desktop_queue.providers.openai_compat import KEYRING_SERVICE  # noqa: E402
from desktop_queue.providers.profiles import (  # noqa: E402
    PRESETS,
    ProfileSet,
    environment_profile,
    load_profiles,
    profiles_path,
    save_profiles,
)
from desktop_queue.providers.setup import ProfileConfig, build  # noqa: E402
from desktop_queue.ui.controller import Controller  # noqa: E402
from desktop_queue.ui.dialogs import PreferencesDialog  # noqa: E402
from desktop_queue.ui.main_window import MainWindow  # noqa: E402
from desktop_queue.ui.settings import APPLICATION, ORGANIZATION, Preferences, load_profiles_migrating  # noqa: E402

WAIT_MS = 5000


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def local() -> Iterator[FakeOpenAI]:
    fake = FakeOpenAI(api_key=None)
    fake.start()
    yield fake
    fake.stop()


@pytest.fixture
def drained() -> Iterator[None]:
    yield
    assert QThreadPool.globalInstance().waitForDone(WAIT_MS)


def items(dialog: PreferencesDialog) -> list[str]:
    page = dialog.profiles_page
    return [page.list.item(i).text() for i in range(page.list.count())]


# ---------------------------------------------------------------------- Preferences: a list of profiles


def test_two_profiles_added_duplicated_renamed_removed_and_saved_to_the_file(
    qtbot: Any, memory_keyring: MemoryKeyring, server: FakeOpenAI, isolated_profile: Path, drained: None
) -> None:
    dialog = PreferencesDialog(Preferences())
    qtbot.addWidget(dialog)
    page = dialog.profiles_page
    assert items(dialog) == [] and page.stack.currentWidget() is page.empty  # nothing configured yet
    assert not page.remove_button.isEnabled()

    cloud = page.add_profile(PRESETS[0])
    assert cloud.name.text() == "openai" and cloud.base_url.text() == "https://api.openai.com/v1"
    cloud.name.setText("cloud")
    cloud.base_url.setText(server.url)
    cloud.api_key.setText(CANARY_KEY)
    ollama = page.add_profile(PRESETS[1])
    assert ollama.base_url.text() == "http://localhost:11434/v1" and not ollama.require_key.isChecked()
    assert not ollama.api_key.isEnabled() and "No key is sent" in ollama.key_state.text()
    assert items(dialog) == ["cloud  (default)", "ollama"]
    copy = page.duplicate()
    assert copy is not None and copy.name.text() == "ollama-2" and copy.base_url.text() == ollama.base_url.text()
    page.remove()  # the copy
    assert items(dialog) == ["cloud  (default)", "ollama"]
    page.list.setCurrentRow(1)
    page.make_default()
    assert items(dialog) == ["cloud", "ollama  (default)"]
    dialog.accept()
    assert dialog.result() == QDialog.DialogCode.Accepted

    saved = load_profiles()
    assert saved.names() == ["cloud", "ollama"] and saved.default_name() == "ollama"
    assert saved.get("cloud") == ProfileConfig(name="cloud", base_url=server.url, model="gpt-4o-mini")
    assert memory_keyring.store == {(KEYRING_SERVICE, "cloud"): CANARY_KEY}
    assert dialog.profile_set() == saved
    assert CANARY_KEY.encode() not in (isolated_profile / "config" / "desktop-queue" / "profiles.json").read_bytes()

    # again: rename moves the key, remove deletes it
    again = PreferencesDialog(Preferences())
    qtbot.addWidget(again)
    assert items(again) == ["cloud", "ollama  (default)"]
    page = again.profiles_page
    page.list.setCurrentRow(0)
    page.rename()
    assert page.current_editor() is not None and page.current_editor().name.hasSelectedText() is not None
    page.current_editor().name.setText("work")
    assert items(again)[0] == "work"
    again.accept()
    assert memory_keyring.store == {(KEYRING_SERVICE, "work"): CANARY_KEY}
    assert load_profiles().names() == ["work", "ollama"]
    third = PreferencesDialog(Preferences())
    qtbot.addWidget(third)
    third.profiles_page.list.setCurrentRow(0)
    third.profiles_page.remove()
    third.accept()
    assert memory_keyring.store == {}
    assert load_profiles().names() == ["ollama"]


def test_a_bad_name_or_url_is_said_inline_and_nothing_is_saved(qtbot: Any, isolated_profile: Path) -> None:
    dialog = PreferencesDialog(Preferences())
    qtbot.addWidget(dialog)
    editor = dialog.profiles_page.add_profile(PRESETS[1])
    editor.base_url.setText("localhost:11434")
    dialog.accept()
    assert dialog.result() != QDialog.DialogCode.Accepted
    assert not editor.message.ok and "http:// or https://" in editor.message.text.text()
    editor.base_url.setText("http://localhost:11434/v1")
    other = dialog.profiles_page.add_profile(PRESETS[2])
    other.name.setText("ollama")
    dialog.accept()
    assert dialog.result() != QDialog.DialogCode.Accepted
    assert "two profiles are named 'ollama'" in dialog.profiles_page.message.text.text()
    assert not (isolated_profile / "config" / "desktop-queue" / "profiles.json").exists()


def test_another_server_chosen_for_a_new_profile_gives_it_that_server_s_name(
    qtbot: Any, isolated_profile: Path
) -> None:
    """ "Connect a provider" starts from OpenAI; choosing llama.cpp left the profile named "openai"."""
    dialog = PreferencesDialog(Preferences(), new_profile=True)
    qtbot.addWidget(dialog)
    editor = dialog.providers_page
    assert editor.name.text() == "openai"
    llamacpp = next(i for i in range(editor.preset.count()) if editor.preset.itemData(i) == PRESETS[2].label)
    editor.preset.activated.emit(llamacpp)
    assert (editor.name.text(), editor.base_url.text()) == ("llamacpp", "http://localhost:8080/v1")
    assert items(dialog) == ["llamacpp  (default)"]
    # a second new profile from the same server gets a free name, and a name typed by hand stays
    other = dialog.profiles_page.add_profile(PRESETS[0])
    other.preset.activated.emit(llamacpp)
    assert other.name.text() == "llamacpp-2"
    other.name.setText("gpu-box")
    other.preset.activated.emit(next(i for i in range(other.preset.count()) if other.preset.itemData(i) == "Ollama"))
    assert (other.name.text(), other.base_url.text()) == ("gpu-box", "http://localhost:11434/v1")
    dialog.reject()


def test_test_connection_names_the_exact_failure(qtbot: Any, drained: None) -> None:
    port = free_port()
    dialog = PreferencesDialog(Preferences(), new_profile=PRESETS[2])
    qtbot.addWidget(dialog)
    editor = dialog.providers_page
    editor.base_url.setText(f"http://127.0.0.1:{port}/v1")
    dialog.show()
    editor.test_button.setFocus()
    with qtbot.waitSignal(editor.tester.failed, timeout=WAIT_MS) as blocker:
        editor.test_button.click()
    assert blocker.args[0].startswith(f"connection refused at 127.0.0.1:{port}")
    assert editor.test_button.isEnabled() and editor.test_button.hasFocus()  # not moved on into the limits
    assert "connection refused" in editor.message.text.text()


def test_an_address_typed_by_hand_drops_the_presets_name_and_hint(qtbot: Any) -> None:
    dialog = PreferencesDialog(Preferences(), new_profile=PRESETS[0])
    qtbot.addWidget(dialog)
    editor = dialog.providers_page
    assert "platform.openai.com" in editor.message.text.text()
    editor.base_url.selectAll()
    qtbot.keyClicks(editor.base_url, "http://127.0.0.1:4000/v1")
    assert editor.preset.currentData() is None  # "Choose a server…"
    assert "platform.openai.com" not in editor.message.text.text()


def test_a_successful_test_fills_the_model_list(qtbot: Any, local: FakeOpenAI, drained: None) -> None:
    dialog = PreferencesDialog(Preferences(), new_profile=PRESETS[1])
    qtbot.addWidget(dialog)
    editor = dialog.providers_page
    editor.base_url.setText(local.url)
    with qtbot.waitSignal(editor.tester.succeeded, timeout=WAIT_MS):
        editor.test_button.click()
    assert editor.models.text() == "model-a, model-b"
    assert editor.model.text() == "model-a"  # the preset's llama3.2 is not on this server
    assert editor.profile().models == ("model-a", "model-b")


def test_the_old_qsettings_profile_moves_into_the_file_once(isolated_profile: Path) -> None:
    settings = QSettings(ORGANIZATION, APPLICATION)
    settings.setValue("providers/openai/base_url", "http://127.0.0.1:8080/v1")
    settings.setValue("providers/openai/model", "old-model")
    settings.setValue("providers/openai/rpm", 30)
    settings.sync()
    profiles = load_profiles_migrating()
    assert profiles.profiles == (
        ProfileConfig(name="openai", base_url="http://127.0.0.1:8080/v1", model="old-model", rpm=30.0),
    )
    assert (isolated_profile / "config" / "desktop-queue" / "profiles.json").exists()
    assert not [k for k in QSettings(ORGANIZATION, APPLICATION).allKeys() if k.startswith("providers/")]
    assert load_profiles_migrating() == profiles  # once


# ---------------------------------------------------------------------- the status bar


@pytest.fixture
def open_window(qtbot: Any, data_dir: Path, prompts: Any) -> Iterator[Callable[[ProfileSet], MainWindow]]:
    opened: list[tuple[MainWindow, Queue]] = []

    def open_(profiles: ProfileSet) -> MainWindow:
        providers, flow = build(profiles, plugins=False, data_dir=data_dir)  # shared state and ledger
        queue = Queue.open(data_dir, providers, policy=RetryPolicy(base_s=600, cap_s=600), rng=random.Random(1))
        controller = Controller(
            queue,
            queue.providers,
            refresh_ms=40,
            tick_ms=40,
            flow=flow,
            profiles=profiles,
            budgets={p.name: p.budget() for p in profiles.profiles},
        )
        window = MainWindow(controller)
        controller.setParent(window)
        qtbot.addWidget(window)
        controller.start(lease=False)
        window.show()
        opened.append((window, queue))
        return window

    yield open_
    for window, queue in opened:
        window.close()
        queue.close()
    assert QThreadPool.globalInstance().waitForDone(WAIT_MS)


def indicators(window: MainWindow) -> dict[str, str]:
    return {name: label.text() for name, (_item, _pic, label) in window.status.provider_items.items()}


def test_a_new_user_running_demo_jobs_sees_no_provider_noise(qtbot: Any, open_window: Any) -> None:
    window = open_window(environment_profile({}))
    window.controller.queue.submit("demo", {"prompt": "hi", "duration_s": 0})
    window.refresh()
    qtbot.wait(150)  # several refresh ticks (40 ms): nothing appears
    assert indicators(window) == {}
    window.controller.queue.submit("openai.chat", {"prompt": "hello"})
    window.controller._in_use = (-1e18, [])  # do not wait for the 5 s recheck
    qtbot.waitUntil(lambda: indicators(window) == {"openai": "openai: not set up"}, timeout=WAIT_MS)
    assert window.status._provider_levels["openai"] == "slow"


def test_each_configured_profile_shows_its_real_state(
    qtbot: Any, open_window: Any, local: FakeOpenAI, memory_keyring: MemoryKeyring
) -> None:
    profiles = ProfileSet(
        (
            ProfileConfig(name="cloud", base_url="https://api.example.com/v1"),  # no key anywhere
            ProfileConfig(name="ollama", base_url=local.url, require_key=False, budget_usd_per_day=5.0),
        ),
        "cloud",
    )
    window = open_window(profiles)
    window.controller.driver.tick()  # the driver asks each profile whether it can run
    expected = {"cloud": "cloud: no API key", "ollama": "ollama: ok"}
    qtbot.waitUntil(lambda: indicators(window) == expected, timeout=WAIT_MS)
    assert "$0.00 of $5.00 today" in window.status.provider_items["ollama"][0].toolTip()  # the spend: in the tooltip
    tip = window.status.provider_items["cloud"][0].toolTip()
    assert tip.startswith("Provider “cloud”: no API key") and "Preferences" in tip

    # Preferences removed "cloud" and added a key-less "lab": the indicators follow
    lab = ProfileConfig(name="lab", base_url=local.url, require_key=False)
    window.controller.apply_profiles(ProfileSet((profiles.profiles[1], lab), "ollama"))
    qtbot.waitUntil(lambda: set(indicators(window)) == {"ollama", "lab"}, timeout=WAIT_MS)
    assert indicators(window)["lab"] == "lab: ok"


# ---------------------------------------------------------------------- the Spend view


@pytest.mark.qt_log_ignore(r"This plugin does not support (propagateSizeHints|raise)\(\)")  # offscreen
def test_the_spend_view_totals_by_day_profile_and_model_against_budgets(
    qtbot: Any, open_window: Any, data_dir: Path, qtmodeltester: Any
) -> None:
    ledger = SpendLedger(data_dir, prices=PriceTable())
    for n, (profile, model, usd) in enumerate(
        [("cloud", "gpt-4o-mini", 0.30), ("cloud", "gpt-4o", 0.12), ("ollama", "llama3.2", 0.0)]
    ):
        ledger.record(
            profile=profile,
            model=model,
            kind="openai.chat",
            usage=Usage(tokens_in=1000, tokens_out=500),
            job_id=f"j{n}",
            attempt=1,
            usd=usd,
        )
    profiles = ProfileSet((ProfileConfig(name="cloud", require_key=False, budget_usd_per_day=5.0),), "cloud")
    window = open_window(profiles)
    window.spend_action.trigger()
    dialog = window._spend_dialog
    assert dialog is not None and dialog.isVisible()
    assert window.show_spend() is dialog  # one at a time
    model = dialog.model
    qtmodeltester.check(model)
    assert model.rowCount() == 2  # today, and the total
    assert model.index(1, 0).data() == "Total" and model.index(1, 5).data() == "~$0.42"  # built-in prices
    assert model.index(0, 5).data() == "~$0.42" and "estimate" in model.index(0, 5).data(Qt.ItemDataRole.ToolTipRole)
    ((bar, widget),) = dialog.bars
    assert bar.text == "$0.42 of $5.00 today" and widget.text() == "$0.42 of $5.00 today"
    assert widget.value() == round(0.42 / 5.0 * 1000)

    dialog.by.setCurrentIndex(dialog.by.findData("model"))
    qtmodeltester.check(model)
    rows = {model.index(r, 0).data(): model.index(r, 5).data() for r in range(model.rowCount())}
    assert rows == {"gpt-4o": "~$0.12", "gpt-4o-mini": "~$0.30", "llama3.2": "$0.00", "Total": "~$0.42"}
    assert "estimate" in model.index(0, 5).data(Qt.ItemDataRole.ToolTipRole)
    assert model.headerData(0, Qt.Orientation.Horizontal) == "Model"
    dialog.by.setCurrentIndex(dialog.by.findData("profile"))
    assert [model.index(r, 0).data() for r in range(model.rowCount())] == ["cloud", "ollama", "Total"]
    # an attempt that finishes while the view is open shows up without a click
    assert dialog.timer.isActive()
    ledger.record(
        profile="lab", model="m", kind="openai.chat", usage=Usage(tokens_in=1), job_id="late", attempt=1, usd=0.0
    )
    dialog.timer.setInterval(50)
    qtbot.waitUntil(lambda: model.rowCount() == 4, timeout=WAIT_MS)
    dialog.close()
    assert not dialog.timer.isActive()


def test_the_spend_view_says_when_nothing_was_spent(qtbot: Any, open_window: Any) -> None:
    window = open_window(ProfileSet((ProfileConfig(name="cloud", require_key=False),), "cloud"))
    dialog = window.show_spend()
    assert dialog.model.rowCount() == 0
    assert dialog.empty.isVisibleTo(dialog) and not dialog.view.isVisibleTo(dialog)
    dialog.close()


# ---------------------------------------------------------------------- first run


def test_first_run_explains_and_offers_a_demo_job_and_a_provider(
    qtbot: Any, session: Any, memory_keyring: MemoryKeyring
) -> None:
    window = session.window
    pane = window.queue_pane
    qtbot.waitUntil(lambda: pane.first_run.isVisible(), timeout=WAIT_MS)
    assert not pane.view.isVisible()
    assert pane.first_run.findChild(QLabel, "firstRunTitle").text() == "No jobs yet"

    dialog = window.connect_provider()
    qtbot.addWidget(dialog)
    editor = dialog.providers_page
    assert dialog.tabs.currentWidget() is dialog.profiles_page
    assert editor is not None and editor.preset.isVisibleTo(dialog)
    assert editor.base_url.text() == "https://api.openai.com/v1"
    ollama = editor.preset.findData("Ollama")
    editor.preset.setCurrentIndex(ollama)
    editor.preset.activated.emit(ollama)
    assert editor.base_url.text() == "http://localhost:11434/v1" and not editor.require_key.isChecked()
    dialog.reject()

    assert pane.first_run.connect_button.isVisible() and not pane.first_run.write_button.isVisible()
    pane.first_run.demo_button.click()
    qtbot.waitUntil(lambda: pane.view.isVisible(), timeout=WAIT_MS)
    assert not pane.first_run.isVisible()
    (job,) = session.queue.list()
    assert job.kind == "demo" and job.title == "My first demo job"
    assert window.timeline_model.job is not None and window.timeline_model.job.id == job.id


def test_a_provider_connected_from_the_first_run_is_taken_at_once_and_not_as_a_change_elsewhere(
    qtbot: Any, session: Any, memory_keyring: MemoryKeyring
) -> None:
    """OK in Preferences: the status bar said "The provider profiles were changed elsewhere", and the
    first-run panel offered "Connect a provider…" until the next periodic refresh."""
    window = session.window
    first = window.queue_pane.first_run
    qtbot.waitUntil(lambda: first.connect_button.isVisible(), timeout=WAIT_MS)
    said: list[str] = []
    window.controller.message.connect(said.append)
    window.controller.watch_profiles(profiles_path())  # (as app.start does)
    dialog = window.connect_provider()  # (deleted when it closes)
    editor = dialog.providers_page
    editor.preset.activated.emit(editor.preset.findData("Ollama"))
    dialog.accept()
    assert window.controller.configured_profiles()
    assert first.write_button.isVisible() and not first.connect_button.isVisible()
    assert "Your provider ollama is set up" in first.text.text()
    window.controller.reload_profiles()  # (what the watch on the profiles file runs after the save)
    assert not any("elsewhere" in text for text in said), said


def test_with_a_provider_set_up_the_first_run_offers_a_job_for_it(qtbot: Any, open_window: Any) -> None:
    """A profile added from the command line, then the window: it still said "Connect a provider"."""
    from desktop_queue.ui.dialogs import LAST_KIND_KEY, SubmitDialog

    QSettings(ORGANIZATION, APPLICATION).remove(LAST_KIND_KEY)  # (no kind submitted yet)
    window = open_window(ProfileSet((ProfileConfig(name="litellm", require_key=False),), "litellm"))
    first = window.queue_pane.first_run
    qtbot.waitUntil(lambda: first.write_button.isVisible(), timeout=WAIT_MS)
    assert not first.connect_button.isVisible() and first.demo_button.isVisible()
    assert "Your provider litellm is set up: write a job" in first.text.text()
    first.write_button.click()
    dialog = window.findChild(SubmitDialog)
    assert dialog is not None and dialog.isVisible()
    assert dialog.kind.currentData() == "openai.chat"  # a job for the provider, not the demo
    dialog.reject()


def test_a_job_on_the_default_profile_names_that_profile_not_its_kind(qtbot: Any, open_window: Any) -> None:
    """Details said "Profile: openai" for a chat job that ran on the default profile "litellm";
    the Metrics tab counted its requests under "openai" too, beside no limit."""
    window = open_window(ProfileSet((ProfileConfig(name="litellm", require_key=False),), "litellm"))
    queue = window.controller.queue
    job = queue.submit("openai.chat", {"prompt": "which profile?"}, title="chat").job
    named = queue.submit("openai.chat", {"prompt": "named", "profile": "litellm"}, title="named").job
    demo = queue.submit("demo", {"prompt": "d"}, title="demo").job
    counted_under = window.metrics_pane.source.metrics.profile_of  # (what Metrics counts requests under)
    assert counted_under(job.to_json()) == "litellm" and counted_under(demo.to_json()) == "demo"
    tabs = window.job_tabs
    tabs.setCurrentWidget(tabs.details_view)
    details = tabs.details_view
    for shown in (job.id, named.id):
        window.controller.refresher.refresh()
        assert window.show_job(shown)
        qtbot.waitUntil(
            lambda s=shown: "Job id" in details.values and details.values["Job id"].text() == s, timeout=WAIT_MS
        )
        assert details.values["Profile"].text() == "litellm"


def test_a_store_with_jobs_shows_the_table_not_the_first_run(qtbot: Any, open_session: Any, data_dir: Path) -> None:
    with Queue.open(data_dir, {"demo": DemoProvider()}) as queue:
        queue.submit("demo", {"prompt": "old"})
    session = open_session(data_dir)
    session.window.show()
    qtbot.waitUntil(lambda: session.window.queue_pane.view.isVisible(), timeout=WAIT_MS)
    assert session.window.queue_pane.first_run.isHidden()


def test_saving_profiles_in_preferences_reaches_the_running_window(
    qtbot: Any, open_window: Any, local: FakeOpenAI, isolated_profile: Path
) -> None:
    save_profiles(ProfileSet((ProfileConfig(name="ollama", base_url=local.url, require_key=False),), "ollama"))
    window = open_window(load_profiles())
    dialog = window.edit_preferences()
    qtbot.addWidget(dialog)
    editor = dialog.profiles_page.add_profile(PRESETS[3])
    editor.base_url.setText(local.url)
    dialog.accept()
    qtbot.waitUntil(lambda: set(indicators(window)) == {"ollama", "lmstudio"}, timeout=WAIT_MS)
    assert window.controller.profiles is not None and window.controller.profiles.names() == ["ollama", "lmstudio"]
    assert "lmstudio" in window.controller.flow.profiles()  # type: ignore[union-attr]


def test_a_damaged_profiles_file_is_set_aside_and_the_window_still_opens(
    qtbot: Any, data_dir: Path, isolated_profile: Path, prompts: Any
) -> None:
    from desktop_queue.app import start

    config = isolated_profile / "config" / "desktop-queue"
    config.mkdir(parents=True)
    (config / "profiles.json").write_text('{"format": "desktop-queue.profiles", "schema_version": 1, "prof')
    session = start(data_dir, lease=False, refresh_ms=100)
    assert not isinstance(session, int), prompts.errors
    qtbot.addWidget(session.window)
    try:
        (line,) = [line for line in session.banner if "profiles.json" in line]
        assert "not valid JSON" in line and "corrupt-" in line and "fall back to the environment" in line
        assert session.window.banner.isVisibleTo(session.window)
        assert len(list(config.glob("profiles.json.corrupt-*"))) == 1
        assert session.controller.profiles is not None and session.controller.profiles.names() == ["openai"]
    finally:
        session.close()
    assert QThreadPool.globalInstance().waitForDone(WAIT_MS)


def test_a_profile_added_by_the_cli_reaches_a_running_window(
    qtbot: Any, open_window: Any, local: FakeOpenAI, isolated_profile: Path, dq_env: dict[str, str]
) -> None:
    import subprocess

    path = save_profiles(ProfileSet((ProfileConfig(name="ollama", base_url=local.url, require_key=False),), "ollama"))
    window = open_window(load_profiles())
    window.controller.watch_profiles(path)
    qtbot.waitUntil(lambda: set(indicators(window)) == {"ollama"}, timeout=WAIT_MS)
    run = subprocess.run(
        [sys.executable, "-m", "desktop_queue", "profile", "add", "lab", "--base-url", local.url],
        env=dq_env,
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert run.returncode == 0, run.stderr
    qtbot.waitUntil(lambda: set(indicators(window)) == {"ollama", "lab"}, timeout=WAIT_MS)
    assert window.controller.profiles is not None and window.controller.profiles.names() == ["ollama", "lab"]
    # its indicator opens Preferences on it
    item = window.status.provider_items["lab"][0]
    assert "Click to open its settings" in item.toolTip()
    item.clicked.emit()
    dialog = window.findChild(PreferencesDialog)
    assert dialog is not None and dialog.providers_page.name.text() == "lab"
    dialog.reject()


@pytest.fixture
def dq_env() -> dict[str, str]:
    import os

    return {**os.environ, "PYTHON_KEYRING_BACKEND": "keyring.backends.null.Keyring", "QT_QPA_PLATFORM": "offscreen"}


def test_a_new_schedule_in_the_window_starts_from_each_kind_s_own_input(qtbot: Any, open_window: Any) -> None:
    """Every kind's schedule started from {"prompt": ""}; a speech job's text goes in "input"."""
    import json

    window = open_window(ProfileSet((ProfileConfig(name="litellm", require_key=False),), "litellm"))
    dialog = window.schedules_pane.add()
    dialog.kind.setCurrentIndex(dialog.kind.findData("openai.speech"))
    payload = json.loads(dialog.input.toPlainText())
    assert payload.get("input") == "" and "prompt" not in payload
    dialog.kind.setCurrentIndex(dialog.kind.findData("openai.chat"))
    assert json.loads(dialog.input.toPlainText()).get("prompt") == ""
    dialog.reject()


def test_a_key_sent_to_a_server_that_needs_none_is_not_said_to_be_unsent(
    qtbot: Any,
    memory_keyring: MemoryKeyring,
    local: FakeOpenAI,
    isolated_profile: Path,
    monkeypatch: pytest.MonkeyPatch,
    drained: None,
) -> None:
    """A LiteLLM proxy with a master key, set up without "needs an API key" and the key in
    its variable: every request carried the key, and Preferences said "No key is sent"."""
    save_profiles(ProfileSet((ProfileConfig(name="proxy", base_url=local.url, require_key=False),), "proxy"))
    monkeypatch.setenv("DESKTOP_QUEUE_API_KEY_PROXY", CANARY_KEY)
    dialog = PreferencesDialog(Preferences())
    qtbot.addWidget(dialog)
    page = dialog.providers_page
    assert page.key_state.text() == "A key is not required, but the one in $DESKTOP_QUEUE_API_KEY_PROXY is sent."
    monkeypatch.delenv("DESKTOP_QUEUE_API_KEY_PROXY")
    page.require_key.setChecked(True)
    page.require_key.setChecked(False)
    assert page.key_state.text() == "No key is sent to this server."
