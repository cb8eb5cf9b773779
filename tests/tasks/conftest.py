"""Shared checks for the task tests."""
import pytest

from zoo.errors import ConfigError


@pytest.fixture
def assert_config_error():
    """``assert_config_error(cls, params, key, allowed)``: building ``cls(**params)`` raises a ConfigError that
    names ``key``, the bad value ``params[key without "task."]`` and contains ``allowed``."""

    def check(cls, params, key, allowed):
        with pytest.raises(ConfigError) as caught:
            cls(**params)
        bad_value = params[key.removeprefix("task.")]
        assert caught.value.key == key and caught.value.value == bad_value
        assert str(caught.value).startswith(f"{key}={bad_value!r}") and allowed in str(caught.value)

    return check
