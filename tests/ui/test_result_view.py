"""The Result and Details views on real text, JSON, PNG and WAV results (issue 11)."""

from __future__ import annotations

import base64
import io
import struct
import wave
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from PySide6.QtCore import QBuffer, QByteArray, QIODevice, QUrl
from PySide6.QtGui import QColor, QFontDatabase, QGuiApplication, QImage

from desktop_queue.core import FakeClock, Queue
from desktop_queue.core.ledger import SpendLedger, Usage
from desktop_queue.core.model import Job
from desktop_queue.core.result_view import LARGE_TEXT_BYTES
from desktop_queue.providers import discover
from desktop_queue.ui import result_view as result_module
from desktop_queue.ui.details_view import DetailsView
from desktop_queue.ui.job_tabs import DETAILS_TAB, RESULT_TAB
from desktop_queue.ui.loader import wait_for_reads
from desktop_queue.ui.result_view import LOADING_TEXT, MEDIA_NAME_CHARS, ResultView

MARKDOWN = "# Release notes\n\n- **bold** point\n- `code` point\n"


def png_bytes(width: int = 320, height: int = 200) -> bytes:
    image = QImage(width, height, QImage.Format.Format_RGB32)
    image.fill(QColor("#3366cc"))
    data = QByteArray()
    buffer = QBuffer(data)
    buffer.open(QIODevice.OpenModeFlag.WriteOnly)
    assert image.save(buffer, "PNG")
    return bytes(data.data())


def wav_bytes(seconds: float, rate: int = 8000) -> bytes:
    buf = io.BytesIO()
    with wave.open(buf, "wb") as fh:
        fh.setnchannels(1)
        fh.setsampwidth(2)
        fh.setframerate(rate)
        fh.writeframes(struct.pack("<h", 0) * int(rate * seconds))
    return buf.getvalue()


def artifact(data: bytes, name: str, mime: str, **extra: Any) -> dict[str, Any]:
    return {"artifact_b64": base64.b64encode(data).decode(), "artifact_name": name, "mime": mime, **extra}


@pytest.fixture(autouse=True)
def _reads_drained() -> Iterator[None]:
    yield
    assert wait_for_reads(5000)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def queue(data_dir: Path, clock: FakeClock) -> Iterator[Queue]:
    q = Queue.open(data_dir, discover(), clock=clock, background_compaction=False)
    yield q
    q.close()


def finish(queue: Queue, result: Any, kind: str = "demo", payload: dict[str, Any] | None = None) -> Job:
    job = queue.submit(kind, payload or {"prompt": f"p {queue.store.state.version}", "duration_s": 0.01}).job
    lease = queue.lease("test")
    assert lease is not None and lease.job_id == job.id
    return queue.complete(lease, result)


@pytest.fixture
def view(qtbot: Any, queue: Queue) -> ResultView:
    widget = ResultView(queue)
    qtbot.addWidget(widget)
    widget.resize(700, 500)
    widget.show()
    return widget


@pytest.fixture
def opened(monkeypatch: pytest.MonkeyPatch) -> list[QUrl]:
    urls: list[QUrl] = []
    monkeypatch.setattr(result_module, "open_url", lambda url: urls.append(url) or True)
    monkeypatch.setattr(result_module, "reveal_file", lambda _path: False)  # no file manager on the bus
    return urls


def show(qtbot: Any, view: ResultView, job: Job) -> None:
    with qtbot.waitSignal(view.shown, timeout=5000) as blocker:
        view.show_job(job)
    assert blocker.args == [job.id]


def test_a_text_result_renders_its_markdown_and_plain_shows_it_as_written(
    qtbot: Any, view: ResultView, queue: Queue
) -> None:
    job = finish(queue, {"text": MARKDOWN, "model": "demo-1", "finish_reason": "stop"})

    show(qtbot, view, job)

    assert view.pages.currentWidget() is view.markdown
    rendered = view.markdown.toPlainText()
    assert "Release notes" in rendered and "#" not in rendered and "**" not in rendered
    assert view.summary.text() == f"text · {len(MARKDOWN)} characters · demo-1 · finish: stop"
    assert view.plain_check.isVisibleTo(view) and not view.zoom_in_button.isVisibleTo(view)
    view.plain_check.setChecked(True)
    assert view.pages.currentWidget() is view.plain
    assert view.plain.toPlainText() == MARKDOWN


def test_copy_and_save_as_take_the_whole_text(
    qtbot: Any, view: ResultView, queue: Queue, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    job = finish(queue, {"text": MARKDOWN})
    show(qtbot, view, job)
    asked: list[str] = []
    target = tmp_path / "out" / "notes.md"
    target.parent.mkdir()

    def ask(_parent: Any, _title: str, suggested: str, _filters: str) -> str:
        asked.append(suggested)
        return str(target)

    monkeypatch.setattr(result_module, "ask_save_path", ask)
    view.copy_button.click()
    view.save_button.click()

    assert QGuiApplication.clipboard().text() == MARKDOWN
    assert asked == [f"{result_module.file_stem(job.title, job.id)}.md"]
    assert target.read_text() == MARKDOWN
    assert view.note.text().startswith("Saved ")


def test_a_json_result_is_pretty_and_monospace(qtbot: Any, view: ResultView, queue: Queue) -> None:
    job = finish(queue, {"labels": ["cat", "dog"], "score": 0.75})

    show(qtbot, view, job)

    assert view.pages.currentWidget() is view.plain
    assert view.plain.toPlainText() == '{\n  "labels": [\n    "cat",\n    "dog"\n  ],\n  "score": 0.75\n}'
    assert view.plain.font().family() == QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont).family()
    assert not view.plain_check.isVisibleTo(view)


def test_an_image_is_fitted_zoomed_and_opened_with_the_system_viewer(
    qtbot: Any, view: ResultView, queue: Queue, opened: list[QUrl]
) -> None:
    data = png_bytes(1600, 1000)
    job = finish(queue, artifact(data, "pic.png", "image/png", model="gpt-image-1"), kind="openai.image")

    show(qtbot, view, job)

    assert view.pages.currentWidget() is view.image_view
    pixmap = view.image_view.pixmap
    assert pixmap is not None and (pixmap.width(), pixmap.height()) == (1600, 1000)
    fitted = view.image_view.scale()
    assert 0 < fitted < 1  # a big image is fitted to the view
    assert view.zoom_label.text() == f"fit · {fitted * 100:.0f} %"
    view.zoom_in_button.click()
    assert view.image_view.scale() == pytest.approx(fitted * 1.25)
    view.actual_button.click()
    assert view.image_view.scale() == 1.0 and view.image_view.label.width() == 1600
    assert view.zoom_label.text() == "100 %"
    view.zoom_out_button.click()
    assert view.image_view.scale() == pytest.approx(0.8)
    view.fit_button.click()
    assert view.image_view.scale() == pytest.approx(fitted)

    view.open_button.click()
    view.folder_button.click()
    assert view.content is not None and view.content.path is not None
    assert [u.toLocalFile() for u in opened] == [str(view.content.path), str(view.content.path.parent)]
    assert view.content.path.read_bytes() == data


def test_no_selection_leaves_no_tools_of_the_job_shown_before(qtbot: Any, view: ResultView, queue: Queue) -> None:
    job = finish(queue, artifact(png_bytes(64, 64), "pic.png", "image/png", model="gpt-image-1"), kind="openai.image")
    show(qtbot, view, job)
    assert view.zoom_in_button.isVisibleTo(view) and view.copy_button.isVisibleTo(view)
    view.show_job(None)
    tools = (view.copy_button, view.save_button, view.zoom_in_button, view.fit_button, view.open_button)
    assert not any(w.isVisibleTo(view) for w in tools)
    assert view.message.text() == "Select a job to see its result"


def test_show_in_folder_selects_the_file_where_a_file_manager_answers(
    qtbot: Any, view: ResultView, queue: Queue, opened: list[QUrl], monkeypatch: pytest.MonkeyPatch
) -> None:
    revealed: list[Path] = []
    monkeypatch.setattr(result_module, "reveal_file", lambda path: revealed.append(path) or True)
    job = finish(queue, artifact(png_bytes(), "pic.png", "image/png"), kind="openai.image")
    show(qtbot, view, job)

    view.folder_button.click()

    assert view.content is not None and revealed == [view.content.path]
    assert opened == []  # the folder itself is opened only where no file manager answers


def test_ctrl_wheel_zooms_the_image(qtbot: Any, view: ResultView, queue: Queue) -> None:
    from PySide6.QtCore import QPoint, QPointF, Qt
    from PySide6.QtGui import QWheelEvent
    from PySide6.QtWidgets import QApplication

    job = finish(queue, artifact(png_bytes(1600, 1000), "pic.png", "image/png"), kind="openai.image")
    show(qtbot, view, job)
    fitted = view.image_view.scale()

    def wheel(delta: int, modifiers: Qt.KeyboardModifier) -> None:
        event = QWheelEvent(
            QPointF(10, 10),
            QPointF(10, 10),
            QPoint(0, 0),
            QPoint(0, delta),
            Qt.MouseButton.NoButton,
            modifiers,
            Qt.ScrollPhase.NoScrollPhase,
            False,
        )
        QApplication.sendEvent(view.image_view.viewport(), event)

    wheel(120, Qt.KeyboardModifier.ControlModifier)
    assert view.image_view.scale() == pytest.approx(fitted * 1.25)
    wheel(-120, Qt.KeyboardModifier.ControlModifier)
    assert view.image_view.scale() == pytest.approx(fitted)
    wheel(120, Qt.KeyboardModifier.NoModifier)  # scrolls, does not zoom
    assert view.image_view.scale() == pytest.approx(fitted)


def test_a_small_image_is_never_enlarged_to_fit(qtbot: Any, view: ResultView, queue: Queue) -> None:
    job = finish(queue, artifact(png_bytes(40, 30), "tiny.png", "image/png"), kind="openai.image")

    show(qtbot, view, job)

    assert view.image_view.scale() == 1.0


def test_copy_of_an_image_puts_the_image_on_the_clipboard(qtbot: Any, view: ResultView, queue: Queue) -> None:
    job = finish(queue, artifact(png_bytes(64, 48), "pic.png", "image/png"), kind="openai.image")
    show(qtbot, view, job)

    view.copy_button.click()

    assert QGuiApplication.clipboard().image().size().toTuple() == (64, 48)


def test_audio_shows_its_duration_and_plays_in_the_system_player(
    qtbot: Any, view: ResultView, queue: Queue, opened: list[QUrl], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(result_module, "multimedia", lambda: None)  # as with PySide6-Essentials
    job = finish(
        queue, artifact(wav_bytes(2.0), "speech.wav", "audio/wav"), kind="openai.speech", payload={"input": "say hi"}
    )

    show(qtbot, view, job)

    assert view.pages.currentWidget() is view.media
    assert view.media.text().startswith("Audio · 0:02\naudio/wav")
    # the file is named by the key's hash, one word the label cannot wrap: it ran past the pane
    assert view.content is not None and view.content.path is not None
    full = view.content.path.name
    shown = view.media.text().splitlines()[-1]
    assert len(full) > MEDIA_NAME_CHARS and len(shown) <= MEDIA_NAME_CHARS and "…" in shown
    assert shown.endswith(full[-8:]) and view.media.toolTip() == str(view.content.path)
    assert "0:02" in view.summary.text()
    assert view.play_button.isVisibleTo(view) and view.play_button.text() == "Play in system player"
    view.play_button.click()
    assert view.content is not None and view.content.path is not None
    assert [u.toLocalFile() for u in opened] == [str(view.content.path)]


def test_a_missing_result_file_says_so(qtbot: Any, view: ResultView, queue: Queue) -> None:
    job = finish(queue, {"text": "soon gone"})
    queue.store.compact_now()
    queue.results.path_for(job.idempotency_key).unlink()

    show(qtbot, view, job)

    assert view.pages.currentWidget() is view.message
    assert view.message.text().startswith("the result file is missing or damaged: result file missing")
    assert not view.copy_button.isVisibleTo(view) and not view.save_button.isVisibleTo(view)


def test_a_damaged_result_file_says_where_it_went(qtbot: Any, view: ResultView, queue: Queue) -> None:
    job = finish(queue, {"text": "soon damaged"})
    queue.store.compact_now()
    queue.results.path_for(job.idempotency_key).write_bytes(b'{"format": "desktop-que')

    show(qtbot, view, job)

    assert "result damaged, moved aside to " in view.message.text()


def test_a_missing_image_file_says_so(qtbot: Any, view: ResultView, queue: Queue) -> None:
    job = finish(queue, artifact(png_bytes(), "pic.png", "image/png"), kind="openai.image")
    path = queue.results.artifact_path(job.idempotency_key)
    assert path is not None
    path.unlink()

    show(qtbot, view, job)

    assert view.message.text() == f"the result file is missing or damaged: the artifact {path} is not there"


def test_jobs_without_a_result_say_why(qtbot: Any, view: ResultView, queue: Queue) -> None:
    from desktop_queue.core import Outcome

    doomed = queue.submit("demo", {"prompt": "doomed"}).job
    lease = queue.lease("t")
    assert lease is not None and lease.job_id == doomed.id
    dead = queue.fail(lease, Outcome.failure("fatal", "demo: simulated HTTP 401", status=401))
    queued = queue.submit("demo", {"prompt": "waiting"}).job

    show(qtbot, view, queue.get(queued.id))
    assert view.message.text() == "queued — no result yet"
    assert view.summary.isHidden()  # said once, not again in the line above it
    show(qtbot, view, dead)
    assert view.message.text() == "dead: fatal: demo: simulated HTTP 401"
    assert view.summary.isHidden()
    assert view.heading.isVisibleTo(view) and dead.id in view.heading.text()
    view.show_job(None)
    assert view.message.text() == "Select a job to see its result"
    assert not view.heading.isVisibleTo(view)  # the prompt is said once, in the body


def test_a_large_text_says_loading_first_and_never_blocks(qtbot: Any, view: ResultView, queue: Queue) -> None:
    text = "".join(f"line {i:06d} of a very long answer\n" for i in range(40_000))  # about 1.3 MB
    assert len(text) > 4 * LARGE_TEXT_BYTES
    job = finish(queue, {"text": text})
    queue.store.compact_now()  # the result lives in its file: its size is known before it is read
    ticks: list[int] = []
    from PySide6.QtCore import QTimer

    timer = QTimer()
    timer.setInterval(0)
    timer.timeout.connect(lambda: ticks.append(1))

    view.show_job(job)
    assert view.message.text().startswith(LOADING_TEXT)
    assert view.pages.currentWidget() is view.message
    timer.start()
    qtbot.waitUntil(lambda: view.content is not None and view.content.text is not None, timeout=10_000)
    while_feeding = len(ticks)
    qtbot.waitUntil(lambda: not view.feeding, timeout=20_000)
    timer.stop()

    assert view.pages.currentWidget() is view.plain  # too big to render as Markdown
    assert not view.plain_check.isEnabled()
    assert view.plain.toPlainText() == text.rstrip("\n") or view.plain.toPlainText() == text
    assert len(ticks) > while_feeding  # the event loop ran between the slices


def test_a_result_is_read_when_its_view_is_shown(qtbot: Any, queue: Queue) -> None:
    view = ResultView(queue)
    qtbot.addWidget(view)
    job = finish(queue, {"text": "lazy"})

    view.show_job(job)
    assert view.content is None  # hidden: nothing read yet
    with qtbot.waitSignal(view.shown, timeout=5000):
        view.show()

    assert view.markdown.toPlainText() == "lazy"


def test_a_running_job_shows_its_progress_against_the_usual_time(
    qtbot: Any, view: ResultView, queue: Queue, clock: FakeClock
) -> None:
    for i in range(3):
        queue.submit("demo", {"prompt": f"done {i}", "model": "m"})
        lease = queue.lease("t")
        assert lease is not None
        clock.advance(40.0)
        queue.complete(lease, {"text": "ok"})
    job = queue.submit("demo", {"prompt": "now", "model": "m"}).job
    lease = queue.lease("t")
    assert lease is not None and lease.job_id == job.id
    clock.advance(10.0)

    view.show_job(queue.get(job.id))
    qtbot.waitUntil(lambda: view.run_times is not None, timeout=5000)

    assert view.progress_box.isVisibleTo(view)
    assert view.progress_label.text() == "about 40 s usually (this model, 3 finished); 10 s so far"
    assert view.progress.value() == 250
    clock.advance(40.0)
    view.tick()
    assert view.progress.maximum() == 0  # past the usual time: a busy bar
    assert view.progress_label.text().startswith("taking longer than usual")
    assert view.message.text() == "running — no result yet"
    done = queue.complete(lease, {"text": "finally"})
    with qtbot.waitSignal(view.shown, timeout=5000):
        view.update_job(done)
    assert not view.progress_box.isVisibleTo(view)
    assert view.run_times is not None and view.run_times.usual("demo", "m") is not None


# ---------------------------------------------------------------------- details


def test_details_show_the_input_model_usage_cost_ids_and_key(
    qtbot: Any, queue: Queue, data_dir: Path, clock: FakeClock
) -> None:
    job = finish(
        queue,
        {
            "text": "4",
            "model": "gpt-4o-mini-2024-07-18",
            "usage": {"prompt_tokens": 9, "completion_tokens": 1},
            "id": "req-77",
        },
        kind="openai.chat",
        payload={"prompt": "What is 2+2?", "model": "gpt-4o-mini", "temperature": 0},
    )
    SpendLedger(data_dir, clock).record(
        profile="local", model="gpt-4o-mini", kind="openai.chat", usage=Usage(9, 1), job_id=job.id, attempt=1, usd=0.25
    )
    details = DetailsView(queue)
    qtbot.addWidget(details)
    details.show()
    assert not details.input_view.isVisible()  # no job: "Select a job…" alone, no empty input box

    details.show_job(job)
    qtbot.waitUntil(lambda: "Model" in details.values, timeout=5000)

    values = {label: widget.text() for label, widget in details.values.items()}
    assert values["Model"] == "gpt-4o-mini-2024-07-18 (asked for gpt-4o-mini)"
    assert values["Profile"] == "local"  # where its attempt ran (the ledger), not its kind's prefix
    assert values["Usage"] == "9 tokens in, 1 out"
    assert values["Cost"] == "$0.25"
    assert values["Provider request id"] == "req-77"
    assert '"prompt": "What is 2+2?"' in details.input_view.toPlainText()
    details.copy_prompt.click()
    assert QGuiApplication.clipboard().text() == "What is 2+2?"
    details.findChild(type(details.copy_input), "copy-idempotency-key").click()
    assert QGuiApplication.clipboard().text() == job.idempotency_key
    assert details.input_view.isVisible()
    details.show_job(None)
    assert not details.input_view.isVisible() and details.status.text() == "Select a job to see its details"


def test_the_window_shows_the_selected_jobs_result_and_details(qtbot: Any, session: Any) -> None:
    window = session.window
    job = session.controller.queue.submit("demo", {"prompt": "hello window", "duration_s": 0.01}).job
    qtbot.waitUntil(lambda: session.controller.queue.get(job.id).state == "succeeded", timeout=10_000)
    tabs = window.job_tabs
    tabs.setCurrentIndex(RESULT_TAB)

    with qtbot.waitSignal(tabs.result_view.shown, timeout=5000):
        window.show_job(job.id)

    assert tabs.result_view.content is not None and tabs.result_view.content.text
    assert tabs.result_view.markdown.toPlainText() == tabs.result_view.content.text
    tabs.setCurrentIndex(DETAILS_TAB)
    qtbot.waitUntil(lambda: "Kind" in tabs.details_view.values, timeout=5000)
    assert tabs.details_view.values["Job id"].text() == job.id
    assert "hello window" in tabs.details_view.input_view.toPlainText()


# ---------------------------------------------------------------------- streaming


def test_a_streamed_chat_shows_its_text_live_and_stores_only_the_final_answer(
    qtbot: Any, open_session: Any, data_dir: Path, tmp_path: Path
) -> None:
    import sys
    import threading

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "providers"))
    from fakeserver import FakeOpenAI

    from desktop_queue.providers.demo import DemoProvider
    from desktop_queue.providers.openai_compat import OpenAIProfile, make_providers

    server = FakeOpenAI()
    server.start()
    server.stream_gate = threading.Event()
    try:
        chat = make_providers(OpenAIProfile(base_url=server.url, model="m", require_key=False))["openai.chat"]
        session = open_session(data_dir, providers={"demo": DemoProvider(tick_s=0.01), "openai.chat": chat})
        assert not isinstance(session, int)
        session.window.show()
        tabs = session.window.job_tabs
        tabs.setCurrentIndex(RESULT_TAB)
        job = session.controller.queue.submit("openai.chat", {"prompt": "a story", "stream": True}).job
        driver = session.controller.driver
        qtbot.waitUntil(lambda: driver.partial_of(job.id) == "generated", timeout=10_000)
        session.window.show_job(job.id)  # opened mid-stream: what came so far shows at once

        assert tabs.result_view.partial_text == "generated"
        assert "generated" in tabs.result_view.markdown.toPlainText()
        assert tabs.result_view.summary.text().startswith("streaming… 9 characters so far")
        assert session.controller.queue.results.get(job.idempotency_key) is None  # nothing stored mid-stream

        server.stream_gate.set()
        qtbot.waitUntil(
            lambda: tabs.result_view.content is not None and tabs.result_view.content.text == "generated streamed text",
            timeout=10_000,
        )
        stored = session.controller.queue.results.get(job.idempotency_key)
        assert stored is not None and stored["result"]["text"] == "generated streamed text"
        assert tabs.result_view.partial_text is None
        assert driver.partial_of(job.id) is None  # forgotten once the attempt ended
    finally:
        server.stream_gate.set()
        server.stop()


def test_the_job_tab_shown_last_is_shown_again(qtbot: Any, queue: Queue) -> None:
    from desktop_queue.ui.job_tabs import TIMELINE_TAB, JobTabs
    from desktop_queue.ui.models import TimelineModel
    from desktop_queue.ui.panes import TimelinePane

    first = JobTabs(TimelinePane(TimelineModel()), queue)
    qtbot.addWidget(first)
    assert first.currentIndex() == TIMELINE_TAB
    first.setCurrentIndex(DETAILS_TAB)

    again = JobTabs(TimelinePane(TimelineModel()), queue)
    qtbot.addWidget(again)

    assert again.currentIndex() == DETAILS_TAB
