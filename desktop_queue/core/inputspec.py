"""What a provider's input looks like: fields, types, defaults, limits and help.

A provider describes its input with :meth:`input_spec` returning an :class:`InputSpec`;
the window generates a form from it (``desktop_queue.ui.forms``) and the batch readers
(:mod:`desktop_queue.core.batchinput`) put a line of text or a CSV cell into the right
field. The provider's own ``validate`` stays the authority on what is acceptable: a
spec only says how to ask for it, and its limits are the ones ``validate`` enforces.

A spec works on *values* (one per field, by field name); :meth:`InputSpec.build` turns
values into the job input (the JSON ``validate`` reads), :meth:`InputSpec.parse` turns
an input back into values when a form can show it exactly. Most inputs are flat (one
key per field); a spec whose input nests (``openai.chat`` writes a system prompt as
``messages``) gives its own ``encode`` / ``decode``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any


class FieldType(StrEnum):
    """How a field is asked for (and the JSON type of its value)."""

    STRING = "string"  # one line of text
    TEXT = "text"  # multi-line text (prompts): no length cap below the input limit
    INTEGER = "integer"
    NUMBER = "number"
    BOOLEAN = "boolean"
    CHOICE = "choice"  # one of ``choices`` (or free text when ``free_text``)
    JSON = "json"  # any JSON value, edited as JSON (a schema)


#: ``choices_from`` value: the choices are the models the profile lists (when known)
MODELS = "models"
#: ``choices_from`` value: the choices are the configured provider profiles
#: (:meth:`InputSpec.with_profiles`); the input names the one picked as ``profile``
PROFILES = "profiles"


@dataclass(frozen=True)
class ProfileOption:
    """One configured profile as a form offers it.

    Attributes:
        name: the profile name (what the input's ``profile`` says).
        default_model: the model its jobs of this kind use when the input names none.
        models: the models people pick from (the profile's model list; may be empty).
    """

    name: str
    default_model: str | None = None
    models: tuple[str, ...] = ()

    def offered(self) -> list[str]:
        """The models a model field offers: the default first, then the list (no repeats)."""
        first = [self.default_model] if self.default_model else []
        return list(dict.fromkeys([*first, *self.models]))


@dataclass(frozen=True)
class Choice:
    """One option of a choice field.

    Attributes:
        value: what goes into the input (a string, or a number such as an HTTP status).
        label: what people read.
    """

    value: Any
    label: str


@dataclass(frozen=True)
class InputField:
    """One field of a provider's input.

    Attributes:
        name: the key in the input (and the CSV column of a batch).
        type: how it is asked for.
        label: the form's label, with an ``&`` mnemonic if wanted.
        default: the value of a fresh form; ``None``: unset (left out of the input).
        required: the input always carries it (even empty, so ``validate`` says what is missing).
        minimum: the smallest number ``validate`` accepts (numbers).
        maximum: the largest number ``validate`` accepts (numbers).
        max_length: the most characters ``validate`` accepts (text).
        choices: the options of a choice field, or suggestions of a free-text one.
        free_text: a choice field that accepts any string besides its choices.
        choices_from: where more choices come from at run time (:data:`MODELS`).
        help: one or two sentences for people (tooltip).
        placeholder: shown in an empty text field.
        advanced: shown under "Advanced" (testing knobs, rarely changed options).
        unit: a unit shown after numbers (``s``), or a noun (``attempt``) made plural
            by ``units``.
        units: the plural of ``unit`` (default: the same as ``unit``).
        decimals: digits after the point of a number field.
        step: the step of a number field's arrows.
        implies: (field, value) pairs set when this field gets a value while those
            fields are still at their default ("fail with: fatal" implies failing once).
        visible_when: (field, values): shown (and written) only while that field has
            one of these values.
    """

    name: str
    type: FieldType
    label: str = ""
    default: Any = None
    required: bool = False
    minimum: float | None = None
    maximum: float | None = None
    max_length: int | None = None
    choices: tuple[Choice, ...] = ()
    free_text: bool = False
    choices_from: str | None = None
    help: str = ""
    placeholder: str = ""
    advanced: bool = False
    unit: str = ""
    units: str = ""
    decimals: int = 2
    step: float = 1.0
    implies: tuple[tuple[str, Any], ...] = ()
    visible_when: tuple[str, tuple[Any, ...]] | None = None

    @property
    def title(self) -> str:
        """The label without its mnemonic and colon."""
        return (self.label or self.name).replace("&", "").rstrip(":")

    def unit_for(self, value: float) -> str:
        """The unit after ``value`` ("1 attempt", "2 attempts", "2.5 s")."""
        if not self.unit:
            return ""
        plural = self.units or self.unit
        return " " + (self.unit if value == 1 else plural)

    def accepts(self, value: Any) -> str | None:
        """Why ``value`` does not fit this field's type and limits, or None if it does."""
        if value is None:
            return None
        kind = self.type
        if kind in (FieldType.STRING, FieldType.TEXT):
            if not isinstance(value, str):
                return "must be text"
            if self.max_length is not None and len(value) > self.max_length:
                return f"is longer than {self.max_length:,} characters"
            return None
        if kind is FieldType.BOOLEAN:
            return None if isinstance(value, bool) else "must be true or false"
        if kind in (FieldType.INTEGER, FieldType.NUMBER):
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                return "must be a number"
            if kind is FieldType.INTEGER and not isinstance(value, int):
                return "must be a whole number"
            if isinstance(value, float) and not math.isfinite(value):
                return "must be a finite number"
            if self.minimum is not None and value < self.minimum:
                return f"must be at least {self.minimum:g}"
            if self.maximum is not None and value > self.maximum:
                return f"must be at most {self.maximum:g}"
            return None
        if kind is FieldType.CHOICE:
            if any(c.value == value and type(c.value) is type(value) for c in self.choices):
                return None
            if self.free_text and isinstance(value, str):
                return None
            return "must be one of " + ", ".join(str(c.value) for c in self.choices)
        return None  # JSON: anything JSON

    def convert(self, text: str) -> Any:
        """The value of a CSV cell for this field (an empty cell: the default).

        Raises:
            ValueError: the text is not a value of this field (the reason for people).
        """
        text = text.strip() if self.type not in (FieldType.TEXT, FieldType.STRING) else text
        if text == "":
            return self.default
        kind = self.type
        if kind in (FieldType.STRING, FieldType.TEXT):
            return text
        if kind is FieldType.INTEGER:
            try:
                return int(text)
            except ValueError:
                raise ValueError(f"{self.name}: {text!r} is not a whole number") from None
        if kind is FieldType.NUMBER:
            try:
                number = float(text)
            except ValueError:
                raise ValueError(f"{self.name}: {text!r} is not a number") from None
            return number
        if kind is FieldType.BOOLEAN:
            low = text.lower()
            if low in ("true", "yes", "1", "on"):
                return True
            if low in ("false", "no", "0", "off"):
                return False
            raise ValueError(f"{self.name}: {text!r} is not true or false")
        if kind is FieldType.CHOICE:
            for choice in self.choices:
                if text in (str(choice.value), choice.label):
                    return choice.value
            if self.free_text:
                return text
            raise ValueError(f"{self.name}: {text!r} is not one of " + ", ".join(str(c.value) for c in self.choices))
        try:
            return json.loads(text)
        except json.JSONDecodeError as exc:
            raise ValueError(f"{self.name}: not valid JSON ({exc.msg})") from None


Values = dict[str, Any]
Encoder = Callable[[Values], dict[str, Any]]
Decoder = Callable[[Mapping[str, Any]], Values]


@dataclass(frozen=True)
class InputSpec:
    """The description of one kind's input.

    Attributes:
        kind: the job kind.
        fields: the fields, in form order.
        prompt_field: the field a line of a plain-text batch goes into (None: none).
        count_field: a field that is not part of the input but makes that many jobs,
            each input numbered by ``copy`` (``openai.image``'s "count": one image a job).
        encode: values (only the fields to write) -> input, for inputs that nest;
            default: one key per field.
        decode: input -> values, the inverse of ``encode``; raises ``ValueError`` when
            the input has a shape the form cannot show.
        notes: a sentence shown above the form (what the kind does), or "".
        initial: values of a fresh form that differ from the defaults (the default
            profile, picked explicitly so that the input names it).
        profiles: the profiles a :data:`PROFILES` field offers (:meth:`with_profiles`).
        default_profile: the profile of an input that names none.
    """

    kind: str
    fields: tuple[InputField, ...]
    prompt_field: str | None = "prompt"
    count_field: str | None = None
    encode: Encoder | None = None
    decode: Decoder | None = None
    notes: str = ""
    initial: Mapping[str, Any] = field(default_factory=dict)
    profiles: tuple[ProfileOption, ...] = ()
    default_profile: str | None = None
    _by_name: dict[str, InputField] = field(default_factory=dict, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        self._by_name.update({f.name: f for f in self.fields})

    def field(self, name: str) -> InputField:
        """The field called ``name`` (KeyError if there is none)."""
        return self._by_name[name]

    def has(self, name: str) -> bool:
        return name in self._by_name

    def defaults(self) -> Values:
        """The values of fields an input leaves out."""
        return {f.name: f.default for f in self.fields}

    def fresh(self) -> Values:
        """The values of a fresh form: the defaults, with :attr:`initial` over them."""
        return {**self.defaults(), **{k: v for k, v in self.initial.items() if k in self._by_name}}

    # -- profiles

    def profile_field(self) -> InputField | None:
        """The field that picks the profile (``choices_from`` :data:`PROFILES`), or None."""
        return next((f for f in self.fields if f.choices_from == PROFILES), None)

    def model_field(self) -> InputField | None:
        """The field that picks the model (``choices_from`` :data:`MODELS`), or None."""
        return next((f for f in self.fields if f.choices_from == MODELS), None)

    def with_profiles(self, options: Sequence[ProfileOption], default: str | None) -> InputSpec:
        """This spec offering ``options`` in its profile field, ``default`` picked in a fresh form.

        The profile field stays optional (an input that names no profile runs on the
        default one, and a form can show it); a fresh form names the default explicitly.
        The model field offers the picked profile's models (:meth:`models_for`).
        """
        pf = self.profile_field()
        if pf is None or not options:
            return self
        names = [o.name for o in options]
        default = default if default in names else names[0]
        labelled = tuple(Choice(o.name, f"{o.name} (default)" if o.name == default else o.name) for o in options)
        fields: list[InputField] = []
        by_name = {o.name: o for o in options}
        for f in self.fields:
            if f is pf:
                f = replace(f, choices=labelled, placeholder=f"the default profile ({default})")
            elif f.choices_from == MODELS:
                model = by_name[default].default_model
                f = replace(
                    f,
                    choices=tuple(Choice(m, m) for m in by_name[default].offered()),
                    placeholder=f"{model} ({default}'s default)" if model else f.placeholder,
                )
            fields.append(f)
        return replace(
            self,
            fields=tuple(fields),
            initial={**self.initial, pf.name: default},
            profiles=tuple(options),
            default_profile=default,
        )

    def profile_option(self, value: Any) -> ProfileOption | None:
        """The profile an input with profile ``value`` runs on (None: the default), or None if unknown."""
        name = self.default_profile if value is None else value
        return next((o for o in self.profiles if o.name == name), None)

    def models_for(self, profile: Any) -> list[str]:
        """The models the model field offers while ``profile`` is picked (None: the default)."""
        option = self.profile_option(profile)
        return option.offered() if option is not None else []

    def visible(self, f: InputField, values: Mapping[str, Any]) -> bool:
        """True if ``f`` is shown (and written) with these values."""
        if f.visible_when is None:
            return True
        other, allowed = f.visible_when
        return values.get(other, self._by_name[other].default if other in self._by_name else None) in allowed

    def _written(self, values: Mapping[str, Any]) -> Values:
        out: Values = {}
        for f in self.fields:
            if f.name == self.count_field or not self.visible(f, values):
                continue
            value = values.get(f.name, f.default)
            if f.required:
                out[f.name] = "" if value is None and f.type in (FieldType.STRING, FieldType.TEXT) else value
            elif value is not None and not same_value(value, f.default):
                out[f.name] = value
        return out

    def build(self, values: Mapping[str, Any]) -> dict[str, Any]:
        """The job input for these values (defaults and unset fields left out)."""
        written = self._written(values)
        return self.encode(written) if self.encode is not None else written

    def count(self, values: Mapping[str, Any]) -> int:
        """How many jobs these values make (1 unless the spec has a count field)."""
        if self.count_field is None:
            return 1
        value = values.get(self.count_field, self.field(self.count_field).default)
        return value if isinstance(value, int) and not isinstance(value, bool) and value > 1 else 1

    def build_all(self, values: Mapping[str, Any]) -> list[dict[str, Any]]:
        """Every input these values make: one, or ``count`` numbered copies."""
        payload = self.build(values)
        n = self.count(values)
        if n == 1:
            return [payload]
        return [{**payload, "copy": i} for i in range(1, n + 1)]

    def parse(self, payload: Any) -> Values:
        """The values that build ``payload`` exactly (defaults for what it leaves out).

        Raises:
            ValueError: the form cannot show this input exactly (the reason for people).
        """
        if not isinstance(payload, Mapping):
            raise ValueError("the input is not a JSON object")
        body = {k: v for k, v in payload.items() if not (k == "copy" and self.count_field)}
        if self.decode is not None:
            found = self.decode(body)
        else:
            unknown = sorted(set(body) - set(self._by_name))
            if unknown:
                raise ValueError("the form has no field for " + ", ".join(f'"{k}"' for k in unknown))
            found = dict(body)
        values = self.defaults()
        for name, value in found.items():
            f = self._by_name.get(name)
            if f is None:
                raise ValueError(f'the form has no field for "{name}"')
            problem = f.accepts(value)
            if problem:
                raise ValueError(f'"{name}" {problem}')
            values[name] = value
        if _normal(self.build(values)) != _normal(self._strip_defaults(body)):
            raise ValueError("the form cannot show this input exactly")
        return values

    def _strip_defaults(self, body: Mapping[str, Any]) -> dict[str, Any]:
        out = dict(body)
        for name, value in body.items():
            f = self._by_name.get(name)
            if f is not None and not f.required and same_value(value, f.default):
                del out[name]
        return out

    def with_prompt(self, values: Mapping[str, Any], text: str) -> Values:
        """``values`` with ``text`` in the prompt field.

        Raises:
            ValueError: this kind has no prompt field.
        """
        if self.prompt_field is None:
            raise ValueError(f"{self.kind} has no prompt field: give a JSON Lines or CSV file")
        return {**values, self.prompt_field: text}


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def same_value(a: Any, b: Any) -> bool:
    """Equal as JSON values: 1 and 1.0 are the same number, True is not 1."""
    if _is_number(a) and _is_number(b):
        return bool(a == b)
    return bool(a == b) and type(a) is type(b)


def _normal(value: Any) -> str:
    return json.dumps(value, sort_keys=True, ensure_ascii=False)


def spec_of(provider: Any) -> InputSpec | None:
    """The input description of ``provider``, or None if it gives none (the JSON editor only).

    A provider added through the entry-point group gets a form by defining
    ``input_spec() -> InputSpec``; one that fails to give it is treated as giving none.
    """
    method = getattr(provider, "input_spec", None)
    if not callable(method):
        return None
    try:
        spec = method()
    except Exception:  # a plug-in's broken description must not break the New dialog
        return None
    return spec if isinstance(spec, InputSpec) else None


# --------------------------------------------------------------------------- titles from prompts

#: the longest title made from a prompt (the list's Title column shows about this much)
TITLE_CHARS = 60
#: where a prompt is looked for in an input no spec can read (plug-ins, odd shapes)
_PROMPT_KEYS = ("prompt", "input", "text")


def title_of(text: Any) -> str | None:
    """The first line of a prompt, shortened to fit a list (None: no usable text)."""
    if not isinstance(text, str) or not text.strip():
        return None
    line = text.strip().splitlines()[0].strip()
    return line if len(line) <= TITLE_CHARS else line[: TITLE_CHARS - 1].rstrip() + "…"


def _last_user_message(messages: Any) -> str | None:
    if not isinstance(messages, list):
        return None
    for message in reversed(messages):
        if isinstance(message, Mapping) and message.get("role") == "user":
            content = message.get("content")
            if isinstance(content, str):
                return content
            if isinstance(content, list):  # content parts: the first text part
                for part in content:
                    if isinstance(part, Mapping) and isinstance(part.get("text"), str) and part["text"].strip():
                        return str(part["text"])
    return None


def prompt_of(spec: InputSpec | None, payload: Any) -> Any:
    """The prompt text of an input: the spec's prompt field (read through the spec, so a
    chat input written as ``messages`` gives its user message), else the last user
    message, else a ``prompt`` / ``input`` / ``text`` string; None when there is none."""
    if not isinstance(payload, Mapping):
        return None
    name = spec.prompt_field if spec is not None else None
    if spec is not None and name is not None:
        try:
            found = spec.parse(payload).get(name)
        except ValueError:
            found = None
        if isinstance(found, str) and found.strip():
            return found
        direct = payload.get(name)
        if isinstance(direct, str) and direct.strip():
            return direct
    user = _last_user_message(payload.get("messages"))
    if user is not None and user.strip():
        return user
    for key in _PROMPT_KEYS:
        value = payload.get(key)
        if isinstance(value, str) and value.strip():
            return value
    return None


def title_for(spec: InputSpec | None, payload: Any) -> str | None:
    """The title of a job submitted without one: the first line of its prompt, shortened.

    One rule for the New dialog, ``desktop-queue submit`` and batches, so that a chat
    job is listed by what it asks ("Summarise the meeting notes"), never as
    "openai.chat job" when it has a prompt. None: the input has no prompt (the queue
    then names it by its kind).
    """
    return title_of(prompt_of(spec, payload))


# --------------------------------------------------------------------------- profiles of a kind


def profile_routes(provider: Any) -> tuple[dict[str, Any], str | None]:
    """Profile name -> the provider of this kind on it, and the default profile.

    A kind over several profiles (``by_profile`` and ``default``: the router the
    profiles file makes) gives each; a provider of one profile (``profile.name``) gives
    itself; a kind without profiles gives nothing.
    """
    routes = getattr(provider, "by_profile", None)
    if isinstance(routes, Mapping) and routes:
        default = getattr(provider, "default", None)
        return dict(routes), default if isinstance(default, str) else None
    name = getattr(getattr(provider, "profile", None), "name", None)
    return ({name: provider}, name) if isinstance(name, str) else ({}, None)


def profile_options(provider: Any, profiles: Any = None) -> tuple[list[ProfileOption], str | None]:
    """The profiles a form of ``provider``'s kind offers, in the user's order, and the default.

    Args:
        provider: the kind's provider (a router over profiles, or one profile's).
        profiles: the configured profiles (``names()``, ``get(name).models``,
            ``default_name()``: a :class:`~desktop_queue.providers.profiles.ProfileSet`),
            for their order, model lists and default; None: the provider's own.
    """
    routes, default = profile_routes(provider)
    names = list(routes)
    if profiles is not None:
        order = [n for n in profiles.names() if n in routes]
        names = order + [n for n in names if n not in order]
        configured = profiles.default_name()
        default = configured if configured in routes else default
    out = []
    for name in names:
        model = getattr(routes[name], "default_model", None)
        config = profiles.get(name) if profiles is not None else None
        models = tuple(m for m in (getattr(config, "models", None) or ()) if isinstance(m, str))
        out.append(ProfileOption(name, model if isinstance(model, str) else None, models))
    return out, default


def spec_for(provider: Any, profiles: Any = None) -> InputSpec | None:
    """:func:`spec_of` ``provider``, its profile field offering every configured profile.

    The New dialog, the Replay dialog and ``submit --batch`` use it, so a form (or a CSV
    column) can name any profile the kind runs on, not only the default one.
    """
    spec = spec_of(provider)
    if spec is None or spec.profile_field() is None:
        return spec
    options, default = profile_options(provider, profiles)
    return spec.with_profiles(options, default)


def choices(*values: Any, labels: Sequence[str] | None = None) -> tuple[Choice, ...]:
    """Choices whose labels are their values (or ``labels``)."""
    names = list(labels) if labels is not None else [str(v) for v in values]
    return tuple(Choice(v, n) for v, n in zip(values, names, strict=True))


__all__ = [
    "MODELS",
    "PROFILES",
    "TITLE_CHARS",
    "ProfileOption",
    "Choice",
    "FieldType",
    "InputField",
    "InputSpec",
    "choices",
    "prompt_of",
    "profile_options",
    "profile_routes",
    "spec_for",
    "spec_of",
    "title_for",
    "title_of",
]
