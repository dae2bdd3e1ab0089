"""Throughput of ``pagesum-preprocess`` on synthetic arXiv-length documents.

Documents of about 8,000 GPT-2 tokens are assembled from the sentences of the real ACL
papers that the ``aclsum`` package ships, then written in the arXiv (Cohan et al.)
layout, which carries its own sentence segmentation, and in the generic ``jsonl``
layout with plain text, which goes through the offline sentence splitter.

Each row runs the whole command (read, split, tokenize, binarize) in a fresh process for 1
and 2 workers, alternating the code under test with ``--before REV`` (that commit of this
repository, exported with ``git archive``), and keeps the best of ``--repeat`` runs. It reports
documents/s and tokens/s of wall time, CPU seconds per document (the command and its
workers), and MB/s of document text, each document's text counted once (the arXiv layout
stores it twice). The last rows are the tokenizer alone on every sentence and summary, in one
call and one process: the ceiling of preprocessing, both as the command encodes (``encode_flat``:
GPT-2 pieces cut by a regex, each distinct piece encoded once) and with HF ``tokenizers`` on
every text whole. The table after it times sentence
splitting alone, in process, on the jsonl corpus's texts: NLTK's own Punkt with the same
parameters, ``--before``'s splitter and the new one, alternating, best of ``--repeat``.

With BART's real files pass ``--gpt2-dir`` (encoder.json, vocab.bpe, dict.txt);
otherwise a byte-level BPE of ``--bpe-vocab-size`` tokens is trained on the same text.
"""

import argparse
import importlib.util
import json
import logging
import os
import random
import tempfile
import time
from pathlib import Path
from typing import Callable

import aclsum
from tokenizers import ByteLevelBPETokenizer

from benchmarks.commands import export, exported, installed, timed
from pagesum_plugin.corpus.format import DICT_FILE, GPT2_ENCODER_FILE, GPT2_MERGES_FILE, CorpusMeta
from pagesum_plugin.corpus.readers import iter_records, parse_record
from pagesum_plugin.corpus.sentences import nltk_punkt_sentences, split_sentences
from pagesum_plugin.corpus.tokenizers import build_tokenizer

ENTRY = "pagesum_preprocess.cli:main"
PAPER_DIR = Path(aclsum.__file__).parent / "dataset" / "paper_jsons"
TOKENIZER_ALONE = {"tokenizer alone (encode_flat)": False, "HF tokenizers alone, whole texts": True}
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
    Path(vocab).replace(directory / GPT2_ENCODER_FILE)
    Path(merges).replace(directory / GPT2_MERGES_FILE)
    ids = sorted(json.loads((directory / GPT2_ENCODER_FILE).read_text()).values())
    (directory / DICT_FILE).write_text("".join(f"{i} 1\n" for i in ids))
    return directory


def measure(command: list[str], corpus: Path, input_format: str, gpt2_dir: Path, workers: int,
            destdir: Path) -> tuple[float, float]:
    """Wall seconds and CPU seconds (the process and its workers) of one run."""
    return timed(command + [
        "--input-format", input_format, "--trainpref", str(corpus), "--locality", "spatial", "--num-pages", "8",
        "--destdir", str(destdir), "--workers", str(workers), "--no-progress", "--tokenizer", "gpt2",
        "--gpt2-encoder-json", str(gpt2_dir / GPT2_ENCODER_FILE), "--gpt2-vocab-bpe", str(gpt2_dir / GPT2_MERGES_FILE),
        "--gpt2-dict", str(gpt2_dir / DICT_FILE)])


def tokenizer_alone(corpus: Path, input_format: str, gpt2_dir: Path, whole: bool) -> tuple[float, float]:
    """Wall and CPU seconds of the tokenizer alone on every sentence and summary of the corpus, in
    one call of a fresh tokenizer: ``encode_flat`` (its piece cache starting empty), or with
    ``whole`` HF ``tokenizers`` on every text whole (``encode_ids_whole``)."""
    texts = []
    for record in iter_records(corpus, input_format):
        example = parse_record(record, input_format)
        texts += [" " + sentence for unit in example.units for sentence in unit.sentence_list()]
        texts.append(" ".join(example.summary.split()))
    tokenizer = build_tokenizer("gpt2", encoder_json=gpt2_dir / GPT2_ENCODER_FILE,
                                vocab_bpe=gpt2_dir / GPT2_MERGES_FILE)
    encode = tokenizer.encode_ids_whole if whole else tokenizer.encode_flat
    start, cpu = time.perf_counter(), time.process_time()
    encode(texts)
    return time.perf_counter() - start, time.process_time() - cpu


def splitter_of(packages: Path) -> Callable[[str], list[str]]:
    """``split_sentences`` of an exported tree (``benchmarks.commands.export``), loaded on its own."""
    spec = importlib.util.spec_from_file_location("sentences_before", packages / "pagesum_plugin/corpus/sentences.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.split_sentences


def splitting_alone(corpus: Path, splitters: dict[str, Callable], repeat: int) -> dict[str, float]:
    """Best CPU seconds of each splitter on every unit text of a jsonl ``corpus``, alternating;
    every splitter must give the same sentences."""
    texts = [unit.text for record in iter_records(corpus, "jsonl") for unit in parse_record(record, "jsonl").units]
    best, sentences = {name: float("inf") for name in splitters}, {}
    for _ in range(repeat):
        for name, split in splitters.items():
            cpu = time.process_time()
            sentences[name] = [split(text) for text in texts]
            best[name] = min(best[name], time.process_time() - cpu)
    if len({json.dumps(s) for s in sentences.values()}) != 1:
        raise AssertionError(f"the splitters {list(splitters)} disagree")
    return best


def text_megabytes(documents: list[dict]) -> float:
    """Each document's text once: its sentences and its summary, UTF-8."""
    return sum(len(" ".join(s for _, sentences in doc["sections"] for s in sentences).encode()) +
               len(" ".join(doc["abstract"]).encode()) for doc in documents) / 1e6


def row(name: str, workers, documents: int, tokens: float, megabytes: float, wall: float, cpu: float,
        startup_cpu: float) -> str:
    """``startup_cpu``: the imports' CPU seconds, paid once per run, left out of the last two columns."""
    work = cpu - startup_cpu
    return (f"| {name} | {workers} | {wall:.2f} | {documents / wall:.1f} | {tokens / wall / 1e3:,.0f} | "
            f"{megabytes / wall:.2f} | {1e3 * cpu / documents:.1f} | {1e3 * work / documents:.1f} | "
            f"{documents / work:.1f} |")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--documents", type=int, default=200)
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--repeat", type=int, default=3, help="runs of each row; the best is kept")
    parser.add_argument("--before", metavar="REV", help="also run this commit's pagesum-preprocess, alternating")
    parser.add_argument("--gpt2-dir", type=Path, help="folder with BART's encoder.json, vocab.bpe, dict.txt")
    parser.add_argument("--bpe-vocab-size", type=int, default=16000)
    args = parser.parse_args()

    logging.disable(logging.INFO)  # keep the table readable
    body, abstracts = real_sentences()
    rng = random.Random(0)
    documents = [synthetic_document(rng, body, abstracts, i) for i in range(args.documents)]
    megabytes = text_megabytes(documents)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        corpora = write_corpus(tmp, documents)
        gpt2_dir = args.gpt2_dir or train_bpe(tmp, body + abstracts, args.bpe_vocab_size)
        codes, splitters = {}, {"NLTK's Punkt": nltk_punkt_sentences}
        if args.before:
            packages = export(args.before, tmp / "before")
            codes[args.before], splitters[args.before] = exported(packages, ENTRY), splitter_of(packages)
        codes["new"], splitters["new"] = installed(ENTRY), split_sentences
        measure(codes["new"], corpora["arxiv"], "arxiv", gpt2_dir, 1, tmp / "probe")  # warm-up: page cache
        stats = CorpusMeta.load(tmp / "probe").stats["train"]
        tokens = stats["source_tokens"]
        print(f"{args.documents} synthetic documents, {tokens / args.documents:.0f} source tokens each on average, "
              f"{megabytes / args.documents * 1e3:.1f} kB of text each; BPE: "
              f"{'BART' if args.gpt2_dir else f'{args.bpe_vocab_size}-token byte-level, trained here'}; "
              f"best of {args.repeat}, codes alternating; load average {os.getloadavg()[0]:.2f} at the start")
        startups = {code: min(timed(command + ["--help"]) for _ in range(args.repeat)) for code, command in codes.items()}
        for code, (wall, cpu) in startups.items():
            print(f"startup of {code} (--help, the imports): {wall:.2f} s wall, {cpu:.2f} s CPU")
        print("| input format, code | workers | seconds | documents/s | k tokens/s | MB/s | CPU ms per document | "
              "CPU ms per document, startup excluded | documents per CPU second, startup excluded |")
        print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
        for input_format, corpus in corpora.items():
            for workers in args.workers:
                best = {code: (float("inf"), float("inf")) for code in codes}
                for run in range(args.repeat):
                    for code, command in codes.items():
                        wall, cpu = measure(command, corpus, input_format, gpt2_dir, workers,
                                            tmp / f"out-{input_format}-{workers}-{code}-{run}")
                        best[code] = (min(best[code][0], wall), min(best[code][1], cpu))
                for code, (wall, cpu) in best.items():
                    print(row(f"{input_format}, {code}", workers, args.documents, tokens, megabytes, wall, cpu,
                              startups[code][1]), flush=True)
            for name, whole in TOKENIZER_ALONE.items():
                runs = [tokenizer_alone(corpus, input_format, gpt2_dir, whole) for _ in range(args.repeat)]
                wall, cpu = min(w for w, _ in runs), min(c for _, c in runs)
                print(row(f"{input_format}, {name}", 1, args.documents, tokens, megabytes, wall, cpu, 0.0),
                      flush=True)
        print("\n| sentence splitting alone, in process | CPU ms per document | documents per CPU second | "
              "CPU time against NLTK's Punkt |\n|---|---:|---:|---:|")
        split_cpu = splitting_alone(corpora["jsonl"], splitters, args.repeat)
        reference = split_cpu["NLTK's Punkt"]
        for name, cpu in split_cpu.items():
            print(f"| {name} | {1e3 * cpu / args.documents:.2f} | {args.documents / cpu:,.0f} | "
                  f"{cpu / reference:.3f} |")
        print(f"load average at the end: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
