"""The packages import downward only (docs/architecture.md): the library's layers, then the
preprocessing pipeline, then the harnesses beside them; a command is a leaf that nothing in the
library imports; and imports sit at the top of a module, except an optional dependency's, whose
reason a comment gives. Read from the code itself, as Python parses it."""

import ast
import re
from functools import lru_cache
from pathlib import Path
from typing import Dict, Iterator, List, Tuple

import pytest
from fairseq.criterions import CRITERION_REGISTRY
from fairseq.models import MODEL_REGISTRY
from fairseq.tasks import TASK_REGISTRY

import pagesum_plugin.registration  # noqa: F401  (fills fairseq's registries)

from benchmarks.commands import console_scripts
from builders.cli import REPO_ROOT
from pagesum_commands import COMMANDS

REPO = Path(REPO_ROOT)
# installed package -> its folder
PACKAGES = {"pagesum_plugin": "pagesum_plugin", "pagesum_preprocess": "preprocess", "pagesum_recipes": "recipes",
            "pagesum_commands": "commands", "benchmarks": "benchmarks", "tests": "tests"}
# The library's layers, lowest first: a module imports from its own package and lower layers only.
LIBRARY_LAYERS = [
    ("architectures",),  # the models' dimensions and the systems' shapes: pure data
    ("atomic", "memory", "errors", "chunked_loss"),  # files written whole; memory predicted; the user's mistakes;
    #                                                 the training loss a chunk of summary tokens at a time
    ("corpus",),  # the stored corpus
    ("evaluation", "hf"),  # ROUGE, baselines, analyses: text in, numbers out; PageSum as a transformers model
    #                       (torch, transformers, numpy, never fairseq)
    ("data", "modules"),  # datasets and batches; attention, page mixing, the layers every system shares
    ("generation", "criterions", "optim", "training_capture"),  # decoding; the loss; updates; a pass as CUDA graphs
    ("tasks",),
    ("systems",),  # one folder per system: its model, layers, tasks and offline stages
    ("checkpoints", "summaries"),  # checkpoints loaded, converted, built; what summarize() returns
    ("registration",),  # the plugin registered with fairseq
    ("hub_interface",),  # from_pretrained and summarize()
    ("__init__",),  # the plugin itself: registers with fairseq when fairseq imports it
]
HARNESSES = ("pagesum_recipes", "benchmarks", "tests", "builders")


def module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    parts[0] = next(name for name, folder in PACKAGES.items() if folder == parts[0])
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


@lru_cache(maxsize=None)
def source_files() -> Tuple[Path, ...]:
    return tuple(sorted(p for folder in PACKAGES.values() for p in (REPO / folder).rglob("*.py")))


@lru_cache(maxsize=None)
def parsed(path: Path) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"), filename=str(path))


def imported(path: Path) -> Iterator[Tuple[ast.stmt, str]]:
    """(statement, module it imports) for every import of ``path``, relative ones resolved."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(parsed(path)):
        if isinstance(node, ast.Import):
            yield from ((node, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([node.module] if node.module else []))
            for alias in node.names:  # "from . import tasks" imports the module pagesum_plugin.tasks
                submodule = f"{base}.{alias.name}"
                yield node, submodule if is_module(submodule) else base


def is_module(name: str) -> bool:
    parts = name.split(".")
    if parts[0] not in PACKAGES:
        return False
    folder = REPO / PACKAGES[parts[0]] / Path(*parts[1:]) if len(parts) > 1 else REPO / PACKAGES[parts[0]]
    return folder.with_suffix(".py").exists() or (folder / "__init__.py").exists()


@lru_cache(maxsize=None)
def commands() -> Dict[str, str]:
    """Every console command of setup.py: module -> command name, both the module its entry point
    names and, for an entry of pagesum_commands, the module that does its work."""
    entries = {target.split(":")[0]: name for name, target in console_scripts(REPO / "setup.py").items()}
    return {**entries, **{command.work: name for name, command in COMMANDS.items()}}


def library_package(module: str) -> str:
    """``pagesum_plugin.corpus.views`` -> ``corpus``; the plugin's own __init__ -> ``__init__``."""
    return module.split(".")[1] if "." in module else "__init__"


def layer(module: str) -> int:
    return next(i for i, names in enumerate(LIBRARY_LAYERS) if library_package(module) in names)


def files_of(package: str) -> List[Path]:
    return [p for p in source_files() if module_name(p).split(".")[0] == package]


def test_every_package_of_the_library_has_a_layer():
    packages = {library_package(module_name(p)) for p in files_of("pagesum_plugin")}
    assert packages == {name for names in LIBRARY_LAYERS for name in names}


def test_the_library_imports_downward_only():
    upward = []
    for path in files_of("pagesum_plugin"):
        module = module_name(path)
        if module in commands():
            continue  # a command sits above the whole library
        for node, target in imported(path):
            if target.startswith("pagesum_plugin.") and library_package(target) != library_package(module) \
                    and layer(target) >= layer(module):
                upward.append(f"{path.relative_to(REPO)}:{node.lineno} imports {target}")
    assert not upward, "\n".join(upward)


def test_nothing_in_the_library_imports_a_command():
    found = [f"{path.relative_to(REPO)}:{node.lineno} imports the command module {target}"
             for path in files_of("pagesum_plugin") if module_name(path) not in commands()
             for node, target in imported(path) if target in commands()]
    assert not found, "\n".join(found)


@pytest.mark.parametrize("package, forbidden", [
    ("pagesum_plugin", ("pagesum_preprocess",) + HARNESSES),
    ("pagesum_preprocess", HARNESSES),
    ("pagesum_recipes", ("benchmarks", "tests", "builders")),
])
def test_a_layer_never_imports_the_layers_above_it(package, forbidden):
    found = [f"{path.relative_to(REPO)}:{node.lineno} imports {target}" for path in files_of(package)
             for node, target in imported(path) if target.split(".")[0] in forbidden]
    assert not found, "\n".join(found)


def function_imports(path: Path) -> Iterator[ast.stmt]:
    for function in ast.walk(parsed(path)):
        if isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield from (node for node in ast.walk(function) if isinstance(node, (ast.Import, ast.ImportFrom)))


def test_imports_sit_at_the_top_unless_an_optional_dependency_says_why():
    """An import inside a function is allowed for an optional dependency only, with a comment
    saying so (on its line or just above it)."""
    unexplained = []
    for path in source_files():
        lines = path.read_text(encoding="utf-8").splitlines()
        for node in function_imports(path):
            context = " ".join(lines[max(node.lineno - 3, 0): node.lineno])
            if not re.search(r"#.*\boptional\b", context):
                unexplained.append(f"{path.relative_to(REPO)}:{node.lineno}")
    assert not unexplained, "imports inside functions without an optional dependency's reason:\n" + "\n".join(
        unexplained)


def test_the_recipes_run_console_commands_never_a_python_file_or_module():
    runs = re.compile(r"python3?\"?\s+(-m\s+\S+|\S+\.py\b)|\$PYTHON\b")
    found = [f"{script.name}:{number}: {line.strip()}" for script in sorted((REPO / "recipes").glob("*.sh"))
             for number, line in enumerate(script.read_text().splitlines(), start=1)
             if runs.search(line) and not line.lstrip().startswith("#")]
    assert not found, "\n".join(found)


def test_every_command_module_is_installed_with_its_entry_point():
    for module, command in commands().items():
        assert is_module(module), f"{command}: no module {module}"


SYSTEMS = ("awesome", "bart", "hed", "hepos", "pagesum")  # pagesum_plugin/systems/<name>/
BASE_SYSTEM = "bart"  # what every other system's model subclasses


def system_of(module: str) -> str:
    """``pagesum_plugin.systems.hepos.attention`` -> ``hepos``; outside the systems: ``""``."""
    parts = module.split(".")
    return parts[2] if len(parts) > 2 and parts[1] == "systems" else ""


def test_every_system_has_one_folder_that_says_what_it_holds():
    folders = sorted(p.name for p in (REPO / "pagesum_plugin" / "systems").iterdir() if (p / "__init__.py").exists())
    assert tuple(folders) == SYSTEMS
    for name in SYSTEMS:
        docstring = ast.get_docstring(parsed(REPO / "pagesum_plugin" / "systems" / name / "__init__.py")) or ""
        files = sorted(p.name for p in (REPO / "pagesum_plugin" / "systems" / name).glob("*.py") if p.name != "__init__.py")
        unnamed = [f for f in files if f"``{f}``" not in docstring]
        assert not unnamed, f"systems/{name}/__init__.py does not say what these hold: {unnamed}"


def test_a_system_imports_its_own_folder_bart_and_the_shared_layers_never_another_system():
    crossing = []
    for path in files_of("pagesum_plugin"):
        own = system_of(module_name(path))
        if not own:
            continue  # above the systems, anything may import them all
        for node, target in imported(path):
            other = system_of(target)
            if other and other != own and other != BASE_SYSTEM:
                crossing.append(f"{path.relative_to(REPO)}:{node.lineno} imports {target}")
    assert not crossing, "\n".join(crossing)


def test_every_registered_model_task_and_criterion_lives_in_its_system_or_the_shared_layers():
    """fairseq's registries, filled by the plugin: a name of one system (``hepos_tiny``,
    ``awesome_extractor``) is defined in that system's folder; the shared task and criterion
    (``paged_summarization``, ``paged_label_smoothed_cross_entropy``) below the systems."""
    owners = {"segmented_summarization": "awesome", "salient_extraction": "awesome"}
    misplaced = []
    for registry in (MODEL_REGISTRY, TASK_REGISTRY, CRITERION_REGISTRY):
        for name, cls in registry.items():
            if not cls.__module__.startswith("pagesum_plugin."):
                continue
            system = owners.get(name, next((s for s in SYSTEMS if name.split("_")[0] == s), ""))
            if system_of(cls.__module__) != system:
                misplaced.append(f"{name}: {cls.__module__} (expected {'systems/' + system if system else 'a shared layer'})")
    assert not misplaced, "\n".join(misplaced)


ARCHITECTURE = REPO / "docs" / "architecture.md"
# a row of its packages table: | `path` | layer | what it owns |
PACKAGE_ROW = re.compile(r"^\| `([^`]+)` \| ([^|]+?) \|", re.MULTILINE)


PACKAGES_SECTION = "## Packages, their layer and what they own"


def documented_packages() -> Dict[str, str]:
    """The table of docs/architecture.md's packages section: path -> its layer cell."""
    text = ARCHITECTURE.read_text(encoding="utf-8")
    assert PACKAGES_SECTION in text, f"docs/architecture.md has no section {PACKAGES_SECTION!r}"
    section = text.split(PACKAGES_SECTION, 1)[1].split("\n## ", 1)[0]
    return {path: cell.strip() for path, cell in PACKAGE_ROW.findall(section)}


def library_path(name: str) -> str:
    """``corpus`` -> ``pagesum_plugin/corpus/``; ``atomic`` -> ``pagesum_plugin/atomic.py``."""
    folder = REPO / "pagesum_plugin" / name
    return f"pagesum_plugin/{name}/" if (folder / "__init__.py").exists() else f"pagesum_plugin/{name}.py"


def test_the_architecture_page_gives_every_library_package_and_system_its_layer():
    documented = documented_packages()
    expected = {library_path(name): str(index) for index, names in enumerate(LIBRARY_LAYERS) for name in names}
    expected.update({f"pagesum_plugin/systems/{name}/": str(layer("pagesum_plugin.systems")) for name in SYSTEMS})
    expected.update({f"{folder}/": None for folder in PACKAGES.values() if folder != "pagesum_plugin"})  # the
    #                                                            pipeline, the commands, the harnesses
    missing = [path for path in expected if path not in documented]
    wrong = [f"{path}: layer {documented[path]}, expected {layer}" for path, layer in expected.items()
             if layer is not None and path in documented and documented[path] != layer]
    assert not missing and not wrong, f"docs/architecture.md: missing {missing}; {wrong}"


def test_every_package_on_the_architecture_page_is_in_the_tree():
    gone = [path for path in documented_packages() if not (REPO / path).exists()
            or path.endswith("/") != (REPO / path).is_dir()]
    assert not gone, f"docs/architecture.md lists what the tree does not hold: {gone}"


def test_the_library_keeps_one_path_of_each_layer_and_its_paths_of_before_live_beside_the_benchmarks():
    """No class of the library carries a switch to an old path (``reference``); the paths of before
    that the benchmarks and equivalence tests compare with are twins in ``benchmarks/reference/``."""
    switches = [f"{path.relative_to(REPO)}:{statement.lineno} {cls.name}" for path in files_of("pagesum_plugin")
                for cls in ast.walk(parsed(path)) if isinstance(cls, ast.ClassDef) for statement in cls.body
                if isinstance(statement, (ast.Assign, ast.AnnAssign))
                and any(isinstance(t, ast.Name) and t.id == "reference"
                        for t in (statement.targets if isinstance(statement, ast.Assign) else [statement.target]))]
    assert not switches, "\n".join(switches)
    assert not any(module_name(p) == "pagesum_plugin.profiling" for p in files_of("pagesum_plugin"))
