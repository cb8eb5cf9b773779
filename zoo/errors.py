"""The one error type that bad user input raises, before any training starts."""


class ConfigError(ValueError):
    """A configuration value that cannot work.

    Args:
        key: dotted name of the offending key, e.g. ``"task.num_kv_pairs"``.
        value: the value the user gave.
        allowed: what would have been accepted (a list of choices or a sentence).
    """

    def __init__(self, key: str, value, allowed):
        if isinstance(allowed, (list, tuple, set, frozenset)):
            allowed = "one of " + ", ".join(repr(a) for a in sorted(allowed, key=str))
        super().__init__(f"{key}={value!r} is not valid: expected {allowed}")
        self.key, self.value, self.allowed = key, value, allowed
