"""The demo's data (``recipes/demo.sh``): the 250 ACL papers that the ``aclsum`` package ships,
split by file name, with the summary the demo learns; and the copying corpus its model reads
first. Both are JSON lines that ``pagesum-preprocess --input-format jsonl`` reads.

    pagesum-demo-data PAPERS COPY [--summary extract] [--max-pages 8]

writes

* ``PAPERS/{train,valid,test}.jsonl``: each paper's first ``--max-pages`` sections as read by
  pagesum's aclsum reader, without their headings (so that every page opens with its own
  first sentence), and the summary to learn;
* ``PAPERS/{train,valid,test}.abstract.txt``: each paper's abstract, one line a paper in the
  same order, which the demo scores against and prints beside its samples;
* ``COPY/{train,valid}.jsonl``: the copying corpus.

The summary (``--summary``) is ``extract`` (the default): the opening of the page that is most like
the abstract (ROUGE-1 + ROUGE-2 F1), an extractive summary that a model able to copy can learn in
minutes, by learning which page to read; or ``title``, or N: the abstract's first N sentences.

The copying corpus teaches a model from scratch to copy from its pages, with self-supervision
on the training papers' own text: one example per section, whose only page is that section and
whose summary is the section's opening, text the page itself starts with. A tiny transformer
learns that within a thousand updates; a model that can copy then writes its own paper's
sentences instead of the corpus's generic abstract.
"""

import json
import sys
from pathlib import Path
from typing import Dict, Iterator, List, Sequence, Tuple

import aclsum

from pagesum_plugin.corpus.readers import read_examples
from pagesum_plugin.corpus.sentences import split_sentences
from pagesum_plugin.evaluation.rouge import score_pair
from pagesum_recipes.arguments import DEMO_DATA, demo_data_parser

SPLITS = {"train": slice(0, 200), "valid": slice(200, 225), "test": slice(225, 250)}  # by sorted file name
COPY_SPLITS = ("train", "valid")  # the test papers' text is never trained on
OPENING_WORDS = 25  # a page's opening: its first sentences, at most this many words


def paper_paths() -> List[Path]:
    """The aclsum papers' S2ORC JSON files, sorted by name."""
    return sorted((Path(aclsum.__file__).parent / "dataset" / "paper_jsons").glob("*.json"))


def opening(text: str, max_words: int = OPENING_WORDS) -> str:
    """The opening sentences of ``text``, as many whole ones as fit in ``max_words`` words; the
    first sentence's first ``max_words`` words when it alone is longer."""
    taken: List[str] = []
    words = 0
    for sentence in split_sentences(text):
        n = len(sentence.split())
        if words + n > max_words:
            break
        taken.append(sentence)
        words += n
    return " ".join(taken) if taken else " ".join(text.split()[:max_words])


def extract(pages: Sequence[str], abstract: str) -> Tuple[int, str]:
    """The page whose opening is most like ``abstract`` (ROUGE-1 + ROUGE-2 F1; the first page
    on a tie), and that opening."""
    openings = [opening(page) for page in pages]
    scores = [score_pair(abstract, o) for o in openings]
    best = max(range(len(openings)), key=lambda i: (scores[i]["rouge1"] + scores[i]["rouge2"], -i))
    return best, openings[best]


def summary_of(pages: Sequence[str], abstract: str, title: str, summary: str) -> str:
    """What the demo learns to write for a paper: ``extract``, ``title`` or N (sentences)."""
    if summary == "extract":
        return extract(pages, abstract)[1]
    if summary == "title":
        return title.strip()
    if summary.isdigit() and int(summary) >= 1:
        return " ".join(split_sentences(abstract)[: int(summary)])
    raise ValueError(f"--summary must be extract, title or a number of sentences, got {summary!r}")


def read_paper(path: Path, max_pages: int) -> Tuple[str, str, List[str], str]:
    """(id, abstract, the texts of its first ``max_pages`` non-empty sections, title) of one paper."""
    paper = next(read_examples(path, "aclsum"))  # pagesum's own reader: the abstract, sections in order
    title = json.loads(path.read_text(encoding="utf-8"))["title"]
    pages = [unit.text for unit in paper.units if unit.text.strip()][:max_pages]
    return paper.id, " ".join(paper.summary.split()), pages, title


def copy_examples(paper_id: str, pages: Sequence[str]) -> Iterator[Dict]:
    """One copying example per page: the page alone, its opening the summary."""
    for i, page in enumerate(pages):
        yield {"id": f"{paper_id}#{i + 1}", "summary": opening(page), "sections": [{"name": "", "text": page}]}


def write(papers_dir: Path, copy_dir: Path, summary: str, max_pages: int) -> Dict[str, int]:
    """Write the papers' splits, their abstracts and the copying corpus; the examples of each."""
    paths = paper_paths()
    papers_dir.mkdir(parents=True, exist_ok=True)
    copy_dir.mkdir(parents=True, exist_ok=True)
    counts = {}
    for split, part in SPLITS.items():
        papers, abstracts, copies = [], [], []
        for path in paths[part]:
            paper_id, abstract, pages, title = read_paper(path, max_pages)
            papers.append({"id": paper_id, "summary": summary_of(pages, abstract, title, summary),
                           "sections": [{"name": "", "text": page} for page in pages]})
            abstracts.append(abstract)
            copies.extend(copy_examples(paper_id, pages))
        _write_lines(papers_dir / f"{split}.jsonl", [json.dumps(p) for p in papers])
        _write_lines(papers_dir / f"{split}.abstract.txt", abstracts)
        counts[split] = len(papers)
        if split in COPY_SPLITS:
            _write_lines(copy_dir / f"{split}.jsonl", [json.dumps(e) for e in copies])
            counts[f"copy {split}"] = len(copies)
    return counts


def _write_lines(path: Path, lines: Sequence[str]) -> None:
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")


def main(argv=None) -> int:
    args = demo_data_parser().parse_args(argv)
    if args.max_pages < 1:
        sys.exit(f"{DEMO_DATA}: --max-pages {args.max_pages}: must be at least 1")
    try:
        counts = write(args.papers, args.copy, args.summary, args.max_pages)
    except ValueError as error:
        sys.exit(f"{DEMO_DATA}: {error}")
    for name, count in counts.items():
        print(f"{name}: {count} examples")
    return 0


if __name__ == "__main__":
    sys.exit(main())
