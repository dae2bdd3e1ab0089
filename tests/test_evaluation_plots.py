"""``pagesum-plot``: the numbers behind Fig. 1, Fig. 3, Fig. 4 and Eq. 11, on real papers."""

import collections
import itertools
import json

import numpy as np
import pytest
import torch

from builders.bert import write_tiny_nsp_bert
from builders.corpora import write_cohan
from pagesum_plugin.evaluation import analysis, plots
from pagesum_plugin.evaluation.data import iter_documents
from pagesum_plugin.evaluation.rouge import tokenize
from pagesum_plugin.corpus.sentences import split_sentences

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


PAPERS = (4, 60)  # the conftest fixtures papers, jsonl and paged read them


def _plot(capsys, *argv):
    assert plots.main([*argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out.strip().splitlines()[-1])


def _is_png(path):
    return open(path, "rb").read(8) == PNG_MAGIC


# --------------------------------------------------------------------------- Fig. 3


def _write_weights(path, rows):
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return str(path)


def test_page_importance_heatmap_shows_the_weights_of_the_requested_example(tmp_path, capsys):
    weights = [[0.7, 0.2, 0.1], [0.1, 0.8, 0.1], [0.0, 0.25, 0.75], [0.5, 0.5, 0.0]]  # (steps, pages)
    path = _write_weights(tmp_path / "w.jsonl", [
        {"id": 0, "hypothesis": "x", "tokens": ["x"], "page_weights": [[1.0, 0.0]]},
        {"id": 3, "hypothesis": "PageSum reads pages", "tokens": ["Page", "Sum", " reads", " pages"],
         "page_weights": weights},
    ])
    out = tmp_path / "fig3.png"
    numbers = _plot(capsys, "page-importance", "--weights", path, "--id", "3", "--out", str(out))
    assert numbers["steps"] == 4 and numbers["pages"] == 3
    assert numbers["mean_weight_per_page"] == pytest.approx([0.325, 0.4375, 0.2375])
    assert numbers["top_page_per_step"] == [1, 2, 3, 1]
    assert _is_png(out)


def test_page_importance_accepts_a_matrix_from_python(tmp_path):
    numbers = plots.plot_page_importance(np.array([[0.5, 0.5], [0.9, 0.1]]), None, str(tmp_path / "m.png"))
    assert numbers["top_page_per_step"] == [1, 1]


def _png_size(path):
    """(width, height) in pixels, from the PNG's header."""
    header = open(path, "rb").read(24)
    return int.from_bytes(header[16:20], "big"), int.from_bytes(header[20:24], "big")


def test_a_long_summary_gives_a_page_importance_plot_of_sane_size(tmp_path):
    rng = np.random.default_rng(0)
    matrix = rng.dirichlet(np.ones(8), size=160)  # 160 decoding steps over 8 pages
    out = tmp_path / "long.png"
    plots.plot_page_importance(matrix, [f"t{i}" for i in range(160)], str(out))
    width, height = _png_size(out)
    assert height <= 1200 and width <= 1200  # 8 inches at 150 dpi at most, not one row per step


def test_page_importance_colours_run_to_the_largest_weight_not_to_one(tmp_path):
    # A model's weights of 0.1-0.3 on a 0-1 scale are all pale: one flat colour to the eye.
    weights = np.array([[0.3, 0.2, 0.2, 0.1, 0.1, 0.1], [0.1, 0.3, 0.2, 0.2, 0.1, 0.1]])
    numbers = plots.plot_page_importance(weights, None, str(tmp_path / "pale.png"))
    assert numbers["colour_scale"] == pytest.approx([0.0, 0.3]) and numbers["uniform_weight"] == pytest.approx(1 / 6)


def test_page_importance_refuses_a_step_whose_weights_do_not_sum_to_one(tmp_path):
    with pytest.raises(ValueError, match="sum to 1"):
        plots.plot_page_importance(np.array([[0.5, 0.4]]), None, str(tmp_path / "bad.png"))


def _page_importance_of_bad_weights(tmp_path, example_id):
    """``pagesum-plot page-importance --id example_id`` on one example whose second step's
    weights sum to 1.2: the exit status."""
    path = _write_weights(tmp_path / "w.jsonl", [
        {"id": 0, "hypothesis": "a b", "tokens": ["a", "b"], "page_weights": [[0.5, 0.5], [0.9, 0.3]]},
    ])
    return plots.main(["page-importance", "--weights", path, "--id", example_id, "--out", str(tmp_path / "x.png")])


def test_a_bad_weights_row_is_reported_with_file_line_and_field(tmp_path, capsys):
    assert _page_importance_of_bad_weights(tmp_path, "0") == 2
    err = capsys.readouterr().err
    assert "w.jsonl, line 1, field 'page_weights'" in err


def test_an_id_not_in_the_weights_file_is_reported(tmp_path, capsys):
    assert _page_importance_of_bad_weights(tmp_path, "9") == 2
    assert "no hypothesis with id 9" in capsys.readouterr().err


# --------------------------------------------------------------------------- Fig. 1


@pytest.fixture(scope="module")
def encoder():
    model = analysis.minilm_encoder()
    cache = {}

    def encode(sentences):  # the tests recompute from the same embeddings; encode each text once
        missing = [s for s in dict.fromkeys(sentences) if s not in cache]
        if missing:
            cache.update(zip(missing, model(missing)))
        return np.stack([cache[s] for s in sentences])

    return encode


@pytest.mark.slow  # encodes real papers with the sentence-embedding model
def test_spatial_locality_neighbours_are_more_similar_than_the_average_pair(jsonl, encoder, tmp_path, capsys,
                                                                          monkeypatch):
    monkeypatch.setattr(analysis, "minilm_encoder", lambda device="cpu": encoder)
    out = tmp_path / "fig1.png"
    numbers = _plot(capsys, "locality", "--input", jsonl, "--max-docs", "2", "--max-sentences", "60",
                    "--max-distance", "10", "--out", str(out))
    assert _is_png(out) and numbers["documents"] == 2
    # The numbers behind the plot, recomputed pair by pair.
    sums, counts, all_pairs = collections.defaultdict(float), collections.Counter(), []
    for doc in itertools.islice(iter_documents(jsonl), 2):
        emb = encoder(doc.sentences[:60])
        for i, j in itertools.combinations(range(len(emb)), 2):
            cosine = float(emb[i] @ emb[j] / np.linalg.norm(emb[i]) / np.linalg.norm(emb[j]))
            all_pairs.append(cosine)
            if j - i <= 10:
                sums[j - i] += cosine
                counts[j - i] += 1
    assert numbers["distances"] == list(range(1, 11))
    assert numbers["pair_counts"] == [counts[d] for d in range(1, 11)]
    assert numbers["mean_similarity"] == pytest.approx([sums[d] / counts[d] for d in range(1, 11)], abs=1e-5)
    assert numbers["overall_mean"] == pytest.approx(np.mean(all_pairs), abs=1e-5)
    # The paper's finding holds on real text: adjacent sentences are the most similar.
    assert numbers["mean_similarity"][0] > numbers["overall_mean"] + 0.05
    assert numbers["mean_similarity"][0] == max(numbers["mean_similarity"])


def test_spatial_locality_reads_paged_data(paged, encoder):
    docs = list(itertools.islice(iter_documents(paged, "test"), 2))
    curve = analysis.locality_curve([d.sentences[:40] for d in docs], encoder, max_distance=5)
    assert curve.documents == 2 and curve.mean_similarity[0] > curve.overall_mean


# --------------------------------------------------------------------------- Fig. 4


def _recall(target, tokens, n):
    grams = collections.Counter(tuple(target[i:i + n]) for i in range(len(target) - n + 1))
    have = collections.Counter()
    for part in tokens:  # n-grams do not cross sentence boundaries
        have.update(tuple(part[i:i + n]) for i in range(len(part) - n + 1))
    return sum(min(c, have[g]) for g, c in grams.items()) / max(sum(grams.values()), 1)


def _rouge(target, *parts):
    return 50 * (_recall(target, parts, 1) + _recall(target, parts, 2))


def test_interdependent_pairs_follow_equations_14_to_16(papers):
    source = [s for sec in papers[0]["sections"] for s in split_sentences(sec["text"])]
    summary = split_sentences(papers[0]["summary"])
    found = analysis.interdependent_pairs(source, summary)
    assert found, "real abstracts contain fusion sentences"
    tokens = [tokenize(s) for s in source]
    for pair in found[:3]:  # brute force over every source pair
        target = tokenize(summary[pair.summary_sentence])
        best = max(itertools.combinations(range(len(source)), 2), key=lambda p: _rouge(target, tokens[p[0]], tokens[p[1]]))
        assert _rouge(target, tokens[best[0]], tokens[best[1]]) == pytest.approx(pair.rouge_pair)
        assert pair.rouge_first == pytest.approx(_rouge(target, tokens[pair.first]))
        assert min(pair.rouge_first, pair.rouge_second) > 20
        assert pair.rouge_pair - max(pair.rouge_first, pair.rouge_second) > 10
        assert pair.normalized_distance == pytest.approx((pair.second - pair.first) / len(source))


def test_dependency_histogram_counts_every_pair_on_jsonl_and_paged_data(jsonl, paged, tmp_path, capsys):
    for input_args in (["--input", jsonl], ["--input", paged, "--split", "test"]):
        out = tmp_path / "fig4.png"
        numbers = _plot(capsys, "dependencies", *input_args, "--out", str(out))
        expected = [p.normalized_distance for d in iter_documents(*input_args[1::2])
                    for p in analysis.interdependent_pairs(d.sentences, split_sentences(d.summary))]
        assert numbers["documents"] == 4 and numbers["pairs"] == len(expected) > 0
        assert numbers["counts"] == np.histogram(expected, bins=10, range=(0, 1))[0].tolist()
        assert _is_png(out)


def test_the_input_format_names_the_reader_of_the_input_file(papers, jsonl, tmp_path, capsys):
    arxiv = write_cohan(tmp_path / "test.txt", papers)
    from_arxiv = _plot(capsys, "dependencies", "--input", str(arxiv), "--input-format", "arxiv",
                       "--out", str(tmp_path / "arxiv.png"))
    from_jsonl = _plot(capsys, "dependencies", "--input", jsonl, "--out", str(tmp_path / "jsonl.png"))
    assert from_arxiv == from_jsonl and from_arxiv["pairs"] > 0


def _meets(pair, t1, t2):
    """Eq. 15 and Eq. 16."""
    return (min(pair.rouge_first, pair.rouge_second) > t1
            and pair.rouge_pair - max(pair.rouge_first, pair.rouge_second) > t2)


def test_stricter_thresholds_keep_fewer_pairs_and_only_pairs_that_meet_them(papers):
    source = [s for sec in papers[0]["sections"] for s in split_sentences(sec["text"])]
    summary = split_sentences(papers[0]["summary"])
    strict = analysis.interdependent_pairs(source, summary, t1=35, t2=17)
    assert 0 < len(strict) < len(analysis.interdependent_pairs(source, summary))
    assert all(_meets(pair, 35, 17) for pair in strict)


@pytest.fixture(scope="module")
def fusion_candidates(jsonl):
    """The best source pair of every summary sentence of the papers, before Eq. 15 and 16 filter them."""
    return [p for d in iter_documents(jsonl)
            for p in analysis.interdependent_pairs(d.sentences, split_sentences(d.summary), -np.inf, -np.inf)]


def _distances(candidates, t1=20.0, t2=10.0):
    return [p.normalized_distance for p in candidates if _meets(p, t1, t2)]


@pytest.mark.parametrize("flag, value, t1, t2", [("--t1", "25", 25.0, 10.0), ("--t2", "17", 20.0, 17.0)])
def test_each_dependency_threshold_decides_which_pairs_are_counted(flag, value, t1, t2, jsonl, fusion_candidates,
                                                                   tmp_path, capsys):
    numbers = _plot(capsys, "dependencies", "--input", jsonl, flag, value, "--out", str(tmp_path / "fig4.png"))
    kept = _distances(fusion_candidates, t1, t2)
    assert numbers["pairs"] == len(kept) < len(_distances(fusion_candidates))
    assert numbers["counts"] == np.histogram(kept, bins=10, range=(0, 1))[0].tolist()


def test_the_dependency_histogram_has_the_requested_number_of_bins(jsonl, fusion_candidates, tmp_path, capsys):
    numbers = _plot(capsys, "dependencies", "--input", jsonl, "--bins", "4", "--out", str(tmp_path / "fig4.png"))
    assert numbers["bin_edges"] == [0.0, 0.25, 0.5, 0.75, 1.0]
    assert numbers["counts"] == np.histogram(_distances(fusion_candidates), bins=4, range=(0, 1))[0].tolist()


# --------------------------------------------------------------------------- Eq. 11


@pytest.fixture(scope="module")
def tiny_bert(tmp_path_factory, papers):
    return write_tiny_nsp_bert(tmp_path_factory.mktemp("tiny_bert"), [p["summary"] for p in papers])


def _is_next_probability(model_dir, first, second):
    """One pair at a time, without padding: the reference for the batched scorer."""
    from transformers import AutoTokenizer, BertForNextSentencePrediction  # optional (the hf extra), as above

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = BertForNextSentencePrediction.from_pretrained(model_dir).eval()
    with torch.no_grad():
        logits = model(**tokenizer(first, second, return_tensors="pt")).logits[0]
    return float(torch.softmax(logits, dim=-1)[0])


def test_coherence_is_the_mean_next_sentence_probability_of_each_summary(tiny_bert, papers, tmp_path, capsys):
    hyp = tmp_path / "hyp.txt"
    hyp.write_text(" ".join(papers[0]["summary"].split()) + "\nOne sentence only.\n")
    out = tmp_path / "coherence.png"
    numbers = _plot(capsys, "coherence", "--model", tiny_bert, "--hyp", str(hyp), "--out", str(out))
    assert numbers["scored"] == 1 and numbers["too_short"] == 1 and numbers["scores"][1] is None
    sentences = split_sentences(papers[0]["summary"])
    expected = np.mean([_is_next_probability(tiny_bert, a, b) for a, b in zip(sentences, sentences[1:])])
    assert numbers["scores"][0] == pytest.approx(expected, abs=1e-5)
    assert numbers["mean"] == pytest.approx(expected, abs=1e-5) and _is_png(out)


def test_coherence_of_reference_summaries_is_the_same_from_jsonl_and_paged_data(tiny_bert, jsonl, paged, tmp_path,
                                                                                capsys):
    out = tmp_path / "coherence.png"
    # Reference summaries of jsonl files and of paged data score the same abstracts.
    from_jsonl = _plot(capsys, "coherence", "--model", tiny_bert, "--input", jsonl, "--out", str(out))
    from_paged = _plot(capsys, "coherence", "--model", tiny_bert, "--input", paged, "--split", "test",
                       "--out", str(out))
    assert from_jsonl["scored"] == 4
    assert from_jsonl["scores"] == pytest.approx(from_paged["scores"], abs=1e-5)


def test_device_reaches_the_model_of_locality_and_of_coherence(tiny_bert, jsonl, tmp_path, capsys, monkeypatch):
    """The models are stood in for, so that a device this machine lacks can be named."""
    asked, scorer = [], analysis.NextSentenceScorer

    def encoder(device="cpu"):
        asked.append(("locality", device))
        return lambda sentences: np.random.RandomState(len(sentences)).randn(len(sentences), 8).astype(np.float32)

    def next_sentence_scorer(model_dir, device="cpu"):
        asked.append(("coherence", device))
        return scorer(model_dir, "cpu")

    monkeypatch.setattr(analysis, "minilm_encoder", encoder)
    monkeypatch.setattr(analysis, "NextSentenceScorer", next_sentence_scorer)
    out = str(tmp_path / "plot.png")
    _plot(capsys, "locality", "--input", jsonl, "--max-docs", "1", "--out", out, "--device", "cuda:3")
    _plot(capsys, "coherence", "--model", tiny_bert, "--input", jsonl, "--out", out, "--device", "cuda:3")
    assert asked == [("locality", "cuda:3"), ("coherence", "cuda:3")]


def test_coherence_without_a_model_directory_is_a_clear_error(tmp_path, jsonl, capsys):
    assert plots.main(["coherence", "--model", str(tmp_path / "none"), "--input", jsonl,
                       "--out", str(tmp_path / "c.png")]) == 2
    assert "not a directory with a BERT" in capsys.readouterr().err
