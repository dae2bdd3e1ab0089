"""The documentation stays true to the code: every test a system's page cites exists, every name
the plugin registers with fairseq and every flag it adds is on docs/reference.md, every link
between the pages resolves, BENCHMARKS.md lists every benchmark's page, and the README's test
command is the one CI runs. Read from the files and from fairseq's registries, nothing run."""

import argparse
import ast
import re
from functools import lru_cache
from pathlib import Path
from typing import Dict, Iterator, List, Set, Tuple

import pytest
from fairseq.criterions import CRITERION_REGISTRY
from fairseq.models import ARCH_MODEL_REGISTRY, MODEL_REGISTRY
from fairseq.models.bart import BARTModel
from fairseq.optim import OPTIMIZER_REGISTRY
from fairseq.tasks import TASK_REGISTRY

from builders.cli import REPO_ROOT
from builders.registry import PLUGIN, own_fields, plugin_configs

REPO = Path(REPO_ROOT)
DOCS = REPO / "docs"
SYSTEM_PAGES = ("awesome", "bart", "hed", "hepos", "pagesum")  # docs/systems/<name>.md, one per system folder
CITED_TEST = re.compile(r"(tests/[\w/]+\.py)::(\w+)(?:::(\w+))?")


def test_every_system_has_a_page():
    folders = sorted(p.name for p in (REPO / "pagesum_plugin" / "systems").iterdir() if (p / "__init__.py").exists())
    assert folders == sorted(SYSTEM_PAGES)
    missing = [name for name in SYSTEM_PAGES if not (DOCS / "systems" / f"{name}.md").exists()]
    assert not missing, f"no docs/systems/<name>.md for {missing}"


@lru_cache(maxsize=None)
def defined_tests(path: Path) -> Dict[str, Set[str]]:
    """Top-level functions of a test file (name -> {}) and classes (name -> their methods)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    found: Dict[str, Set[str]] = {}
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            found[node.name] = set()
        elif isinstance(node, ast.ClassDef):
            found[node.name] = {n.name for n in node.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
    return found


@pytest.mark.parametrize("name", SYSTEM_PAGES)
def test_every_test_a_system_page_cites_exists(name):
    page = DOCS / "systems" / f"{name}.md"
    cited = CITED_TEST.findall(page.read_text(encoding="utf-8"))
    assert cited, f"{page.relative_to(REPO)} cites no test"
    absent = []
    for path, first, method in cited:
        if not (REPO / path).is_file():
            absent.append(f"{path} (no such file)")
            continue
        defined = defined_tests(REPO / path)
        if first not in defined or (method and method not in defined[first]):
            absent.append(f"{path}::{first}" + (f"::{method}" if method else ""))
    assert not absent, f"{page.relative_to(REPO)} cites tests that do not exist:\n" + "\n".join(absent)


# --------------------------------------------------------------------------- docs/reference.md


def plugin_names() -> Iterator[Tuple[str, str]]:
    """(kind, name) of everything the plugin registers with fairseq."""
    for kind, registry in (("model", MODEL_REGISTRY), ("architecture", ARCH_MODEL_REGISTRY), ("task", TASK_REGISTRY),
                           ("criterion", CRITERION_REGISTRY), ("optimizer", OPTIMIZER_REGISTRY)):
        for name, cls in registry.items():
            if cls.__module__.startswith(PLUGIN):
                yield kind, name


def model_flags(model) -> Set[str]:
    """The options a model's ``add_args`` adds to fairseq's BART's."""
    def options(add_args) -> Set[str]:
        parser = argparse.ArgumentParser(add_help=False)
        add_args(parser)
        return {option for action in parser._actions for option in action.option_strings}
    return options(model.add_args) - options(BARTModel.add_args)


def plugin_flags() -> Iterator[Tuple[str, str]]:
    """(owner, how the flag is written) for every flag the plugin adds: the tasks', criterions' and
    optimizers' dataclass fields, and the models' ``add_args`` options."""
    for name, config in plugin_configs():
        for field in own_fields(config):
            # a task's data directory is fairseq's positional argument, not an option
            yield name, "`data`" if field.name == "data" else "--" + field.name.replace("_", "-")
    for name, cls in MODEL_REGISTRY.items():
        if cls.__module__.startswith(PLUGIN):
            yield from ((name, flag) for flag in model_flags(cls))


def reference() -> str:
    return (DOCS / "reference.md").read_text(encoding="utf-8")


def test_every_registered_name_is_on_the_reference_page():
    names = list(plugin_names())
    assert {kind for kind, _ in names} == {"model", "architecture", "task", "criterion", "optimizer"}
    text = reference()
    missing = [f"{kind} {name}" for kind, name in names if f"`{name}`" not in text]
    assert not missing, "docs/reference.md does not name: " + ", ".join(missing)


def test_every_flag_the_plugin_adds_is_on_the_reference_page():
    flags = list(plugin_flags())
    assert ("pagesum", "--page-decoding") in flags and ("paged_summarization", "--top-pages") in flags
    text = reference()
    missing = [f"{owner}: {flag}" for owner, flag in flags if not re.search(re.escape(flag) + r"(?![\w-])", text)]
    assert not missing, "docs/reference.md does not list: " + ", ".join(missing)


# --------------------------------------------------------------------------- links


def pages() -> List[Path]:
    return [REPO / "README.md", REPO / "BENCHMARKS.md"] + sorted(DOCS.rglob("*.md"))


LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)|<img [^>]*src=\"([^\"]+)\"")
FENCE = re.compile(r"^```.*?^```", re.MULTILINE | re.DOTALL)


def links(page: Path) -> Iterator[str]:
    text = FENCE.sub("", page.read_text(encoding="utf-8"))
    for markdown, image in LINK.findall(text):
        target = markdown or image
        if not re.match(r"[a-z]+:", target):  # http:, https:, mailto:
            yield target


def anchors(page: Path) -> Set[str]:
    """GitHub's anchors of a page's headings: lower case, punctuation dropped, spaces as hyphens."""
    text = FENCE.sub("", page.read_text(encoding="utf-8"))
    return {re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
            for heading in re.findall(r"^#+ (.+)$", text, flags=re.MULTILINE)}


@pytest.mark.parametrize("page", pages(), ids=lambda p: str(p.relative_to(REPO)))
def test_every_link_between_the_pages_resolves(page):
    broken = []
    for target in links(page):
        path, _, anchor = target.partition("#")
        resolved = (page.parent / path).resolve() if path else page
        if not resolved.exists():
            broken.append(f"{target} (no such file)")
        elif anchor and resolved.suffix == ".md" and anchor not in anchors(resolved):
            broken.append(f"{target} (no such heading)")
    assert not broken, f"{page.relative_to(REPO)}: " + ", ".join(broken)


def test_benchmarks_lists_every_benchmark_page():
    listed = {(REPO / target.partition("#")[0]).resolve() for target in links(REPO / "BENCHMARKS.md")}
    unlisted = [p.name for p in sorted((DOCS / "benchmarks").glob("*.md")) if p.resolve() not in listed]
    assert not unlisted, f"BENCHMARKS.md does not link {unlisted}"


def test_the_readmes_test_command_is_the_one_ci_runs():
    ci = [line for line in (REPO / ".ci" / "run").read_text().splitlines() if line.startswith("bash setup.sh")]
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    first_block = readme.split("```bash", 1)[1].split("```", 1)[0]
    assert ci and ci[0] in first_block, "the README's first commands do not hold .ci/run's test command"
