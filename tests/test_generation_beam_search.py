"""Page-combined beam search: equal to fairseq's own search where they must agree."""


import pytest
import torch
from fairseq.ngram_repeat_block import NGramRepeatBlock

from builders.models import (
    assert_incremental_equals_full,
    bart_twin,
    build_tiny,
    make_source_sensitive,
    paged_batch,
    random_pages,
)
from builders.stock import assert_same_hypotheses, over_search_settings, stock_generate
from pagesum_plugin.generation.page_sequence_generator import PageSumSequenceGenerator
from pagesum_plugin.generation.ngram_blocking import ban_repeated_ngrams


def make_sample(page_lists, dictionary, max_pages=0):
    src = paged_batch(page_lists, dictionary, max_pages)
    return {"id": torch.arange(len(page_lists)), "net_input": {"src_tokens": src, "src_lengths": src.ne(dictionary.pad()).sum((1, 2))}}


@pytest.fixture(scope="module")
def tiny(copy_task_dir):
    return build_tiny(copy_task_dir)


@pytest.fixture(scope="module")
def sensitive(copy_task_dir):
    """A model whose summaries depend on the pages and end at different lengths."""
    _, task, model = build_tiny(copy_task_dir)
    return task, make_source_sensitive(model, task.dictionary)


def vocab(task):
    return task.dictionary.nspecial, len(task.dictionary) - 8


@over_search_settings
def test_one_page_equals_fairseq_stock_generator_on_bart(tiny, settings):
    args, task, model = tiny
    bart = bart_twin(args, task, model)
    rng = torch.Generator().manual_seed(11)
    pages = [random_pages(rng, 1, *vocab(task)) for _ in range(3)]
    sample = make_sample(pages, task.dictionary)
    ours = PageSumSequenceGenerator([model], task.dictionary, **settings).generate([model], sample)

    reference = stock_generate(bart, task.dictionary, sample["net_input"]["src_tokens"][:, 0], settings)
    assert_same_hypotheses(ours, reference)


def test_no_summary_repeats_an_ngram_when_blocking_is_on(tiny):
    _, task, model = tiny
    rng = torch.Generator().manual_seed(12)
    sample = make_sample([random_pages(rng, n, *vocab(task)) for n in (1, 3, 2, 4)], task.dictionary)

    def repeated_bigrams(generator):
        count = 0
        for hypos in generator.generate([model], sample):
            for hypo in hypos:
                toks = hypo["tokens"].tolist()
                bigrams = list(zip(toks, toks[1:]))
                count += len(bigrams) - len(set(bigrams))
        return count

    settings = dict(beam_size=4, min_len=30, max_len_b=40)
    assert repeated_bigrams(PageSumSequenceGenerator([model], task.dictionary, **settings)) > 0, "the probe must repeat"
    assert repeated_bigrams(PageSumSequenceGenerator([model], task.dictionary, no_repeat_ngram_size=2, **settings)) == 0


def test_vectorised_ngram_ban_equals_fairseq_loop():
    rng = torch.Generator().manual_seed(13)
    for n in (1, 2, 3, 4):
        history = torch.randint(4, 9, (6, 15), generator=rng)
        lprobs = torch.randn(6, 12, generator=rng)
        ours = ban_repeated_ngrams(history, lprobs.clone(), n)
        if n == 1:  # fairseq's loop has no 1-gram case; a 1-gram ban is "never repeat a token"
            expected = lprobs.clone().scatter(1, history, float("-inf"))
        else:
            blocker = NGramRepeatBlock(n, use_extension=False)
            expected = blocker._no_repeat_ngram(history, lprobs.clone(), 6, 1, history.size(1) - 1)
        assert torch.equal(ours, expected), n


def teacher_forced_scores(model, dictionary, sample, tokens):
    """log p(token_t | tokens_<t) of a full forward pass, for a hypothesis of one example."""
    prev = torch.cat([tokens.new_tensor([dictionary.eos()]), tokens[:-1]]).unsqueeze(0)
    logits, _ = model(sample["net_input"]["src_tokens"], None, prev)
    lprobs = torch.log_softmax(logits.float(), -1)[0]
    return lprobs.gather(1, tokens.unsqueeze(1)).squeeze(1)


def test_teacher_forced_log_probs_equal_reported_positional_scores(sensitive):
    task, model = sensitive
    dataset, sample = first_test_examples(task, 6)
    hypos = PageSumSequenceGenerator([model], task.dictionary, beam_size=4, max_len_b=30).generate([model], sample)
    for i, example_hypos in enumerate(hypos):
        single = {"net_input": {"src_tokens": sample["net_input"]["src_tokens"][i : i + 1]}}
        for hypo in example_hypos:
            expected = teacher_forced_scores(model, task.dictionary, single, hypo["tokens"])
            torch.testing.assert_close(hypo["positional_scores"], expected, atol=1e-4, rtol=0)
        assert example_hypos[0]["tokens"][0] == task.dictionary.bos(), "summaries start with <s>, as in training"


def test_incremental_decoding_equals_full_recomputation_at_every_step(sensitive):
    task, model = sensitive
    dataset, sample = first_test_examples(task, 4)
    src = sample["net_input"]["src_tokens"]
    prev = sample["net_input"]["prev_output_tokens"]  # (batch, tgt_len)
    assert_incremental_equals_full(model, src, prev, task.dictionary.pad())


def test_batched_decoding_with_different_page_counts_equals_one_at_a_time(sensitive):
    task, model = sensitive
    dataset = _load(task, "test")
    indices = list(range(8))
    assert len({len(dataset[i]["pages"]) for i in indices}) > 1
    generator = PageSumSequenceGenerator([model], task.dictionary, beam_size=3, max_len_b=30, no_repeat_ngram_size=3)
    batched = generator.generate([model], dataset.collater([dataset[i] for i in indices]))
    lengths = set()
    for i, hypos in zip(indices, batched):
        alone = generator.generate([model], dataset.collater([dataset[i]]))[0]
        for h, a in zip(hypos, alone):
            assert torch.equal(h["tokens"], a["tokens"])
            torch.testing.assert_close(h["positional_scores"], a["positional_scores"], atol=1e-4, rtol=0)
            torch.testing.assert_close(h["page_weights"], a["page_weights"], atol=1e-5, rtol=0)
        lengths.add(len(hypos[0]["tokens"]))
    # examples finished at different steps, so finished beams were pruned from the batch
    assert len(lengths) > 1


def test_page_weights_of_each_hypothesis_cover_its_real_pages_and_steps(sensitive):
    task, model = sensitive
    dataset, sample = first_test_examples(task, 5)
    hypos = PageSumSequenceGenerator([model], task.dictionary, beam_size=2, max_len_b=20).generate([model], sample)
    for i, example_hypos in enumerate(hypos):
        n_pages = len(dataset[int(sample["id"][i])]["pages"])
        weights = example_hypos[0]["page_weights"]
        assert weights.shape == (len(example_hypos[0]["tokens"]), n_pages)
        torch.testing.assert_close(weights.sum(1), torch.ones(weights.size(0)), atol=1e-5, rtol=0)


def test_greedy_search_equals_argmax_of_the_full_forward_mixture(sensitive):
    task, model = sensitive
    dataset = _load(task, "test")
    for i in range(4):
        sample = dataset.collater([dataset[i]])
        hypo = PageSumSequenceGenerator([model], task.dictionary, beam_size=1, max_len_b=25).generate([model], sample)[0][0]
        tokens = [task.dictionary.eos(), task.dictionary.bos()]
        while len(tokens) < len(hypo["tokens"]) + 1 and tokens[-1] != task.dictionary.eos() or len(tokens) == 2:
            logits, _ = model(sample["net_input"]["src_tokens"], None, torch.tensor([tokens]))
            lprobs = logits[0, -1].float()
            lprobs[task.dictionary.pad()] = float("-inf")
            lprobs[task.dictionary.bos()] = float("-inf")  # <s> only ever comes first
            if len(tokens) == 2:  # min_len 1: at least one summary token
                lprobs[task.dictionary.eos()] = float("-inf")
            tokens.append(int(lprobs.argmax()))
        assert tokens[1:] == hypo["tokens"].tolist()


def test_global_decoding_models_decode_with_the_same_generator(copy_task_dir):
    _, task, model = build_tiny(copy_task_dir, "--page-decoding", "global")
    rng = torch.Generator().manual_seed(14)
    sample = make_sample([random_pages(rng, n, *vocab(task)) for n in (1, 3)], task.dictionary)
    hypos = PageSumSequenceGenerator([model], task.dictionary, beam_size=2, max_len_b=8).generate([model], sample)
    assert all(len(h) == 2 for h in hypos)
    assert all(h[0]["page_weights"].shape[1] == 1 for h in hypos)


def test_top_pages_pruning_with_k_at_least_the_page_count_changes_nothing(sensitive):
    task, model = sensitive
    dataset, sample = first_test_examples(task, 6)
    max_pages = sample["net_input"]["src_tokens"].size(1)
    full = PageSumSequenceGenerator([model], task.dictionary, beam_size=2, max_len_b=20).generate([model], sample)
    pruned_all = PageSumSequenceGenerator([model], task.dictionary, beam_size=2, max_len_b=20, top_pages=max_pages)
    same = pruned_all.generate([model], sample)
    for a, b in zip(full, same):
        assert torch.equal(a[0]["tokens"], b[0]["tokens"])
    one = PageSumSequenceGenerator([model], task.dictionary, beam_size=2, max_len_b=20, top_pages=1).generate([model], sample)
    for hypos in one:  # with k=1 every step puts all weight on the one kept page
        weights = hypos[0]["page_weights"]
        assert int((weights.sum(0) > 0).sum()) == 1
        torch.testing.assert_close(weights.max(1).values, torch.ones(weights.size(0)), atol=1e-6, rtol=0)


def _load(task, split):
    if split not in task.datasets:
        task.load_dataset(split)
    return task.datasets[split]


def first_test_examples(task, n):
    """(dataset, batch of its first n examples)."""
    dataset = _load(task, "test")
    return dataset, dataset.collater([dataset[i] for i in range(n)])
