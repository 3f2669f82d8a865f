"""Forms generated from a provider's input description (:mod:`desktop_queue.core.inputspec`).

One editor per field type: a line for strings, a growing text box for prompts (no
length cap: the 1 MiB input limit is the only one), spin boxes for numbers (with a
"server default" state for optional ones), a check box, a drop-down (editable when any
text goes), a JSON box. Fields marked ``advanced`` sit in a collapsed "Advanced"
section. The form holds no rules of its own: what is acceptable is the provider's
``validate``; the form only turns widgets into values and back.

A model field can ask the profile's server for its model list (:class:`ModelLister`,
on a pool thread; the list is remembered for the session).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from typing import Any, ClassVar

from PySide6.QtCore import QObject, QSize, Qt, QThreadPool, Signal, Slot
from PySide6.QtGui import QFontDatabase, QKeyEvent
from PySide6.QtWidgets import (
    QAbstractSpinBox,
    QCheckBox,
    QComboBox,
    QDoubleSpinBox,
    QFormLayout,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPlainTextEdit,
    QSizePolicy,
    QSpinBox,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from desktop_queue.core.inputspec import MODELS, PROFILES, FieldType, InputField, InputSpec, profile_routes

#: the largest value a Qt spin box holds
_INT_MAX = 2**31 - 1
_NUMBER_MAX = 1e12
#: the default label of an unset optional field
UNSET = "(default)"
#: a choice box's width, in characters: at least this, and its longest choice up to the most
COMBO_MIN_CHARS, COMBO_MAX_CHARS = 18, 40


#: a line longer than this is shown unwrapped: Qt takes tens of seconds to wrap a
#: megabyte without spaces (a pasted base64 blob or minified JSON)
LONG_LINE = 10_000


def _longest_line(text: str) -> int:
    return max((len(line) for line in text.split("\n")), default=0)


class PromptEditor(QPlainTextEdit):
    """A multi-line text box with no length cap that stays quick on huge pastes.

    Text wraps at the widget's width, except while some line is longer than
    :data:`LONG_LINE`: then it scrolls sideways (Qt cannot lay such a line out quickly).
    Enter is a new line; Ctrl+Enter asks to submit.

    Signals:
        submit_requested(): Ctrl+Enter was pressed.
    """

    submit_requested = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.textChanged.connect(self._rewrap)

    def sizeHint(self) -> QSize:  # noqa: N802 (Qt's name)
        # no taller than its minimum: a form's scroll area scrolls by its content's size
        # hint, and QPlainTextEdit's own (192 px) put the rows below the prompt out of sight
        # in a dialog with room for all of them. The prompt grows into the room there is.
        hint = super().sizeHint()
        return QSize(hint.width(), max(self.minimumHeight(), self.minimumSizeHint().height()))

    def keyPressEvent(self, event: QKeyEvent) -> None:  # noqa: N802 (Qt's name)
        if event.key() in (Qt.Key.Key_Return, Qt.Key.Key_Enter) and (
            event.modifiers() & Qt.KeyboardModifier.ControlModifier
        ):
            event.accept()
            self.submit_requested.emit()
            return
        super().keyPressEvent(event)

    def _unwrap_for(self, text: str) -> None:
        if _longest_line(text) > LONG_LINE:
            self.setLineWrapMode(QPlainTextEdit.LineWrapMode.NoWrap)

    def insertFromMimeData(self, source: Any) -> None:  # noqa: N802 (Qt's name)
        """A paste: unwrapped first if it brings a very long line."""
        if source is not None and source.hasText():
            self._unwrap_for(source.text())
        super().insertFromMimeData(source)

    def setPlainText(self, text: str) -> None:  # noqa: N802 (Qt's name)
        self._unwrap_for(text)
        super().setPlainText(text)

    def _rewrap(self) -> None:
        if self.lineWrapMode() is not QPlainTextEdit.LineWrapMode.NoWrap:
            return
        block = self.document().begin()
        while block.isValid():
            if block.length() > LONG_LINE:
                return
            block = block.next()
        self.setLineWrapMode(QPlainTextEdit.LineWrapMode.WidgetWidth)


def mnemonic_of(text: str) -> str | None:
    """The Alt letter of a control's text (``"Pro&file:"`` -> ``"f"``; ``&&`` is an ampersand), or None."""
    plain = text.replace("&&", "")
    at = plain.find("&")
    return plain[at + 1].casefold() if 0 <= at < len(plain) - 1 and not plain[at + 1].isspace() else None


def mnemonics(texts: Iterable[str]) -> set[str]:
    """The Alt letters of controls' texts (a dialog's own, which its form must leave free)."""
    return {m for text in texts if (m := mnemonic_of(text))}


def with_free_mnemonic(text: str, taken: set[str]) -> str:
    """``text`` with an Alt letter that ``taken`` does not hold, which it then holds.

    Its own letter when free; else the first free letter that starts a word, else any
    free letter; else none. A text without an Alt letter keeps none. Two controls of one
    dialog on one letter make Alt+letter cycle between them instead of acting: the New
    job dialog's "&Max attempts" and a chat form's "&Model" did.
    """
    own = mnemonic_of(text)
    if own is None:
        return text
    if own not in taken:
        taken.add(own)
        return text
    plain = text.replace("&&", "\0").replace("&", "").replace("\0", "&&")
    starts = [i for i, c in enumerate(plain) if c.isalpha() and (i == 0 or not plain[i - 1].isalpha())]
    for i in [*starts, *range(len(plain))]:
        c = plain[i]
        if c.isalpha() and c.casefold() not in taken and (i == 0 or plain[i - 1] != "&"):
            taken.add(c.casefold())
            return plain[:i] + "&" + plain[i:]
    return plain


def free_mnemonics(texts: Iterable[str], reserved: Iterable[str] = ()) -> list[str]:
    """The texts of one dialog's controls with Alt letters apart: each keeps its own letter
    unless ``reserved`` or an earlier text holds it; those that clash then take free ones
    (:func:`with_free_mnemonic`), so that a clash never moves a letter another text keeps."""
    texts = list(texts)
    taken = set(reserved)
    clashing = []
    for text in texts:
        own = mnemonic_of(text)
        clashing.append(own is not None and own in taken)
        if own is not None:
            taken.add(own)
    return [with_free_mnemonic(text, taken) if clash else text for text, clash in zip(texts, clashing, strict=True)]


def add_labelled_row(form: QFormLayout, text: str, row: QHBoxLayout, buddy: QWidget) -> QLabel:
    """``form.addRow(text, row)`` for a row of several widgets, its label's Alt letter
    going to ``buddy``: given a layout, QFormLayout sets no buddy, and the label read
    "P&riority:", ampersand and all."""
    label = QLabel(text)
    label.setBuddy(buddy)
    form.addRow(label, row)
    return label


def error_colour(widget: QWidget) -> str:
    """The red of problem text: darker on a light palette, lighter on a dark one (stays readable)."""
    return "#ff6b6b" if widget.palette().window().color().lightness() < 128 else "#c62828"


class FieldProblem(ValueError):
    """A field's text is not a value (a JSON box with broken JSON)."""


# --------------------------------------------------------------------------- one editor per field


def _fit_choices(combo: QComboBox) -> None:
    """A choice box as wide as its longest choice, within reason (at least and at most so many
    characters): a replay's "the default profile (llamacpp)" read "the default profile (llamacp"."""
    longest = max((len(combo.itemText(i)) for i in range(combo.count())), default=0)
    combo.setMinimumContentsLength(min(COMBO_MAX_CHARS, max(COMBO_MIN_CHARS, longest)))


class FieldEditor:
    """The widget of one field, and how to read and set its value.

    Attributes:
        field: the field.
        widget: the editing widget (what gets focus and the tooltip).
        row: the widget placed in the form (the editor, or it with a button beside it).
    """

    def __init__(self, field: InputField, on_change: Callable[[], None]) -> None:
        self.field = field
        self.widget: QWidget = self._make(field, on_change)
        self.row: QWidget = self.widget
        self.widget.setObjectName(f"field_{field.name}")
        self.widget.setAccessibleName(field.title)
        if field.help:
            self.widget.setToolTip(field.help)
            self.widget.setWhatsThis(field.help)

    # -- construction

    def _make(self, f: InputField, on_change: Callable[[], None]) -> QWidget:
        kind = f.type
        if kind is FieldType.TEXT or kind is FieldType.JSON:
            editor = PromptEditor() if kind is FieldType.TEXT else QPlainTextEdit()
            editor.setTabChangesFocus(True)
            editor.setPlaceholderText(f.placeholder)
            if kind is FieldType.JSON:
                editor.setFont(QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont))
                editor.setLineWrapMode(QPlainTextEdit.LineWrapMode.NoWrap)
            spacing = editor.fontMetrics().lineSpacing()
            if f.required:  # the prompt: takes the room there is
                editor.setMinimumHeight(spacing * 6 + 12)
                editor.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Expanding)
            else:  # a system prompt, a schema: a few lines, scrolling beyond
                editor.setMinimumHeight(spacing * 3 + 12)
                editor.setMaximumHeight(spacing * (8 if f.type is FieldType.JSON else 5) + 12)
                editor.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Preferred)
            editor.textChanged.connect(on_change)
            return editor
        if kind is FieldType.BOOLEAN:
            box = QCheckBox()
            box.toggled.connect(on_change)
            return box
        if kind is FieldType.INTEGER:
            spin = QSpinBox()
            low = int(f.minimum) if f.minimum is not None else -_INT_MAX
            high = int(f.maximum) if f.maximum is not None else _INT_MAX
            if f.default is None:
                low -= 1  # the "server default" state sits below the smallest value
                spin.setSpecialValueText(f.placeholder or UNSET)
            spin.setRange(low, high)
            self._unit(spin, f)
            spin.valueChanged.connect(on_change)
            spin.valueChanged.connect(lambda v, s=spin: self._unit(s, f))
            return spin
        if kind is FieldType.NUMBER:
            dspin = QDoubleSpinBox()
            dspin.setDecimals(f.decimals)
            dspin.setSingleStep(f.step)
            dlow = float(f.minimum) if f.minimum is not None else -_NUMBER_MAX
            dhigh = float(f.maximum) if f.maximum is not None else _NUMBER_MAX
            if f.default is None:
                dlow -= f.step
                dspin.setSpecialValueText(f.placeholder or UNSET)
            dspin.setRange(dlow, dhigh)
            dspin.setStepType(QAbstractSpinBox.StepType.DefaultStepType)
            self._unit(dspin, f)
            dspin.valueChanged.connect(on_change)
            dspin.valueChanged.connect(lambda v, s=dspin: self._unit(s, f))
            return dspin
        if kind is FieldType.CHOICE or (kind is FieldType.STRING and (f.choices or f.choices_from)):
            combo = QComboBox()
            free = f.free_text or kind is FieldType.STRING
            combo.setEditable(free)
            if free:
                combo.setInsertPolicy(QComboBox.InsertPolicy.NoInsert)
                line = combo.lineEdit()
                assert line is not None
                line.setPlaceholderText(f.placeholder or UNSET)
                line.setMaxLength(_INT_MAX)
                combo.setCompleter(None)  # type: ignore[arg-type]  # no inline completion: "gpt-4o" stays "gpt-4o"
                for choice in f.choices:
                    combo.addItem(choice.label, choice.value)
                combo.setCurrentIndex(-1)
                combo.editTextChanged.connect(on_change)
            else:
                if f.default is None and f.choices_from != PROFILES:
                    combo.addItem(f.placeholder or UNSET, None)
                for choice in f.choices:
                    combo.addItem(choice.label, choice.value)
                combo.currentIndexChanged.connect(on_change)
            combo.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon)
            # as wide as its longest choice, within reason: a replay's "the default profile
            # (llamacpp)" read "the default profile (llamacp"
            _fit_choices(combo)
            return combo
        edit = QLineEdit()
        edit.setMaxLength(f.max_length or _INT_MAX)  # Qt's default cuts a paste at 32,767
        edit.setPlaceholderText(f.placeholder)
        edit.textChanged.connect(on_change)
        return edit

    @staticmethod
    def _unit(spin: QSpinBox | QDoubleSpinBox, f: InputField) -> None:
        spin.setSuffix(f.unit_for(spin.value()))

    # -- values

    def value(self) -> Any:
        """The field's value (None: unset).

        Raises:
            FieldProblem: the text is not a value (broken JSON).
        """
        f, w = self.field, self.widget
        if isinstance(w, QPlainTextEdit):
            text = w.toPlainText()
            if f.type is FieldType.JSON:
                if not text.strip():
                    return None
                try:
                    return json.loads(text)
                except json.JSONDecodeError as exc:
                    raise FieldProblem(
                        f"{f.title}: not valid JSON: {exc.msg} (line {exc.lineno}, column {exc.colno})"
                    ) from None
            return text if text or f.required else None
        if isinstance(w, QCheckBox):
            return w.isChecked() if (w.isChecked() or f.default is not None) else None
        if isinstance(w, QSpinBox):
            if f.default is None and w.value() == w.minimum():
                return None
            return w.value()
        if isinstance(w, QDoubleSpinBox):
            if f.default is None and w.value() == w.minimum():
                return None
            number = round(w.value(), f.decimals)
            return int(number) if number.is_integer() and isinstance(f.default, int) else number
        if isinstance(w, QComboBox):
            if w.isEditable():
                text = w.currentText().strip()
                if not text:
                    return None
                for choice in f.choices:
                    if text == choice.label:
                        return choice.value
                return text
            return w.currentData()
        assert isinstance(w, QLineEdit)
        text = w.text()
        return text if text or f.required else None

    def set_value(self, value: Any) -> bool:
        """Shows ``value``; False if this editor cannot show it exactly."""
        f, w = self.field, self.widget
        if isinstance(w, QPlainTextEdit):
            if f.type is FieldType.JSON:
                text = "" if value is None else json.dumps(value, indent=2, ensure_ascii=False)
            else:
                text = "" if value is None else str(value)
            if w.toPlainText() != text:
                w.setPlainText(text)
            return True
        if isinstance(w, QCheckBox):
            w.setChecked(bool(value))
            return value is None or isinstance(value, bool)
        if isinstance(w, (QSpinBox, QDoubleSpinBox)):
            if value is None:
                if f.default is not None:
                    return False
                if isinstance(w, QSpinBox):
                    w.setValue(w.minimum())
                else:
                    w.setValue(w.minimum())
                return True
            if isinstance(w, QSpinBox):
                if not (w.minimum() + (1 if f.default is None else 0) <= int(value) <= w.maximum()):
                    return False
                w.setValue(int(value))
                return w.value() == value
            w.setValue(float(value))
            return round(w.value(), f.decimals) == round(float(value), f.decimals) and abs(w.value() - value) < 1e-9
        if isinstance(w, QComboBox):
            if w.isEditable():
                label = next((c.label for c in f.choices if c.value == value), None)
                w.setEditText("" if value is None else (label or str(value)))
                return True
            for i in range(w.count()):
                data = w.itemData(i)
                if data == value and type(data) is type(value):
                    w.setCurrentIndex(i)
                    return True
            if value is None and f.default is None and f.choices_from == PROFILES:
                # an input that names no profile (older jobs, the CLI's): "the default profile" is
                # offered only once such an input is shown, so a fresh form names the profile
                w.insertItem(0, f.placeholder or UNSET, None)
                w.setCurrentIndex(0)
                _fit_choices(w)
                return True
            return False
        assert isinstance(w, QLineEdit)
        w.setText("" if value is None else str(value))
        return True

    def replace_choices(self, names: list[str], placeholder: str | None = None) -> None:
        """Offers exactly ``names`` in a free-text drop-down (another profile's models), keeping what is typed."""
        w = self.widget
        if not isinstance(w, QComboBox) or not w.isEditable():
            return
        text = w.currentText()
        w.blockSignals(True)
        w.clear()
        for name in names:
            w.addItem(name, name)
        w.setEditText(text)
        line = w.lineEdit()
        if placeholder is not None and line is not None:
            line.setPlaceholderText(placeholder)
        w.blockSignals(False)

    def offered(self) -> list[str]:
        """The names a drop-down offers now."""
        w = self.widget
        return [w.itemText(i) for i in range(w.count())] if isinstance(w, QComboBox) else []

    def set_choices(self, names: list[str]) -> None:
        """Offers ``names`` in a free-text drop-down (a model list), keeping what is typed."""
        w = self.widget
        if not isinstance(w, QComboBox) or not w.isEditable():
            return
        text = w.currentText()
        known = {w.itemText(i) for i in range(w.count())}
        w.blockSignals(True)
        for name in names:
            if name not in known:
                w.addItem(name, name)
        w.setEditText(text)
        w.blockSignals(False)


# --------------------------------------------------------------------------- model lists


class ModelLister(QObject):
    """Asks a provider for its server's models on a pool thread; remembers the answer.

    The provider's ``test_connection()`` lists the models (Preferences uses it too).
    The answer is kept per (kind, profile, base URL) for this session, so the next
    New dialog offers it at once. :attr:`provider` may change (another profile picked):
    an answer that comes back for the previous one is remembered for it, not shown.

    Signals:
        listed(list): the model names (of the current provider).
        failed(str): why they could not be listed (a redacted message).
    """

    listed = Signal(list)
    failed = Signal(str)
    _answered = Signal(object, list)
    _refused = Signal(object, str)

    _known: ClassVar[dict[tuple[str, str, str], list[str]]] = {}

    def __init__(self, provider: Any, parent: QObject | None = None, pool: QThreadPool | None = None) -> None:
        super().__init__(parent)
        self.provider = provider
        self._pool = pool or QThreadPool.globalInstance()
        self._asking: set[tuple[str, str, str]] = set()
        self._answered.connect(self._remember)
        self._refused.connect(self._not_listed)

    @property
    def busy(self) -> bool:
        """True while the current provider's server is being asked."""
        return self.key_of(self.provider) in self._asking

    @staticmethod
    def can_list(provider: Any) -> bool:
        return callable(getattr(provider, "test_connection", None))

    @staticmethod
    def key_of(provider: Any) -> tuple[str, str, str]:
        profile = getattr(provider, "profile", None)
        name = str(getattr(profile, "name", ""))
        resolve = getattr(profile, "resolved_base_url", None)
        url = str(resolve() if callable(resolve) else "")
        return (str(getattr(provider, "kind", "")), name, url)

    def known(self) -> list[str]:
        """The names listed earlier in this session (empty: not asked yet)."""
        return list(self._known.get(self.key_of(self.provider), []))

    @Slot(object, list)
    def _remember(self, key: tuple[str, str, str], names: list[str]) -> None:
        self._known[key] = list(names)
        self._asking.discard(key)
        if key == self.key_of(self.provider):
            self.listed.emit(list(names))

    @Slot(object, str)
    def _not_listed(self, key: tuple[str, str, str], text: str) -> None:
        self._asking.discard(key)
        if key == self.key_of(self.provider):
            self.failed.emit(text)

    def start(self) -> None:
        key = self.key_of(self.provider)
        if key in self._asking:
            return
        self._asking.add(key)
        self._pool.start(_ListModels(self.provider, key, self).run)


class _ListModels:
    """Lists a provider's models; reports through the GUI-owned :class:`ModelLister`.

    The pool runs its :meth:`run` (a callable: see :class:`~desktop_queue.runtime.driver.JobRunnable`).
    """

    def __init__(self, provider: Any, key: tuple[str, str, str], lister: ModelLister) -> None:
        self.provider = provider
        self.key = key
        self.lister = lister

    def run(self) -> None:
        try:
            names = [str(n) for n in self.provider.test_connection()]
        except Exception as exc:  # the provider's message is already redacted
            self._report(self.lister._refused, str(exc) or type(exc).__name__)
            return
        self._report(self.lister._answered, names)

    def _report(self, signal: Any, value: Any) -> None:
        try:
            signal.emit(self.key, value)
        except RuntimeError:  # the dialog was closed meanwhile: nobody is waiting for the list
            pass


# --------------------------------------------------------------------------- the form


class InputForm(QWidget):
    """A form for one kind's input, generated from its :class:`InputSpec`.

    A profile field (``choices_from`` :data:`~desktop_queue.core.inputspec.PROFILES`)
    offers the spec's profiles (:meth:`InputSpec.with_profiles`); picking one changes
    the model field's choices and placeholder to that profile's, and its "list models"
    button asks that profile's server.

    Args:
        spec: the description.
        provider: the provider (for a model field's "list models" button), or None;
            a router over profiles lends each profile's own provider.
        parent: the Qt parent.

    Signals:
        changed(): a value changed (by the user).
        submit_requested(): Ctrl+Enter in a text box.
    """

    changed = Signal()
    submit_requested = Signal()

    def __init__(
        self, spec: InputSpec, provider: Any = None, parent: QWidget | None = None, reserved: Iterable[str] = ()
    ) -> None:
        super().__init__(parent)
        self.spec = spec
        self.setObjectName("inputForm")
        self.editors: dict[str, FieldEditor] = {}
        self._loading = False
        self._last: dict[str, Any] = {}
        self.lister: ModelLister | None = None
        self.routes, _default = profile_routes(provider)
        self._shown_profile: Any = None
        self._profile_name = spec.profile_field().name if spec.profile_field() is not None else None  # type: ignore[union-attr]
        self._model_name = spec.model_field().name if spec.model_field() is not None else None  # type: ignore[union-attr]
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        if spec.notes:
            notes = QLabel(spec.notes)
            notes.setWordWrap(True)
            notes.setObjectName("formNotes")
            notes.setEnabled(False)  # the palette's muted text
            layout.addWidget(notes)
        self.main = QFormLayout()
        self.main.setFieldGrowthPolicy(QFormLayout.FieldGrowthPolicy.ExpandingFieldsGrow)
        layout.addLayout(self.main, 1)
        self.advanced_toggle = QToolButton()
        self.advanced_toggle.setObjectName("advancedToggle")
        self.advanced_toggle.setText("&Advanced")
        self.advanced_toggle.setCheckable(True)
        self.advanced_toggle.setToolButtonStyle(Qt.ToolButtonStyle.ToolButtonTextBesideIcon)
        self.advanced_toggle.setAutoRaise(True)
        self.advanced_box = QWidget()
        self.advanced_box.setObjectName("advancedSection")
        self.advanced = QFormLayout(self.advanced_box)
        self.advanced.setContentsMargins(12, 0, 0, 0)
        self.advanced.setFieldGrowthPolicy(QFormLayout.FieldGrowthPolicy.ExpandingFieldsGrow)
        self.labels: dict[str, QLabel] = {}
        has_advanced = any(f.advanced for f in spec.fields)
        # the fields' Alt letters, clear of the dialog's own (``reserved``) and of each other
        texts = free_mnemonics(
            [f.label or f"{f.title}:" for f in spec.fields], {*reserved, *({"a"} if has_advanced else ())}
        )
        for f, text in zip(spec.fields, texts, strict=True):
            editor = FieldEditor(f, self._edited)
            self.editors[f.name] = editor
            if isinstance(editor.widget, PromptEditor):
                editor.widget.submit_requested.connect(self.submit_requested)
            if f.choices_from == MODELS and provider is not None and ModelLister.can_list(provider):
                self._add_model_button(
                    editor, self._provider_for(spec.fresh().get(self._profile_name or "")) or provider
                )
            label = QLabel(text)
            label.setBuddy(editor.widget)
            if f.help:
                label.setToolTip(f.help)
            self.labels[f.name] = label
            (self.advanced if f.advanced else self.main).addRow(label, editor.row)
        self.advanced_toggle.setVisible(has_advanced)
        self.advanced_toggle.toggled.connect(self.show_advanced)
        layout.addWidget(self.advanced_toggle)
        layout.addWidget(self.advanced_box)
        self.show_advanced(False)
        for name, value in spec.fresh().items():
            self.editors[name].set_value(value)
        self._last = self._safe_values()
        self._update_visibility()
        self._follow_profile(force=True)

    # -- profiles

    def _provider_for(self, profile: Any) -> Any:
        """The provider of the picked profile (None: the default), for listing its models."""
        if not self.routes:
            return None
        name = profile if profile is not None else self.spec.default_profile
        return self.routes.get(name) if name in self.routes else next(iter(self.routes.values()))

    def current_profile(self) -> Any:
        """The profile picked (None: the default profile, for an input that names none)."""
        return self._safe_values().get(self._profile_name) if self._profile_name else None

    def _follow_profile(self, force: bool = False) -> None:
        """The model field offers the picked profile's models; its ↻ asks that profile's server."""
        if self._profile_name is None or self._model_name is None or not self.spec.profiles:
            return
        profile = self.current_profile()
        if profile == self._shown_profile and not force:
            return
        model = self.editors[self._model_name]
        before = model.offered()
        option = self.spec.profile_option(profile)
        names = self.spec.models_for(profile)
        if self.lister is not None:
            provider = self._provider_for(profile)
            if provider is not None:
                self.lister.provider = provider
            names = list(dict.fromkeys([*names, *self.lister.known()]))
            self._show_lister_state()
        placeholder = None
        if option is not None and option.default_model:
            placeholder = f"{option.default_model} ({option.name}'s default)"
        picked = model.value()
        model.replace_choices(names, placeholder)
        if not force and isinstance(picked, str) and picked in before and picked not in names:
            # a model picked from the other profile's list that this one does not offer
            self._loading = True
            try:
                model.set_value(None)
            finally:
                self._loading = False
        self._shown_profile = profile

    def _show_lister_state(self) -> None:
        button = getattr(self, "model_button", None)
        if button is None or self.lister is None:
            return
        button.setEnabled(not self.lister.busy)
        name = getattr(getattr(self.lister.provider, "profile", None), "name", None)
        button.setToolTip(
            f"Ask the server of profile {name} for its models" if name else "Ask the server for its models"
        )

    def _add_model_button(self, editor: FieldEditor, provider: Any) -> None:
        self.lister = ModelLister(provider, self)
        editor.set_choices(self.lister.known())
        button = QToolButton()
        button.setObjectName("listModels")
        button.setText("↻")
        button.setToolTip("Ask the profile's server for its models")
        button.setAccessibleName("List the server's models")
        row = QWidget()
        box = QHBoxLayout(row)
        box.setContentsMargins(0, 0, 0, 0)
        box.addWidget(editor.widget, 1)
        box.addWidget(button)
        editor.row = row
        self.model_button = button
        self.model_status = editor.widget

        def listed(names: list[str]) -> None:
            editor.set_choices(names)
            button.setEnabled(True)
            button.setToolTip(f"{len(names)} models listed by the server; click to ask again")

        def failed(text: str) -> None:
            button.setEnabled(True)
            button.setToolTip(f"Could not list the models: {text}")

        def ask() -> None:
            button.setEnabled(False)
            assert self.lister is not None
            self.lister.start()

        self.lister.listed.connect(listed)
        self.lister.failed.connect(failed)
        button.clicked.connect(ask)

    # -- sections and visibility

    def show_advanced(self, shown: bool) -> None:
        """Opens or closes the Advanced section."""
        self.advanced_toggle.blockSignals(True)
        self.advanced_toggle.setChecked(shown)
        self.advanced_toggle.blockSignals(False)
        self.advanced_toggle.setArrowType(Qt.ArrowType.DownArrow if shown else Qt.ArrowType.RightArrow)
        self.advanced_box.setVisible(shown)

    def _update_visibility(self) -> None:
        values = self._safe_values()
        for f in self.spec.fields:
            if f.visible_when is None:
                continue
            layout = self.advanced if f.advanced else self.main
            layout.setRowVisible(self.editors[f.name].row, self.spec.visible(f, values))

    # -- values

    def _safe_values(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for name, editor in self.editors.items():
            try:
                out[name] = editor.value()
            except FieldProblem:
                out[name] = self._last.get(name)
        return out

    def _edited(self) -> None:
        if self._loading:
            return
        now = self._safe_values()
        self._apply_implies(now)
        self._follow_profile()
        self._last = self._safe_values()
        self._update_visibility()
        self.changed.emit()

    def _apply_implies(self, now: Mapping[str, Any]) -> None:
        for f in self.spec.fields:
            if not f.implies or now.get(f.name) == self._last.get(f.name) or now.get(f.name) in (None, f.default):
                continue
            for other, value in f.implies:
                target = self.spec.field(other)
                if now.get(other) == target.default:
                    self._loading = True
                    try:
                        self.editors[other].set_value(value)
                    finally:
                        self._loading = False

    def values(self) -> dict[str, Any]:
        """Every field's value.

        Raises:
            FieldProblem: a field's text is not a value.
        """
        return {name: editor.value() for name, editor in self.editors.items()}

    def problems(self) -> list[str]:
        """What the form itself can tell is wrong (broken JSON in a field), for people."""
        out = []
        for editor in self.editors.values():
            try:
                editor.value()
            except FieldProblem as exc:
                out.append(str(exc))
        return out

    def payload(self) -> dict[str, Any]:
        """The job input (of the first job, when a count makes several)."""
        return self.spec.build(self.values())

    def payloads(self) -> list[dict[str, Any]]:
        """Every job input the form makes (several with a count field)."""
        return self.spec.build_all(self.values())

    def load(self, payload: Any) -> str | None:
        """Shows ``payload`` in the form; the reason if it cannot be shown exactly (nothing changes)."""
        try:
            values = self.spec.parse(payload)
        except ValueError as exc:
            return str(exc)
        before = self._safe_values()
        self._loading = True
        try:
            for name, value in values.items():
                if name == self.spec.count_field:
                    continue  # not part of the input: the count stays as chosen
                if not self.editors[name].set_value(value):
                    for back, old in before.items():
                        self.editors[back].set_value(old)
                    return f'"{name}" is outside what the form can show'
        finally:
            self._loading = False
        self._follow_profile(force=True)
        self._last = self._safe_values()
        self._update_visibility()
        if any(self.spec.field(n).advanced and v != self.spec.field(n).default for n, v in values.items()):
            self.show_advanced(True)
        return None

    def mark(self, message: str | None) -> str | None:
        """Marks the field a problem message names (``"duration_s" must be …``); returns its name.

        None clears the mark. The label turns red and says the problem in its tooltip.
        """
        named = None
        if message:
            low = message.casefold()
            for f in self.spec.fields:
                if f'"{f.name}"'.casefold() in low or low.startswith(f"{f.title.casefold()}:"):
                    named = f.name
                    break
        for name, label in self.labels.items():
            f = self.spec.field(name)
            if name == named:
                label.setStyleSheet(f"color: {error_colour(label)};")
                label.setToolTip(str(message))
                self.editors[name].widget.setAccessibleDescription(f"Error: {message}")
            elif label.styleSheet():
                label.setStyleSheet("")
                label.setToolTip(f.help)
                self.editors[name].widget.setAccessibleDescription("")
        if named is not None and self.spec.field(named).advanced:
            self.show_advanced(True)
        return named

    def editor(self, name: str) -> QWidget:
        """The widget of field ``name``."""
        return self.editors[name].widget

    def set_value(self, name: str, value: Any) -> None:
        """Sets field ``name`` as if the user had (tests, and carrying a prompt across kinds)."""
        self.editors[name].set_value(value)

    def first_editor(self) -> QWidget | None:
        """Where typing starts: the prompt field, else the first field."""
        name = self.spec.prompt_field
        if name and name in self.editors:
            return self.editors[name].widget
        first = next(iter(self.editors.values()), None)
        return first.widget if first is not None else None

    def last_editor(self) -> QWidget | None:
        """The last widget in tab order (before the dialog's own fields)."""
        return self.advanced_toggle if self.advanced_toggle.isVisibleTo(self) else None


__all__ = [
    "LONG_LINE",
    "UNSET",
    "error_colour",
    "FieldEditor",
    "FieldProblem",
    "InputForm",
    "ModelLister",
    "PromptEditor",
]
