"""Every flag that the plugin's tasks, criterions and optimizers declare reaches their own
setting. fairseq builds those flags from the dataclasses and drops, without a word, a field
whose flag one of its own options already holds: `--max-sentences` is fairseq's alias of
`--batch-size`, so a field named `max_sentences` would never be set, and the user's value
would change the batch size instead. (A model's `add_args` flag that clashed would stop
argparse at once, so models need no such check.)"""

import pytest
from fairseq import options

from builders.awesome import build_extractor, paper_examples, write_text_corpus
from builders.registry import own_fields, plugin_configs
from pagesum_plugin.systems.awesome import label as label_cli


def fairseqs_own_options() -> dict:
    """{flag: the setting it writes} of fairseq's training and generation commands, before any plugin option."""
    held = {}
    for parser in (options.get_training_parser(), options.get_generation_parser()):
        held.update({flag: action.dest for flag, action in parser._option_string_actions.items()})
    return held


def test_no_flag_of_the_plugin_is_already_one_of_fairseqs():
    held = fairseqs_own_options()
    fields = [(name, field.name) for name, config in plugin_configs() for field in own_fields(config)]
    assert ("salient_extraction", "max_document_sentences") in fields
    taken = [f"{name}: --{field.replace('_', '-')} is fairseq's, for its {held[flag]}"
             for name, field in fields if (flag := "--" + field.replace("_", "-")) in held and held[flag] != field]
    assert not taken, "\n".join(taken)


@pytest.fixture(scope="module")
def labelled(tmp_path_factory):
    data_dir = str(tmp_path_factory.mktemp("labelled"))
    write_text_corpus(data_dir, {"train": paper_examples(2, offset=20, sentences=12)})
    assert label_cli.main([data_dir, "--workers", "1"]) == 0
    return data_dir


def test_the_extractor_trains_on_each_documents_first_max_document_sentences(labelled):
    args, task, _ = build_extractor(labelled, "--max-document-sentences", "5", "--batch-size", "2")
    task.load_dataset("train")
    dataset = task.datasets["train"]
    sample = dataset.collater([dataset[0], dataset[1]])
    assert sample["net_input"]["sentence_counts"].tolist() == [5, 5] and len(sample["target"]) == 10
    assert args.batch_size == 2  # the batch size is its own setting
    _, full, _ = build_extractor(labelled)
    full.load_dataset("train")
    assert full.datasets["train"][0]["labels"].numel() == 12
