"""COGWORKER_LOG_LEVELS: `logger=level` pairs, checked with an error that names the bad part."""

from __future__ import annotations

import pytest

from cogworker.log_levels import parse_log_levels
from cogworker.settings import ConfigError, load_settings


def test_pairs_are_read_with_spaces_and_case_forgiven() -> None:
    assert parse_log_levels("") == {}
    assert parse_log_levels(" urllib3 = WARNING , myapp.jobs=debug,") == {
        "urllib3": "warning",
        "myapp.jobs": "debug",
    }


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("urllib3:warning", "'urllib3:warning' is not logger=level (for example urllib3=warning,"),
        ("=debug", "'=debug' is not logger=level"),
        ("my app=info", "'my app=info' is not logger=level"),
        ("urllib3=loud", "the level must be one of debug, info, warning, error, critical, not 'loud'"),
        ("urllib3=", "not ''"),
        ("a=info,a=debug", "logger 'a' is listed twice"),
    ],
)
def test_a_bad_value_is_refused_naming_the_setting_and_the_part(text: str, says: str) -> None:
    with pytest.raises(ValueError, match=None) as refused:
        parse_log_levels(text)
    assert says in str(refused.value)
    with pytest.raises(ConfigError) as config_error:
        load_settings(log_levels=text)
    assert "COGWORKER_LOG_LEVELS" in str(config_error.value) and says in str(config_error.value)


def test_the_setting_defaults_to_no_levels_per_logger() -> None:
    assert load_settings().log_levels == ""
