"""cogworker/settings_fields.py and cogworker/secret.py: the settings' fields declared once, held
without pydantic by a swarm's workers (PlainSettings), and secrets that never show."""

from __future__ import annotations

import json

import pytest
from pydantic import SecretStr

from cogworker.secret import MASK, Secret
from cogworker.settings import Settings, load_settings
from cogworker.settings_fields import FIELD_NAMES, SECRET_FIELDS, PlainSettings, QueueSpec, values_of


def checked() -> Settings:
    return load_settings(
        redis_url="redis://:s3cret@127.0.0.1:6390/2",
        concurrency=3,
        job_timeout_s=12.5,
        maxmem_mb=300,
        preload=True,
        cpu_affinity="spread",
        queues="a:3,b:1",
        require="app.jobs, app.more",
        web_username="ops",
        web_password="pw",
        web_session_secret="signing-key",
        redis_sentinel_password="sentinel-pw",
    )


def test_every_setting_of_the_model_is_declared_in_the_fields() -> None:
    # A field added to Settings alone would be missing from every swarm worker's PlainSettings.
    assert set(Settings.model_fields) == set(FIELD_NAMES)
    assert {"web_password", "web_session_secret", "redis_sentinel_password"} == SECRET_FIELDS


def test_plain_settings_rebuilt_from_json_equal_the_checked_ones_field_by_field() -> None:
    settings = checked()
    plain = PlainSettings(json.loads(json.dumps(values_of(settings, reveal=True))))
    for name in FIELD_NAMES:
        assert getattr(plain, name) == getattr(settings, name), name
        assert type(getattr(plain, name)) is type(getattr(settings, name)), name
    assert plain.queue_spec == QueueSpec(("a", "b"), (3, 1))
    assert plain.require_modules == ("app.jobs", "app.more")
    assert plain == PlainSettings(values_of(settings, reveal=True))
    assert plain != PlainSettings({**values_of(settings, reveal=True), "concurrency": 4})


def test_plain_settings_are_read_only_and_show_no_secret() -> None:
    plain = PlainSettings(values_of(checked(), reveal=True))
    with pytest.raises(AttributeError, match="read-only"):
        plain.concurrency = 5
    shown = repr(plain)
    for secret in ("s3cret", "pw'", "signing-key", "sentinel-pw"):
        assert secret not in shown
    assert "web_password='**********'" in shown
    assert plain.web_password.get_secret_value() == "pw"


def test_plain_settings_refuse_values_that_lack_a_setting() -> None:
    values = values_of(checked(), reveal=True)
    del values["queues"]
    with pytest.raises(ValueError, match="lack queues"):
        PlainSettings(values)


def test_a_secret_shows_as_stars_and_dumps_as_stars_in_json() -> None:
    settings = checked()
    assert str(settings.web_password) == MASK
    assert repr(settings.web_password) == f"Secret('{MASK}')"
    assert "signing-key" not in repr(settings)
    assert settings.model_dump(mode="json")["web_session_secret"] == MASK
    assert settings.model_dump()["web_session_secret"] == Secret("signing-key")
    assert values_of(settings, reveal=False)["redis_sentinel_password"] == MASK
    assert str(Secret("")) == ""  # unset: nothing to hide, and it reads as unset
    assert hash(Secret("a")) == hash(Secret("a"))


def test_a_secret_setting_takes_text_or_a_secret_of_either_kind() -> None:
    for given in ("pw", Secret("pw"), SecretStr("pw")):
        assert load_settings(web_username="ops", web_password=given).web_password == Secret("pw")
