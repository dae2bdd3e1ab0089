"""Regenerates the README's figures from the ACL papers that the ``aclsum`` package ships.

    pagesum-make-figures --out-dir docs/figures \\
        [--page-weights test.page_weights.jsonl --id 0] [--nsp-model bert-large-uncased/]

* ``locality.png`` (Fig. 1) and ``dependencies.png`` (Fig. 4) need nothing else;
* ``page_importance.png`` (Fig. 3) needs a page-weights file written by
  ``fairseq-generate ... --page-weights-output FILE`` for a model run on aclsum papers;
* ``coherence.png`` (Eq. 11) needs a local BERT next-sentence-prediction model.

A figure whose input is not given is skipped and reported, never faked. Each
figure's numbers are written beside it as JSON.
"""

import json
import os
from pathlib import Path

import aclsum

from pagesum_plugin.atomic import write_atomically
from pagesum_plugin.evaluation import plots
from pagesum_plugin.evaluation.arguments import plot_parser
from pagesum_recipes.arguments import figures_parser

PAPER_DIR = Path(aclsum.__file__).parent / "dataset" / "paper_jsons"


def _run(name: str, argv, out_dir: Path) -> None:
    png = out_dir / f"{name}.png"
    numbers = plots.run(plot_parser().parse_args([*argv, "--out", str(png)]))
    write_atomically(out_dir / f"{name}.json", json.dumps(numbers, indent=1) + "\n")
    print(f"wrote {png}")


def main(argv=None) -> int:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # every model it reads is local
    args = figures_parser().parse_args(argv)
    out_dir = Path(args.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    papers = ["--input", str(PAPER_DIR), "--input-format", "aclsum"]

    _run("locality", ["locality", *papers, "--max-docs", str(args.papers), "--max-sentences", "150",
                      "--max-distance", "40"], out_dir)
    _run("dependencies", ["dependencies", *papers], out_dir)
    if args.page_weights:
        _run("page_importance", ["page-importance", "--weights", args.page_weights, "--id", str(args.id)], out_dir)
    else:
        print("skipped page_importance.png: give --page-weights (from fairseq-generate --page-weights-output)")
    if args.nsp_model:
        _run("coherence", ["coherence", *papers, "--model", args.nsp_model], out_dir)
    else:
        print("skipped coherence.png: give --nsp-model (a local BERT next-sentence-prediction model)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
