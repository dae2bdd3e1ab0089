"""Throughput of ``pagesum-preprocess`` on synthetic arXiv-length documents.

Documents of about 8,000 GPT-2 tokens are assembled from the sentences of the real ACL
papers that the ``aclsum`` package ships, then written in the arXiv (Cohan et al.)
layout, which carries its own sentence segmentation, and in the generic ``jsonl``
layout with plain text, which goes through the offline sentence splitter.
The whole command runs (read, page, tokenize, binarize) for 1 and 2 workers, and the
table reports documents per second and MB of input per second.

With BART's real files pass ``--gpt2-dir`` (encoder.json, vocab.bpe, dict.txt);
otherwise a byte-level BPE of ``--bpe-vocab-size`` tokens is trained on the same text.
"""

import argparse
import json
import logging
import random
import tempfile
import time
from pathlib import Path

import aclsum
from tokenizers import ByteLevelBPETokenizer

from pagesum_plugin.corpus.format import CorpusMeta
from pagesum_plugin.corpus.sentences import split_sentences
from pagesum_preprocess.cli import main as preprocess_main

PAPER_DIR = Path(aclsum.__file__).parent / "dataset" / "paper_jsons"
WORDS_PER_DOCUMENT = 6000  # about 8,000 GPT-2 tokens of scientific English
SECTIONS_PER_DOCUMENT = 8


def real_sentences() -> tuple[list[str], list[str]]:
    """Body sentences and abstract sentences of the aclsum papers."""
    body, abstracts = [], []
    for path in sorted(PAPER_DIR.glob("*.json")):
        paper = json.loads(path.read_text(encoding="utf-8"))
        abstracts += split_sentences(paper["abstract"])
        for paragraph in paper["pdf_parse"]["body_text"]:
            body += split_sentences(paragraph["text"])
    return body, abstracts


def synthetic_document(rng: random.Random, body: list[str], abstracts: list[str], index: int) -> dict:
    sections, words = [], 0
    per_section = WORDS_PER_DOCUMENT // SECTIONS_PER_DOCUMENT
    for s in range(SECTIONS_PER_DOCUMENT):
        start, sentences, count = rng.randrange(len(body)), [], 0
        while count < per_section:
            sentence = body[(start + len(sentences)) % len(body)]
            sentences.append(sentence)
            count += len(sentence.split())
        sections.append((f"section {s + 1}", sentences))
        words += count
    abstract = abstracts[rng.randrange(len(abstracts) - 8):][:8]
    return {"id": f"doc{index}", "sections": sections, "abstract": abstract}


def write_corpus(directory: Path, documents: list[dict]) -> dict[str, Path]:
    arxiv, generic = directory / "arxiv.txt", directory / "generic.jsonl"
    with open(arxiv, "w", encoding="utf-8") as a, open(generic, "w", encoding="utf-8") as g:
        for doc in documents:
            a.write(json.dumps({
                "article_id": doc["id"],
                "article_text": [s for _, sentences in doc["sections"] for s in sentences],
                "abstract_text": [f"<S> {s} </S>" for s in doc["abstract"]],
                "section_names": [name for name, _ in doc["sections"]],
                "sections": [sentences for _, sentences in doc["sections"]],
            }) + "\n")
            text = "\n\n".join(" ".join(sentences) for _, sentences in doc["sections"])
            g.write(json.dumps({"id": doc["id"], "summary": " ".join(doc["abstract"]), "text": text}) + "\n")
    return {"arxiv": arxiv, "jsonl": generic}


def train_bpe(directory: Path, texts: list[str], vocab_size: int) -> Path:
    """encoder.json, vocab.bpe and a dict.txt listing every id, as BART ships them."""
    bpe = ByteLevelBPETokenizer(add_prefix_space=False)
    bpe.train_from_iterator(texts, vocab_size=vocab_size, show_progress=False)
    vocab, merges = bpe.save_model(str(directory))
    Path(vocab).replace(directory / "encoder.json")
    Path(merges).replace(directory / "vocab.bpe")
    ids = sorted(json.loads((directory / "encoder.json").read_text()).values())
    (directory / "dict.txt").write_text("".join(f"{i} 1\n" for i in ids))
    return directory


def measure(corpus: Path, input_format: str, gpt2_dir: Path, workers: int, destdir: Path) -> float:
    args = ["--input-format", input_format, "--trainpref", str(corpus), "--locality", "spatial",
            "--num-pages", "8", "--destdir", str(destdir), "--workers", str(workers), "--no-progress",
            "--tokenizer", "gpt2", "--gpt2-encoder-json", str(gpt2_dir / "encoder.json"),
            "--gpt2-vocab-bpe", str(gpt2_dir / "vocab.bpe"), "--gpt2-dict", str(gpt2_dir / "dict.txt")]
    start = time.perf_counter()
    if preprocess_main(args) != 0:
        raise RuntimeError("pagesum-preprocess failed")
    return time.perf_counter() - start


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--documents", type=int, default=200)
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--gpt2-dir", type=Path, help="folder with BART's encoder.json, vocab.bpe, dict.txt")
    parser.add_argument("--bpe-vocab-size", type=int, default=16000)
    args = parser.parse_args()

    logging.disable(logging.INFO)  # keep the table readable
    body, abstracts = real_sentences()
    rng = random.Random(0)
    documents = [synthetic_document(rng, body, abstracts, i) for i in range(args.documents)]
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        corpora = write_corpus(tmp, documents)
        gpt2_dir = args.gpt2_dir or train_bpe(tmp, body + abstracts, args.bpe_vocab_size)
        measure(corpora["arxiv"], "arxiv", gpt2_dir, 1, tmp / "probe")  # warm-up: imports, page cache
        stats = CorpusMeta.load(tmp / "probe").stats["train"]
        tokens = stats["source_tokens"] / stats["examples"]
        print(f"{args.documents} synthetic documents, {tokens:.0f} source tokens each on average, "
              f"BPE: {'BART' if args.gpt2_dir else f'{args.bpe_vocab_size}-token byte-level, trained here'}")
        print("| input format | workers | seconds | documents/s | MB/s |")
        print("|---|---:|---:|---:|---:|")
        for input_format, corpus in corpora.items():
            megabytes = corpus.stat().st_size / 1e6
            for workers in args.workers:
                seconds = measure(corpus, input_format, gpt2_dir, workers, tmp / f"out-{input_format}-{workers}")
                print(f"| {input_format} | {workers} | {seconds:.1f} | {args.documents / seconds:.1f} | "
                      f"{megabytes / seconds:.2f} |", flush=True)


if __name__ == "__main__":
    main()
