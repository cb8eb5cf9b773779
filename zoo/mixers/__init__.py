"""Built-in sequence mixers; importing this package registers them all."""
from zoo.mixers import attention, gatedfwa  # noqa: F401
