"""Every decoding setting a user gives ``summarize()``, ``fairseq-generate`` or ``--eval-rouge-args``
reaches the search it runs, and every one of the generation defaults reaches both the page
generator and ``fairseq-generate``'s flags: each test fails when a setting is dropped on the way."""

import json
from dataclasses import fields, replace

import pytest
import torch
from fairseq import options, tasks

from builders.cli import USER_DIR
from builders.models import build_tiny
from pagesum_plugin import from_pretrained, hub_interface
from pagesum_plugin.checkpoints.builder import save_checkpoint
from pagesum_plugin.data.paged_dataset import collate_pages
from pagesum_plugin.errors import SettingError
from pagesum_plugin.generation import page_sequence_generator
from pagesum_plugin.generation.page_sequence_generator import PageSumSequenceGenerator
from pagesum_plugin.generation.defaults import GenerationDefaults

# a value for every setting, none of them its default
GIVEN = GenerationDefaults(beam=3, lenpen=0.25, no_repeat_ngram_size=2, min_len=5, max_len_b=17, top_pages=1)
# the generator's attribute that holds each setting (its lengths count summary tokens, the forced <s> aside)
ATTRIBUTES = {"beam": "beam_size", "lenpen": "len_penalty", "min_len": "min_len", "max_len_b": "max_len_b",
              "top_pages": "top_pages"}


def test_the_given_settings_differ_from_the_defaults():
    default = GenerationDefaults()
    assert all(getattr(GIVEN, f.name) != getattr(default, f.name) for f in fields(GenerationDefaults))


def test_every_setting_reaches_the_page_generator(copy_task_dir):
    _, task, model = build_tiny(copy_task_dir)
    generator = PageSumSequenceGenerator([model], task.dictionary, **GIVEN.generator_kwargs())
    for setting, attribute in ATTRIBUTES.items():
        assert getattr(generator, attribute) == getattr(GIVEN, setting), setting
    assert generator.repeat_ngram_blocker.no_repeat_ngram_size == GIVEN.no_repeat_ngram_size


def test_every_search_setting_reaches_fairseq_generates_flags():
    parser = options.get_generation_parser()
    args = options.parse_args_and_arch(parser, ["data", *GIVEN.fairseq_flags()])
    assert (args.beam, args.lenpen, args.no_repeat_ngram_size, args.min_len, args.max_len_b) == (
        GIVEN.beam, GIVEN.lenpen, GIVEN.no_repeat_ngram_size, GIVEN.min_len, GIVEN.max_len_b)


def test_every_setting_given_to_fairseq_generate_reaches_its_search(copy_task_dir):
    """fairseq-generate parses its flags, then asks the task for its generator: every search
    flag, and the task's own --top-pages, reaches the page generator it builds."""
    argv = [copy_task_dir, "--user-dir", USER_DIR, "--task", "paged_summarization", *GIVEN.fairseq_flags(),
            "--top-pages", str(GIVEN.top_pages)]
    args = options.parse_args_and_arch(options.get_generation_parser(), argv)
    task = tasks.setup_task(args)
    _, _, model = build_tiny(copy_task_dir)
    generator = task.build_generator([model], args)
    assert isinstance(generator, PageSumSequenceGenerator)
    for setting, attribute in ATTRIBUTES.items():
        assert getattr(generator, attribute) == getattr(GIVEN, setting), setting
    assert generator.repeat_ngram_blocker.no_repeat_ngram_size == GIVEN.no_repeat_ngram_size


def test_every_setting_given_to_eval_rouge_args_reaches_the_validation_search(copy_task_dir):
    given = json.dumps(GIVEN.as_kwargs())
    _, task, _ = build_tiny(copy_task_dir, "--eval-rouge", "--eval-rouge-args", given)
    generator = task._rouge_generator
    for setting, attribute in ATTRIBUTES.items():
        assert getattr(generator, attribute) == getattr(GIVEN, setting), setting
    assert generator.repeat_ngram_blocker.no_repeat_ngram_size == GIVEN.no_repeat_ngram_size


@pytest.mark.parametrize("given, message", [
    ('{"max_len": 10}', "--eval-rouge-args: max_len is not a setting; give an object of beam, lenpen, "),
    ('{"beam": 2,}', "--eval-rouge-args {\"beam\": 2,}: not JSON"),
])
def test_eval_rouge_args_that_the_search_would_not_read_are_refused_in_one_line(copy_task_dir, given, message):
    with pytest.raises(SettingError) as refused:
        build_tiny(copy_task_dir, "--eval-rouge", "--eval-rouge-args", given)
    assert str(refused.value).startswith(message) and "\n" not in str(refused.value)


class Recording(PageSumSequenceGenerator):
    """The page generator, keeping the settings it was built with and the pages of every batch it
    decoded."""

    built = []
    fed = []  # src_tokens of each batch: (batch, pages, page_len)

    def __init__(self, models, tgt_dict, **kwargs):
        Recording.built.append(kwargs)
        super().__init__(models, tgt_dict, **kwargs)

    def generate(self, models, sample, **kwargs):
        Recording.fed.append(sample["net_input"]["src_tokens"])
        return super().generate(models, sample, **kwargs)


@pytest.fixture()
def hub(paged, tmp_path, monkeypatch):
    args, _, model = build_tiny(paged)
    save_checkpoint(tmp_path / "checkpoint_best.pt", args, model)
    monkeypatch.setattr(hub_interface, "PageSumSequenceGenerator", Recording)
    Recording.built.clear()
    Recording.fed.clear()
    return from_pretrained(str(tmp_path), "checkpoint_best.pt", data_name_or_path=paged)


def test_every_setting_given_to_summarize_reaches_its_search(hub, papers):
    document = [(s["name"], s["text"]) for s in papers[0]["sections"]]
    with torch.no_grad():
        hub.summarize([document], beam=GIVEN.beam, lenpen=GIVEN.lenpen, min_len=GIVEN.min_len,
                      max_len_b=GIVEN.max_len_b, no_repeat_ngram_size=GIVEN.no_repeat_ngram_size,
                      top_pages=GIVEN.top_pages)
    (built,) = Recording.built
    assert {key: built[key] for key in GIVEN.generator_kwargs()} == GIVEN.generator_kwargs()


def test_summarize_decodes_with_the_tasks_defaults_where_no_setting_is_given(hub, papers):
    document = [(s["name"], s["text"]) for s in papers[0]["sections"]]
    with torch.no_grad():
        hub.summarize([document])
    (built,) = Recording.built
    expected = replace(hub.task.generation_defaults).generator_kwargs()
    assert {key: built[key] for key in expected} == expected


def test_locality_given_to_summarize_pages_each_document_in_that_view(hub, papers):
    """The model was trained on discourse pages; ``locality="spatial"`` reads the same sections as
    the spatial view's pages instead."""
    document = [(s["name"], s["text"]) for s in papers[0]["sections"]]
    spatial, discourse = hub.pages(document, locality="spatial"), hub.pages(document)
    assert [page.tolist() for page in spatial] != [page.tolist() for page in discourse]
    with torch.no_grad():
        hub.summarize([document], locality="spatial", max_len_b=2)
    (fed,) = Recording.fed
    assert torch.equal(fed, collate_pages([spatial], hub.dictionary.pad()))


def test_batch_size_given_to_summarize_is_how_many_documents_are_paged_and_decoded_at_once(hub, papers):
    documents = [[(s["name"], s["text"]) for s in paper["sections"]] for paper in papers[:5]]
    with torch.no_grad():
        hub.summarize(documents, batch_size=2, max_len_b=2)
    assert [fed.size(0) for fed in Recording.fed] == [2, 2, 1]


def test_compile_and_decoding_given_to_summarize_reach_its_generator(hub, papers, monkeypatch):
    compiled = []
    monkeypatch.setattr(page_sequence_generator, "compile_decoder_layers",
                        lambda model, backend: compiled.append(backend))
    document = [(s["name"], s["text"]) for s in papers[0]["sections"]]
    with torch.no_grad():
        hub.summarize([document], compile=True, decoding="eager")
    (built,) = Recording.built
    assert compiled == ["inductor"] and built["decoding"] == "eager"


def test_patient_given_to_summarize_or_the_tasks_patient_search_reaches_its_generator(hub, papers):
    document = [(s["name"], s["text"]) for s in papers[0]["sections"]]
    with torch.no_grad():
        hub.summarize([document], max_len_b=4)  # the task's --patient-search: off
        hub.summarize([document], max_len_b=4, patient=True)
        hub.task.cfg.patient_search = True
        hub.summarize([document], max_len_b=4)
        hub.summarize([document], max_len_b=4, patient=False)
    assert [built["patient"] for built in Recording.built] == [False, True, True, False]


def test_patient_search_is_the_tasks_flag(copy_task_dir):
    """--patient-search reaches the generator fairseq-generate builds; without it, fairseq's stop."""
    for flags, expected in (((), False), (("--patient-search",), True)):
        args, task, model = build_tiny(copy_task_dir, *flags)
        assert task.build_generator([model], args).patient is expected
