"""Every system's tiny model, by name: ``EVERY_SYSTEM[name](data_dir)`` is (args, task, model)."""

from builders.awesome import build_awesome
from builders.hed import build_hed
from builders.hepos import SMALL_PATTERNS, build_hepos
from builders.models import build_tiny

EVERY_SYSTEM = {
    "pagesum": lambda d: build_tiny(d),
    "hed": lambda d: build_hed(d),
    "hepos": lambda d: build_hepos(d, "--encoder-attention", "window", *SMALL_PATTERNS),
    "awesome": lambda d: build_awesome(d, "--memory", "attentive"),
}
