"""The plugin's docstring tells the truth: it names every model, architecture, task and
criterion that importing the plugin registers with fairseq, and counts them right."""

import re

from fairseq.criterions import CRITERION_REGISTRY
from fairseq.models import ARCH_MODEL_REGISTRY, MODEL_REGISTRY
from fairseq.tasks import TASK_REGISTRY

import pagesum_plugin
import pagesum_plugin.registration  # noqa: F401  (fills the registries)


def registered(registry) -> set:
    return {name for name, cls in registry.items() if cls.__module__.startswith("pagesum_plugin.")}


def named(names: set) -> set:
    return {name for name in names if f"``{name}``" in pagesum_plugin.__doc__}


def test_the_docstring_names_every_model_architecture_task_and_criterion_registered():
    for registry in (MODEL_REGISTRY, ARCH_MODEL_REGISTRY, TASK_REGISTRY, CRITERION_REGISTRY):
        names = registered(registry)
        assert names and named(names) == names


def test_the_docstring_counts_them_right():
    counts = {kind: int(n) for n, kind in re.findall(r"\* (\d+) (models|tasks|criterions)", pagesum_plugin.__doc__)}
    assert counts == {"models": len(registered(MODEL_REGISTRY)), "tasks": len(registered(TASK_REGISTRY)),
                      "criterions": len(registered(CRITERION_REGISTRY))} == {"models": 5, "tasks": 3, "criterions": 2}
