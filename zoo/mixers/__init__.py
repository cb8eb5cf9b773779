"""Built-in sequence mixers; importing this package registers them all."""
from zoo.mixers import attention, gatedfwa  # noqa: F401
from zoo.mixers import based, hyena, mamba, mamba2, rwkv, rwkv7  # noqa: F401
from zoo.mixers import deltanet, gla, hgrn2, retnet  # noqa: F401
from zoo.mixers.registry import get_mixer, list_mixers, register_mixer

__all__ = ["get_mixer", "list_mixers", "register_mixer"]
