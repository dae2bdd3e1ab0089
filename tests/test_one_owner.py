"""One owner per fact: a model's dimensions, a system's shape and the names of a data directory's
files are each written once, and every other module reads them from their owner.

* ``pagesum_plugin/architectures.py`` owns every dimension (width, feed-forward, layers, heads,
  vocabulary, positions) and agrees with what fairseq's own BART architectures set;
* ``pagesum_plugin/corpus/format.py`` owns the names of a data directory's files;
* ``ViewConfig`` (``corpus/options.py``) owns the default view that ``CorpusMeta`` records and
  ``pagesum-preprocess`` offers.

Read from the code itself, as Python parses it; the tests may write any literal they need."""

import argparse
import ast
import dataclasses
import re
from functools import lru_cache
from pathlib import Path
from typing import Iterator, Tuple

import pytest
from fairseq.data import Dictionary
from fairseq.models import ARCH_CONFIG_REGISTRY, ARCH_MODEL_NAME_REGISTRY
from fairseq.models.bart.model import bart_base_architecture, bart_large_architecture

from builders.cli import REPO_ROOT
from pagesum_plugin.architectures import (ARCHITECTURES, BENCHMARK_SIZES, SPECIAL_SYMBOLS, SYSTEMS, architecture,
                                          architecture_name)
from pagesum_plugin.corpus.format import DIRECTORY_FILES, META_FILE, CorpusMeta
from pagesum_plugin.corpus.options import ViewConfig
from pagesum_preprocess.arguments import build_parser as preprocess_parser
from pagesum_recipes.comparison import systems as comparison_systems

REPO = Path(REPO_ROOT)
SCANNED = ("pagesum_plugin", "preprocess", "commands", "recipes", "benchmarks")
TABLE = REPO / "pagesum_plugin" / "architectures.py"
FORMAT = REPO / "pagesum_plugin" / "corpus" / "format.py"
# A dimension, as fairseq's arguments, transformers' BartConfig, the table or the benchmarks name it.
DIMENSION = re.compile(r"(encoder_|decoder_)?(embed_dim|ffn_embed_dim|ffn_dim|layers|attention_heads|heads|"
                       r"output_dim|input_dim)|d_model|vocab(_size|_words)?|positions|max_position_embeddings|"
                       r"max_(source|target)_positions")
RESTATED = {}  # module -> constants that restate a fact (none: every fact is imported from its owner)


@lru_cache(maxsize=None)
def sources() -> Tuple[Path, ...]:
    return tuple(sorted(p for folder in SCANNED for p in (REPO / folder).rglob("*.py")))


@lru_cache(maxsize=None)
def parsed(path: Path) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"), filename=str(path))


def restated_values(path: Path) -> set:
    """The value nodes of ``path``'s module-level constants that RESTATED allows."""
    names = RESTATED.get(path, set())
    return {id(node.value) for node in parsed(path).body if isinstance(node, ast.Assign)
            for target in node.targets if isinstance(target, ast.Name) and target.id in names}


def named_values(tree: ast.AST) -> Iterator[Tuple[str, ast.expr]]:
    """(name, value) of every keyword argument, string-keyed dict entry, assignment to a name or
    an attribute, and ``getattr(x, "name", default)``."""
    for node in ast.walk(tree):
        if isinstance(node, ast.keyword) and node.arg:
            yield node.arg, node.value
        elif isinstance(node, ast.Dict):
            yield from ((key.value, value) for key, value in zip(node.keys, node.values)
                        if isinstance(key, ast.Constant) and isinstance(key.value, str))
        elif isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
            for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
                if isinstance(target, (ast.Name, ast.Attribute)):
                    yield (target.id if isinstance(target, ast.Name) else target.attr), node.value
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "getattr" \
                and len(node.args) == 3 and isinstance(node.args[1], ast.Constant):
            yield node.args[1].value, node.args[2]


def is_dimension(name) -> bool:
    return isinstance(name, str) and DIMENSION.fullmatch(name.lower()) is not None


def is_integer(node: ast.expr) -> bool:
    return isinstance(node, ast.Constant) and type(node.value) is int


# ---- the dimensions ----------------------------------------------------------------------------


def test_a_dimension_is_written_only_in_the_table():
    found = [f"{path.relative_to(REPO)}:{value.lineno}: {name} = {value.value}"
             for path in sources() if path != TABLE for name, value in named_values(parsed(path))
             if is_dimension(name) and is_integer(value)]
    assert not found, "dimensions belong in pagesum_plugin/architectures.py:\n" + "\n".join(found)


def test_the_scan_sees_a_dimension_written_outside_the_table():
    """The test above would see a keyword, a dict entry, an assignment or a getattr default."""
    written = ast.parse('Size(embed_dim=64)\nflags = {"d_model": 768}\nargs.encoder_layers = 12\n'
                        'x = getattr(args, "decoder_attention_heads", 16)\nsize = Size(width=64)')
    assert {name for name, value in named_values(written) if is_dimension(name) and is_integer(value)} == {
        "embed_dim", "d_model", "encoder_layers", "decoder_attention_heads"}


@pytest.mark.parametrize("size, fairseq_architecture", [("bart_large", bart_large_architecture),
                                                        ("bart_base", bart_base_architecture)])
def test_the_table_holds_what_fairseqs_bart_architecture_sets(size, fairseq_architecture):
    args = argparse.Namespace()
    fairseq_architecture(args)
    arch = ARCHITECTURES[size]
    assert (args.encoder_embed_dim, args.decoder_embed_dim) == (arch.embed_dim, arch.embed_dim)
    assert (args.encoder_ffn_embed_dim, args.decoder_ffn_embed_dim) == (arch.ffn_dim, arch.ffn_dim)
    assert (args.encoder_layers, args.decoder_layers) == (arch.layers, arch.layers)
    assert (args.encoder_attention_heads, args.decoder_attention_heads) == (arch.heads, arch.heads)
    assert (args.max_source_positions, args.max_target_positions) == (arch.positions, arch.positions)


def test_every_architecture_of_a_system_is_registered_with_fairseq_under_its_model():
    for system, shape in SYSTEMS.items():
        for size in shape.sizes:
            assert ARCH_MODEL_NAME_REGISTRY.get(architecture_name(system, size)) == system


def built_architectures() -> list:
    """Every architecture the plugin registers with fairseq (AWESOME's extractor's too), and the
    ones of fairseq's that the table names (full-attention BART's)."""
    own = {name for name, function in ARCH_CONFIG_REGISTRY.items() if function.__module__.startswith("pagesum_plugin.")}
    return sorted(own | {architecture_name(system, size) for system, shape in SYSTEMS.items() for size in shape.sizes})


@pytest.mark.parametrize("name", built_architectures())
def test_every_architecture_builds_its_sizes_dimensions(name):
    """An architecture is named for a size of the table, sets its dimensions and lets fairseq's BART
    fill in the rest: a model of any of them has its size's shape, positions included."""
    (size,) = [size for size in ARCHITECTURES if name.endswith(f"_{size}") or name == size]
    args = argparse.Namespace()
    ARCH_CONFIG_REGISTRY[name](args)
    arch = ARCHITECTURES[size]
    assert (args.encoder_embed_dim, args.decoder_embed_dim, args.encoder_ffn_embed_dim, args.decoder_ffn_embed_dim,
            args.encoder_layers, args.decoder_layers, args.encoder_attention_heads,
            args.decoder_attention_heads) == (arch.embed_dim, arch.embed_dim, arch.ffn_dim, arch.ffn_dim,
                                              arch.layers, arch.layers, arch.heads, arch.heads)
    if ARCH_MODEL_NAME_REGISTRY[name] != "hed":  # HED reads 4,096 source tokens through BART's 1,024 positions
        assert args.max_source_positions == arch.positions
    assert args.max_target_positions == arch.positions


def test_an_architecture_name_gives_its_system_and_dimensions():
    assert architecture("pagesum_tiny") == ("pagesum", ARCHITECTURES["tiny"])
    assert architecture("bart_base") == ("bart", ARCHITECTURES["bart_base"])
    with pytest.raises(ValueError, match="unknown architecture 'bart_tiny'"):  # fairseq's BART has no tiny
        architecture("bart_tiny")


def test_a_vocabulary_counts_fairseqs_special_symbols():
    assert SPECIAL_SYMBOLS == len(Dictionary())
    assert all(arch.vocab > SPECIAL_SYMBOLS for arch in (*ARCHITECTURES.values(), *BENCHMARK_SIZES.values()))


# ---- a data directory's files -------------------------------------------------------------------


def test_a_data_directory_file_is_named_only_by_the_format():
    names = set(DIRECTORY_FILES)
    found = [f"{path.relative_to(REPO)}:{node.lineno}: {node.value!r}"
             for path in sources() if path != FORMAT for node in ast.walk(parsed(path))
             if isinstance(node, ast.Constant) and node.value in names and id(node) not in restated_values(path)]
    assert not found, "import the name from pagesum_plugin/corpus/format.py:\n" + "\n".join(found)


def test_the_comparisons_queries_read_the_sizes_and_file_names_from_their_owners():
    assert comparison_systems.MODEL_SIZES == tuple(ARCHITECTURES)
    assert comparison_systems.META_FILE is META_FILE


# ---- the default view --------------------------------------------------------------------------


def test_the_corpus_records_the_default_view_of_the_view_settings():
    """Every setting ``CorpusMeta`` shares with ``ViewConfig`` defaults to ``ViewConfig``'s, read
    from it rather than written again."""
    shared = {f.name for f in dataclasses.fields(CorpusMeta)} & {f.name for f in dataclasses.fields(ViewConfig)}
    assert shared >= {"view", "num_pages", "max_pages", "spatial_split", "max_page_tokens", "max_source_tokens"}
    (meta,) = [node for node in parsed(FORMAT).body if isinstance(node, ast.ClassDef) and node.name == "CorpusMeta"]
    defaults = {node.target.id: node.value for node in meta.body if isinstance(node, ast.AnnAssign)}
    for name in shared:
        assert ast.unparse(defaults[name]) == f"ViewConfig.{name}", f"CorpusMeta.{name} restates ViewConfig's default"
    assert all(getattr(CorpusMeta("none"), name) == getattr(ViewConfig, name) for name in shared)


def test_pagesum_preprocess_offers_the_default_view_the_corpus_records():
    args = preprocess_parser().parse_args(["--input-format", "jsonl", "--destdir", "out"])
    meta = CorpusMeta("none")
    for name in ("view", "num_pages", "max_pages", "spatial_split", "max_page_tokens", "max_source_tokens",
                 "max_summary_tokens"):
        assert getattr(args, name) == getattr(meta, name), name
