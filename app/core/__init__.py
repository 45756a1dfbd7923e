"""The pure core: pod dict in -> (mutated pod, warnings) out. No I/O, no web or k8s client."""

from app.core.mutate import InvalidPod, Result, UnsupportedPod, mutate
from app.core.params import ConfigError, InjectConfig, Params, Profile
from app.core.reasons import Warned

__all__ = [
    "ConfigError",
    "InjectConfig",
    "InvalidPod",
    "Params",
    "Profile",
    "Result",
    "UnsupportedPod",
    "Warned",
    "mutate",
]
