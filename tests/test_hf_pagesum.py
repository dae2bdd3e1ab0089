"""pagesum_plugin.hf: PageSum as a transformers model computes what the fairseq model computes, from the same
weights: its logits and page weights, its summaries under transformers' generate(), its training loss and
gradients."""

import pytest
import torch
from transformers import Seq2SeqTrainer, Seq2SeqTrainingArguments

from builders.models import (assert_gradients_close, build_tiny, decoder_input, make_source_sensitive, paged_batch,
                             random_pages, vocab)
from pagesum_plugin.checkpoints.convert import pagesum_hf_model
from pagesum_plugin.checkpoints.hf_weights import fairseq_state_to_pagesum_hf
from pagesum_plugin.generation.page_sequence_generator import PageSumSequenceGenerator
from pagesum_plugin.hf import PageSumCollator, PageSumForConditionalGeneration, summary_lengths

pytestmark = pytest.mark.usefixtures("one_thread")

PAD = 1


@pytest.fixture(scope="module")
def twins(copy_task_dir):
    """(fairseq PageSum model, the transformers model with its weights, the task's dictionary), eval mode."""
    args, task, model = build_tiny(copy_task_dir, "--label-smoothing", "0.1")
    model = make_source_sensitive(model, task.dictionary)  # summaries of different lengths
    hf = pagesum_hf_model(args, model.state_dict(), {"label_smoothing": 0.1}).eval()
    return model, hf, task.dictionary


def documents(dictionary, n, pages, seed=0, max_len=12):
    """``n`` examples of 1..``pages`` random pages of content ids (the first with ``pages``)."""
    rng = torch.Generator().manual_seed(seed)
    low, high = vocab(dictionary)
    counts = [pages] + [int(torch.randint(1, pages + 1, (1,), generator=rng)) for _ in range(n - 1)]
    return [random_pages(rng, count, low, high, max_len=max_len) for count in counts]


# ---- one forward pass -----------------------------------------------------------------------------------------

@pytest.mark.parametrize("pages", [1, 7])
def test_the_same_weights_give_the_fairseq_models_logits_and_page_weights(twins, pages):
    model, hf, dictionary = twins
    src = paged_batch(documents(dictionary, 4, pages), dictionary)  # (4, pages, page_len), missing pages padding
    summaries = [[5, 6, 7, 8, 9], [10, 11], [12, 13, 14], [15]]
    _, prev = decoder_input(summaries, dictionary)  # (4, tgt_len): </s> <s> summary, right-padded
    with torch.no_grad():
        expected, extra = model(src, None, prev)
        out = hf(input_ids=src, attention_mask=src.ne(PAD), decoder_input_ids=prev, output_page_weights=True)
    real = prev.ne(PAD)  # (4, tgt_len)
    torch.testing.assert_close(out.logits[real], expected[real], atol=1e-5, rtol=0)
    weights = out.page_weights.transpose(1, 2)[real]  # (real positions, pages)
    torch.testing.assert_close(weights, extra["page_weights"].transpose(1, 2)[real], atol=1e-5, rtol=0)
    if pages > 1:
        assert weights.max() > 0.6, "the confidences tell the pages apart"
        assert (out.page_weights[1:].sum(-1) == 0).any(), "some examples have fewer pages, weighted exactly 0"


def test_a_page_mask_leaves_the_masked_pages_out(twins):
    model, hf, dictionary = twins
    examples = documents(dictionary, 1, 3, seed=4)
    src = paged_batch(examples, dictionary)  # (1, 3, page_len)
    _, prev = decoder_input([[5, 6, 7]], dictionary)
    masked = src.ne(PAD)
    masked[:, 2] = False  # the third page is masked out
    with torch.no_grad():
        alone = hf(input_ids=paged_batch([examples[0][:2]], dictionary), decoder_input_ids=prev).logits
        out = hf(input_ids=src, attention_mask=masked, decoder_input_ids=prev, output_page_weights=True)
    torch.testing.assert_close(out.logits, alone, atol=1e-5, rtol=0)
    assert torch.equal(out.page_weights[:, 2], torch.zeros_like(out.page_weights[:, 2]))


# ---- generate() -----------------------------------------------------------------------------------------------

BASE = dict(beam=4, lenpen=2.0, no_repeat_ngram_size=0, min_len=1, max_len_b=20)
# every setting, with a value that changes the plugin's summaries of DOCUMENTS (checked below): a generate() that
# ignored it would fail
SETTINGS = {"lenpen": 0.0, "no_repeat_ngram_size": 2, "min_len": 12, "max_len_b": 3, "beam": 1}


def plugin_summaries(model, dictionary, src, beam, lenpen, no_repeat_ngram_size, min_len, max_len_b):
    """The plugin's best summary of every example, ``<s> ... </s>``, and its page weights (steps, pages)."""
    generator = PageSumSequenceGenerator([model], dictionary, beam_size=beam, len_penalty=lenpen,
                                         no_repeat_ngram_size=no_repeat_ngram_size, min_len=min_len,
                                         max_len_b=max_len_b)
    sample = {"id": torch.arange(src.size(0)), "net_input": {"src_tokens": src, "src_lengths": src.ne(PAD).sum((1, 2))}}
    return [(hypos[0]["tokens"], hypos[0]["page_weights"]) for hypos in generator.generate([model], sample)]


def transformers_summaries(hf, src, beam, lenpen, no_repeat_ngram_size, min_len, max_len_b):
    """generate()'s summaries, the decoder start left out, and the page weights of their steps."""
    sequences = hf.generate(input_ids=src, num_beams=beam, length_penalty=lenpen, early_stopping=True,
                            no_repeat_ngram_size=no_repeat_ngram_size, do_sample=False,
                            **summary_lengths(min_len, max_len_b))  # (batch, 1 + steps), padded
    weights = hf.summary_page_weights(sequences, input_ids=src)  # (batch, steps, pages)
    lengths = sequences[:, 1:].ne(PAD).sum(1)
    return [(sequences[i, 1: 1 + n], weights[i, :n]) for i, n in enumerate(lengths.tolist())]


@pytest.fixture(scope="module")
def batches(twins):
    """24 documents of 1 to 7 pages, in batches of 8 (padding pages and all)."""
    _, _, dictionary = twins
    return [paged_batch(documents(dictionary, 8, 7, seed=10 + b), dictionary) for b in range(3)]


@pytest.mark.parametrize("setting", [None, *SETTINGS])
def test_generate_gives_the_plugins_summaries_and_page_weights(twins, batches, setting):
    model, hf, dictionary = twins
    settings = dict(BASE, **({setting: SETTINGS[setting]} if setting else {}))
    changed = False
    for src in batches:
        ours = plugin_summaries(model, dictionary, src, **settings)
        theirs = transformers_summaries(hf, src, **settings)
        for (tokens, weights), (hf_tokens, hf_weights) in zip(ours, theirs):
            assert hf_tokens.tolist() == tokens.tolist()
            torch.testing.assert_close(hf_weights[:, : weights.size(1)], weights, atol=1e-5, rtol=0)
        if setting:
            base = plugin_summaries(model, dictionary, src, **BASE)
            changed |= any(a.tolist() != b.tolist() for (a, _), (b, _) in zip(ours, base))
    assert changed or not setting, f"{setting}={SETTINGS.get(setting)} changes no summary: the case cannot tell"


@pytest.mark.parametrize("beam", [1, 4])
def test_a_static_cache_gives_the_summaries_and_scores_of_the_dynamic_one(twins, batches, beam):
    """transformers' static cache (`cache_implementation="static"`), its cross-attention half a page long."""
    _, hf, _ = twins
    settings = dict(num_beams=beam, do_sample=False, output_scores=True, return_dict_in_generate=True,
                    **summary_lengths(1, 20))
    for src in batches:
        dynamic = hf.generate(input_ids=src, **settings)
        static = hf.generate(input_ids=src, cache_implementation="static", **settings)
        assert torch.equal(static.sequences, dynamic.sequences)
        torch.testing.assert_close(torch.stack(static.scores), torch.stack(dynamic.scores), atol=1e-5, rtol=0)


def test_with_a_static_cache_the_forward_compiles_whole_and_its_graphs_serve_every_step_and_search(twins, batches,
                                                                                                 monkeypatch):
    """What generate() compiles on a GPU when the cache is static (its forward, `fullgraph=True`): one graph for the
    first step, which fills the cross-attention cache, and one for every later step, of this search and the next."""
    _, hf, _ = twins
    graphs = []

    def counting(graph, example_inputs):
        graphs.append(graph)
        return graph.forward

    greedy = dict(num_beams=1, do_sample=False, **summary_lengths(1, 20))
    src = batches[0]
    expected = hf.generate(input_ids=src, **greedy)
    torch._dynamo.reset()
    monkeypatch.setattr(hf, "forward", torch.compile(hf.forward, fullgraph=True, dynamic=False, backend=counting))
    for _ in range(2):
        assert torch.equal(hf.generate(input_ids=src, cache_implementation="static", **greedy), expected)
    assert len(graphs) == 2 and expected.size(1) > 3


# ---- training -------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("chunk", [0, 2], ids=["whole logits", "two summary tokens at a time"])
def test_the_loss_and_its_gradients_are_the_fairseq_criterions(copy_task_dir, monkeypatch, chunk):
    """In training mode the loss is taken ``loss_chunk_tokens`` summary tokens at a time, as the
    plugin's criterion takes it: no projection onto the vocabulary sees more rows, and no logits
    come back; 0 takes the whole logits."""
    args, task, model = build_tiny(copy_task_dir, "--label-smoothing", "0.1")
    criterion = task.build_criterion(args)
    hf = pagesum_hf_model(args, model.state_dict(), {"label_smoothing": 0.1, "loss_chunk_tokens": chunk})
    model.train(), hf.train()  # dropout 0: the same computation as in eval mode, with training's code paths
    dictionary = task.dictionary
    src = paged_batch(documents(dictionary, 3, 7, seed=2), dictionary)
    target, prev = decoder_input([[5, 6, 7, 8], [9, 10], [11, 12, 13]], dictionary)
    ntokens = int(target.ne(PAD).sum())
    sample = {"net_input": {"src_tokens": src, "src_lengths": src.ne(PAD).sum((1, 2)), "prev_output_tokens": prev},
              "target": target, "ntokens": ntokens}
    loss, sample_size, _ = criterion(model, sample)
    loss.backward()
    projected, linear = [], torch.nn.functional.linear  # the token rows of every projection onto the vocabulary
    monkeypatch.setattr(torch.nn.functional, "linear", lambda x, w, *rest: (
        projected.append(x.shape[:-1].numel()) if w is hf.lm_head.weight else None) or linear(x, w, *rest))
    out = hf(input_ids=src, attention_mask=src.ne(PAD), labels=target.masked_fill(target.eq(PAD), -100))
    out.loss.backward()

    assert (out.logits is None) == (chunk > 0)
    assert max(projected) == (chunk or target.numel()) and sum(projected) == target.numel()
    assert sample_size == ntokens
    torch.testing.assert_close(out.loss * ntokens, loss, atol=1e-4, rtol=1e-6)
    # fairseq's trainer divides the summed loss's gradients by the sample size; the model's loss is a mean
    fairseq_grads = fairseq_state_to_pagesum_hf({name: p.grad / ntokens for name, p in model.named_parameters()})
    hf_grads = {name: p.grad for name, p in hf.named_parameters()}
    assert_gradients_close(hf_grads, {name: fairseq_grads[name] for name in hf_grads})


@pytest.mark.parametrize("chunk", [0, 2], ids=["whole logits", "two summary tokens at a time"])
def test_the_training_forward_compiles_whole_and_gives_the_eager_loss_and_gradients(copy_task_dir, chunk):
    """What `Seq2SeqTrainer(torch_compile=True)` compiles, the forward with labels, with `fullgraph=True` (no break:
    the check that every example has a page asserts on the device instead of reading it back)."""
    args, task, model = build_tiny(copy_task_dir, "--label-smoothing", "0.1")
    hf = pagesum_hf_model(args, model.state_dict(), {"label_smoothing": 0.1, "loss_chunk_tokens": chunk}).train()
    src = paged_batch(documents(task.dictionary, 3, 7, seed=2), task.dictionary)
    target, _ = decoder_input([[5, 6, 7, 8], [9, 10], [11, 12, 13]], task.dictionary)
    labels = target.masked_fill(target.eq(PAD), -100)
    results = []
    torch._dynamo.reset()
    for forward in (hf.forward, torch.compile(hf.forward, fullgraph=True, backend="aot_eager")):
        hf.zero_grad()
        loss = forward(input_ids=src, labels=labels).loss
        loss.backward()
        results.append((loss.detach(), {name: p.grad.clone() for name, p in hf.named_parameters()}))
    (eager_loss, eager_grads), (loss, grads) = results
    torch.testing.assert_close(loss, eager_loss, atol=1e-6, rtol=1e-6)
    assert_gradients_close(grads, eager_grads)


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_an_example_without_a_page_is_refused_in_one_line(twins, compiled):
    _, hf, dictionary = twins
    src = paged_batch(documents(dictionary, 2, 3, seed=1), dictionary)
    src[1] = PAD  # the second example has no token
    torch._dynamo.reset()
    forward = torch.compile(hf.forward, fullgraph=True, backend="eager") if compiled else hf.forward
    with pytest.raises(RuntimeError if compiled else ValueError, match="every example needs at least one page"):
        forward(input_ids=src, decoder_input_ids=decoder_input([[5, 6], [7, 8]], dictionary)[1])


def test_evaluation_and_fp16_take_the_whole_logits_and_return_them(twins):
    """Chunks are for training: an evaluation pass returns the logits its metrics read, and under
    an fp16 autocast the chunks' gradients, taken before the loss is scaled, would underflow."""
    _, hf, dictionary = twins
    src = paged_batch(documents(dictionary, 2, 3, seed=3), dictionary)
    labels, _ = decoder_input([[5, 6, 7], [8, 9]], dictionary)
    labels = labels.masked_fill(labels.eq(PAD), -100)
    assert hf.config.loss_chunk_tokens > 0
    try:
        assert hf.eval()(input_ids=src, labels=labels).logits is not None
        assert hf.train()(input_ids=src, labels=labels).logits is None
        with torch.autocast("cpu", dtype=torch.float16):
            assert hf(input_ids=src, labels=labels).logits is not None
    finally:
        hf.eval()


def test_label_smoothing_comes_from_the_config(twins):
    _, hf, dictionary = twins
    src = paged_batch(documents(dictionary, 2, 3, seed=3), dictionary)
    labels, _ = decoder_input([[5, 6, 7], [8, 9]], dictionary)
    labels = labels.masked_fill(labels.eq(PAD), -100)
    losses = {}
    with torch.no_grad():
        for smoothing in (0.1, 0.0):
            hf.config.label_smoothing = smoothing
            out = hf(input_ids=src, labels=labels)
            losses[smoothing], logits = out.loss, out.logits.transpose(1, 2)  # (batch, vocab, tgt_len)
    hf.config.label_smoothing = 0.1
    # fairseq spreads epsilon over the other tokens, torch over all of them: eps * V / (V - 1) in torch's terms
    size = logits.size(1)
    for smoothing, loss in losses.items():
        expected = torch.nn.functional.cross_entropy(logits, labels, label_smoothing=smoothing * size / (size - 1))
        torch.testing.assert_close(loss, expected)
    assert losses[0.1] != losses[0.0]


def test_one_seq2seq_trainer_step_trains_the_model(twins, tmp_path):
    _, hf, dictionary = twins
    model = PageSumForConditionalGeneration(hf.config)
    model.load_state_dict(hf.state_dict())
    rng = torch.Generator().manual_seed(5)
    low, high = vocab(dictionary)
    features = [{"pages": [[0, *page, 2] for page in random_pages(rng, n, low, high)],
                 "labels": [0, *random_pages(rng, 1, low, high)[0], 2]} for n in (1, 3, 2, 4)]
    arguments = Seq2SeqTrainingArguments(output_dir=str(tmp_path), per_device_train_batch_size=4, max_steps=1,
                                         learning_rate=1e-3, use_cpu=True, report_to=[], save_strategy="no",
                                         remove_unused_columns=False, logging_steps=1)
    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    trainer = Seq2SeqTrainer(model=model, args=arguments, train_dataset=features,
                             data_collator=PageSumCollator(dictionary.pad()))
    result = trainer.train()
    assert result.global_step == 1 and result.training_loss > 0
    changed = {name for name, p in model.named_parameters() if not torch.equal(p, before[name])}
    assert {"model.page_confidence.weight", "model.shared.weight", "model.encoder.layers.0.fc1.weight"} <= changed
    assert model.lm_head.weight is model.model.shared.weight  # tied, as in BART and the fairseq model
