"""The Providers page of Preferences, against the real fake OpenAI server (not a mock)."""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import keyring
import keyring.backends.fail
import pytest
from PySide6.QtCore import QThreadPool
from PySide6.QtWidgets import QDialog, QLineEdit

sys.path.insert(0, str(Path(__file__).parents[1] / "providers"))

from fakeserver import FakeOpenAI  # noqa: E402
from provider_helpers import CANARY_KEY, MemoryKeyring, memory_keyring, server  # noqa: E402, F401  (fixtures)

from desktop_queue.core.flow import WAITING_UNAVAILABLE, FlowControl, ProfileLimits  # noqa: E402
from desktop_queue.core.ledger import Budget, Price, PriceTable  # noqa: E402
from desktop_queue.core.present import describe_state  # noqa: E402
from desktop_queue.providers.openai_compat import KEYRING_SERVICE  # noqa: E402
from desktop_queue.providers.profiles import load_profiles  # noqa: E402
from desktop_queue.providers.setup import ProfileConfig  # noqa: E402
from desktop_queue.ui.dialogs import PreferencesDialog  # noqa: E402
from desktop_queue.ui.models import QueueModel  # noqa: E402
from desktop_queue.ui.settings import Preferences  # noqa: E402

WAIT_MS = 5000


def load_provider_profile(name: str = "openai") -> ProfileConfig:
    """The profile as saved in the profiles file (the defaults when none was saved)."""
    return load_profiles().get(name) or ProfileConfig()


WRONG_KEY = "sk-wrong-0d9e8f7a6b5c4d3e2f1a"


@pytest.fixture
def dialog(qtbot: Any, server: FakeOpenAI) -> Iterator[PreferencesDialog]:
    dlg = PreferencesDialog(Preferences(), ProfileConfig(base_url=server.url, model="model-a"))
    qtbot.addWidget(dlg)
    yield dlg
    # A connection test reports after closing its client, but its pool thread still has
    # to return from run() (and take the GIL to drop the runnable) after the signal went
    # out: let it, with a bound, before the autouse check that the pool was left idle.
    assert QThreadPool.globalInstance().waitForDone(WAIT_MS)


def files_containing(root: Path, secret: str) -> list[Path]:
    return [p for p in root.rglob("*") if p.is_file() and secret.encode() in p.read_bytes()]


def test_test_connection_lists_the_models_off_the_gui_thread(qtbot: Any, dialog: PreferencesDialog) -> None:
    page = dialog.providers_page
    assert page.api_key.echoMode() is QLineEdit.EchoMode.Password
    page.api_key.setText(CANARY_KEY)
    with (
        qtbot.assertNotEmitted(page.tester.failed),
        qtbot.waitSignal(page.tester.succeeded, timeout=WAIT_MS) as blocker,
    ):
        page.test_button.click()
        assert not page.test_button.isEnabled()
    assert blocker.args == [["model-a", "model-b"]]
    assert page.test_button.isEnabled()
    assert "model-a, model-b" in page.message.text.text()


def test_test_connection_uses_the_saved_key(
    qtbot: Any, dialog: PreferencesDialog, memory_keyring: MemoryKeyring
) -> None:
    memory_keyring.set_password(KEYRING_SERVICE, "openai", CANARY_KEY)
    with qtbot.waitSignal(dialog.providers_page.tester.succeeded, timeout=WAIT_MS):
        dialog.providers_page.test_button.click()


def test_a_wrong_key_is_reported_exactly_and_redacted(
    qtbot: Any, dialog: PreferencesDialog, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    page = dialog.providers_page
    page.api_key.setText(WRONG_KEY)  # the server quotes the key it got in its 401 message
    with qtbot.waitSignal(page.tester.failed, timeout=WAIT_MS) as blocker:
        page.test_button.click()
    message = blocker.args[0]
    assert "401" in message or "Incorrect API key" in message, message
    assert WRONG_KEY not in message and WRONG_KEY[-8:] not in message
    assert not page.message.ok
    assert WRONG_KEY not in page.message.text.text()
    assert WRONG_KEY not in caplog.text


def test_unreachable_endpoint_is_reported(qtbot: Any, dialog: PreferencesDialog, server: FakeOpenAI) -> None:
    page = dialog.providers_page
    page.base_url.setText(server.url)
    server.stop()
    page.api_key.setText(CANARY_KEY)
    with qtbot.waitSignal(page.tester.failed, timeout=WAIT_MS * 3) as blocker:
        page.test_button.click()
    assert blocker.args[0]
    assert CANARY_KEY not in blocker.args[0]


def test_ok_puts_the_key_in_the_keyring_and_never_in_settings_or_logs(
    dialog: PreferencesDialog,
    memory_keyring: MemoryKeyring,
    isolated_profile: Path,
    caplog: pytest.LogCaptureFixture,
    server: FakeOpenAI,
) -> None:
    caplog.set_level(logging.DEBUG)
    page = dialog.providers_page
    page.model.setText("model-b")
    page.rpm.setValue(60)
    page.tpm.setValue(40_000)
    page.concurrency.setValue(3)
    page.api_key.setText(CANARY_KEY)
    dialog.accept()
    assert dialog.result() == QDialog.DialogCode.Accepted
    assert memory_keyring.store[(KEYRING_SERVICE, "openai")] == CANARY_KEY
    assert page.api_key.text() == ""
    saved = load_provider_profile()
    assert saved == ProfileConfig(base_url=server.url, model="model-b", rpm=60.0, tpm=40_000.0, concurrency=3)
    assert dialog.provider_profile() == saved
    assert (isolated_profile / "config" / "desktop-queue" / "profiles.json").exists(), "the profiles file is elsewhere"
    assert files_containing(isolated_profile, CANARY_KEY) == []
    assert CANARY_KEY not in caplog.text


def test_no_keyring_is_said_inline_and_nothing_is_written(dialog: PreferencesDialog, isolated_profile: Path) -> None:
    keyring.set_keyring(keyring.backends.fail.Keyring())
    page = dialog.providers_page
    page.api_key.setText(CANARY_KEY)
    dialog.accept()
    assert dialog.result() != QDialog.DialogCode.Accepted
    assert dialog.tabs.currentWidget() is dialog.profiles_page
    assert not page.message.ok
    assert "no usable OS keyring" in page.message.text.text()
    assert "DESKTOP_QUEUE_API_KEY_OPENAI" in page.message.text.text()  # (the profile's own variable)
    assert files_containing(isolated_profile, CANARY_KEY) == []
    assert load_provider_profile() == ProfileConfig()  # nothing saved at all


# ---------------------------------------------------------------- "next run" says why flow control holds a job


def test_next_run_says_why_flow_control_holds_a_job() -> None:
    flow = FlowControl({"openai": ProfileLimits(breaker_threshold=1, breaker_cooldown_s=600)})
    job = {"id": "j1", "kind": "openai.chat", "state": "queued", "run_after": 0.0, "total_attempts": 0}
    assert describe_state(job, 100.0, flow.waiting_reason) == "ready"
    assert flow.accept({"id": "j0", "kind": "openai.chat", "input": {"prompt": "x"}})
    flow.on_start({"id": "j0", "kind": "openai.chat", "input": {"prompt": "x"}})
    from desktop_queue.core import Outcome

    flow.on_outcome({"id": "j0", "kind": "openai.chat", "input": {"prompt": "x"}}, Outcome.failure("retryable", "boom"))
    assert describe_state(job, 100.0, flow.waiting_reason).startswith(WAITING_UNAVAILABLE)
    assert describe_state({**job, "kind": "demo"}, 100.0, flow.waiting_reason) == "ready"
    assert describe_state(job, 100.0) == "ready"  # no flow control: as before


def test_queue_model_shows_the_hold_reason(qtmodeltester: Any) -> None:
    model = QueueModel(
        clock=lambda: 100.0, hold=lambda j: "waiting: concurrency cap" if j["kind"] == "openai.chat" else None
    )
    model.reset_jobs(
        [
            {
                "id": "a",
                "kind": "openai.chat",
                "state": "queued",
                "run_after": 0.0,
                "seq": 1,
                "attempts": 0,
                "max_attempts": 5,
            },
            {
                "id": "b",
                "kind": "demo",
                "state": "queued",
                "run_after": 0.0,
                "seq": 2,
                "attempts": 0,
                "max_attempts": 5,
            },
        ]
    )
    qtmodeltester.check(model)
    column = [c.key for c in model.columns].index("next")
    texts = {model.job_at(r)["id"]: model.data(model.index(r, column)) for r in range(model.rowCount())}
    assert texts == {"a": "waiting: concurrency cap", "b": "ready"}


# ---------------------------------------------------------------- budgets and the model's price


def test_budgets_and_an_own_price_are_saved_and_shown_again(
    qtbot: Any, memory_keyring: MemoryKeyring, isolated_profile: Path
) -> None:
    dlg = PreferencesDialog(Preferences(), ProfileConfig(base_url="https://api.example.com/v1", model="gpt-4o"))
    qtbot.addWidget(dlg)
    page = dlg.providers_page
    assert not page.own_price.isChecked() and not page.price_in.isEnabled()
    assert page.price_in.value() == pytest.approx(2.50) and page.price_out.value() == pytest.approx(10.0)
    assert "Estimate for gpt-4o" in page.price_note.text() and "Prices change" in page.price_note.text()
    assert page.budget_usd_day.text() == "no budget"

    page.budget_usd_day.setValue(5.0)
    page.budget_usd_month.setValue(50.0)
    page.budget_tokens_day.setValue(10_000)
    page.budget_tokens_month.setValue(200_000)
    page.own_price.setChecked(True)
    assert page.price_in.isEnabled()
    page.price_in.setValue(2.0)
    page.price_out.setValue(8.0)
    dlg.accept()
    assert dlg.result() == QDialog.DialogCode.Accepted

    saved = load_provider_profile()
    assert saved.budget() == Budget(
        usd_per_day=5.0, usd_per_month=50.0, tokens_per_day=10_000, tokens_per_month=200_000
    )
    assert saved == dlg.provider_profile()
    prices = PriceTable.load(isolated_profile / "data")  # what `desktop-queue work` on that data dir reads
    assert prices.user_price("gpt-4o") == Price(input_per_1m=2.0, output_per_1m=8.0)

    again = PreferencesDialog(Preferences(), saved)
    qtbot.addWidget(again)
    page = again.providers_page
    assert (page.budget_usd_day.value(), page.budget_usd_month.value()) == (5.0, 50.0)
    assert (page.budget_tokens_day.value(), page.budget_tokens_month.value()) == (10_000, 200_000)
    assert page.own_price.isChecked() and page.price_in.value() == pytest.approx(2.0)

    page.own_price.setChecked(False)  # back to the estimate; budgets cleared
    page.budget_usd_day.setValue(0)
    again.accept()
    assert PriceTable.load(isolated_profile / "data").user_price("gpt-4o") is None
    assert load_provider_profile().budget_usd_per_day is None


def test_the_price_follows_the_model_and_a_local_server_is_free(qtbot: Any, dialog: PreferencesDialog) -> None:
    page = dialog.providers_page  # the fake server listens on 127.0.0.1
    assert "on this machine" in page.price_note.text()
    page.base_url.setText("https://api.example.com/v1")
    assert "No built-in price for model-a" in page.price_note.text()
    page.model.setText("gpt-4o-mini")
    assert page.price_in.value() == pytest.approx(0.15) and "Estimate" in page.price_note.text()


def test_an_unchanged_price_writes_no_prices_file(
    qtbot: Any, memory_keyring: MemoryKeyring, isolated_profile: Path
) -> None:
    dlg = PreferencesDialog(Preferences(), ProfileConfig(model="gpt-4o"))
    qtbot.addWidget(dlg)
    dlg.providers_page.budget_tokens_day.setValue(1000)
    dlg.accept()
    assert dlg.result() == QDialog.DialogCode.Accepted
    assert not (isolated_profile / "data" / "prices.json").exists()
    assert load_provider_profile().budget_tokens_per_day == 1000
