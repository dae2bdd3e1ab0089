"""What the plugin gives fairseq through its registries: its tasks', criterions' and optimizers'
dataclasses, and the fields each declares itself."""

import dataclasses
from typing import Iterator, List, Tuple

from fairseq.criterions import CRITERION_DATACLASS_REGISTRY, CRITERION_REGISTRY
from fairseq.optim import OPTIMIZER_DATACLASS_REGISTRY, OPTIMIZER_REGISTRY
from fairseq.tasks import TASK_DATACLASS_REGISTRY, TASK_REGISTRY

import pagesum_plugin.registration  # noqa: F401  (fills fairseq's registries)

PLUGIN = "pagesum_plugin."


def plugin_configs() -> Iterator[Tuple[str, type]]:
    """(registered name, dataclass) of every task, criterion and optimizer of the plugin that has one."""
    for registry, configs in ((TASK_REGISTRY, TASK_DATACLASS_REGISTRY), (CRITERION_REGISTRY, CRITERION_DATACLASS_REGISTRY),
                              (OPTIMIZER_REGISTRY, OPTIMIZER_DATACLASS_REGISTRY)):
        for name, cls in registry.items():
            if cls.__module__.startswith(PLUGIN) and name in configs:
                yield name, configs[name]


def own_fields(config) -> List[dataclasses.Field]:
    """The fields a dataclass of the plugin declares itself (in its own or a plugin base class),
    not those it inherits from fairseq's, nor those that only read another of fairseq's settings
    (``II("common.seed")``)."""
    declared = {name for cls in type.mro(config) if cls.__module__.startswith(PLUGIN)
                for name in vars(cls).get("__annotations__", {})}
    return [f for f in dataclasses.fields(config) if f.name in declared and not f.name.startswith("_")
            and not (isinstance(f.default, str) and f.default.startswith("${"))]
