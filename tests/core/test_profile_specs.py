"""A kind's input description offering every configured profile (no Qt)."""

from __future__ import annotations

from desktop_queue.core.inputspec import ProfileOption, profile_options, spec_for
from desktop_queue.providers.profiles import ProfileSet
from desktop_queue.providers.setup import ProfileConfig, profile_providers

PROFILES = ProfileSet(
    (
        ProfileConfig(name="main", base_url="http://127.0.0.1:9/v1", model="main-model", models=("main-big",)),
        ProfileConfig(name="lab", base_url="http://127.0.0.1:8/v1", model="lab-model", models=("lab-model", "x")),
    ),
    default="lab",
)


def test_every_profile_is_offered_the_default_named_in_a_fresh_form() -> None:
    router = profile_providers(PROFILES, None)["openai.chat"]
    options, default = profile_options(router, PROFILES)
    assert default == "lab"
    assert options == [
        ProfileOption("main", "main-model", ("main-big",)),
        ProfileOption("lab", "lab-model", ("lab-model", "x")),
    ]
    spec = spec_for(router, PROFILES)
    assert spec is not None
    field = spec.field("profile")
    assert [(c.value, c.label) for c in field.choices] == [("main", "main"), ("lab", "lab (default)")]
    assert spec.fresh()["profile"] == "lab" and spec.defaults()["profile"] is None
    assert spec.build({**spec.fresh(), "prompt": "hi"}) == {"profile": "lab", "prompt": "hi"}
    # an input naming no profile is still shown exactly (the default profile), one naming main too
    assert spec.parse({"prompt": "hi"})["profile"] is None
    assert spec.parse({"prompt": "hi", "profile": "main"})["profile"] == "main"
    assert spec.field("profile").accepts("nope") is not None
    # the model field offers the picked profile's models, its default first, no repeats
    assert spec.models_for(None) == ["lab-model", "x"] and spec.models_for("main") == ["main-model", "main-big"]
    assert spec.field("model").placeholder == "lab-model (lab's default)"
    assert spec.models_for("gone") == []


def test_image_and_speech_kinds_offer_their_own_default_models() -> None:
    providers = profile_providers(PROFILES, None)
    image = spec_for(providers["openai.image"], PROFILES)
    speech = spec_for(providers["openai.speech"], PROFILES)
    assert image is not None and image.models_for("main")[0] == "gpt-image-1"
    assert speech is not None and speech.models_for("main")[0] == "gpt-4o-mini-tts"


def test_a_single_profile_and_a_kind_without_profiles() -> None:
    from desktop_queue.providers.demo import DemoProvider

    one = ProfileSet((ProfileConfig(name="solo", model="m"),), default="solo")
    spec = spec_for(profile_providers(one, None)["openai.chat"], one)
    assert spec is not None and [c.value for c in spec.field("profile").choices] == ["solo"]
    assert spec.fresh()["profile"] == "solo"
    demo = spec_for(DemoProvider(), PROFILES)
    assert demo is not None and demo.profiles == () and demo.initial == {}
