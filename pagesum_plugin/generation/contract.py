"""What the generators ask of a model: the one interface between ``generation`` and ``models``.

Every model of this plugin that decodes offers ``SummaryModel``:

* ``mixes_pages`` (bool): its decoder returns the weights of its pages at every step in
  fairseq's ``extra["attn"]`` slot, (rows, tgt_len, pages), each row summing to 1 over the
  real pages; the generator reports them as each hypothesis's ``page_weights``. PageSum's
  pages and HED's documents do; HEPOS (one flat sequence) and AWESOME (one segment at a
  time) do not, and their hypotheses carry ``page_weights`` None.
* ``prunes_pages`` (bool): it can decode a subset of its pages (``--top-pages``), and then
  also offers ``PagePruningModel.keep_pages``. Only PageSum's page decoding can: its pages
  are decoded independently and mixed afterwards, so dropping one leaves the others as
  they were. HED's documents meet in every encoder layer, global decoding joins the pages
  into one sequence, and the other systems have no pages to drop.
* ``set_beam_size(beam)``: called before every search, beam 1 included.

The models do not import this module: they satisfy it by what they define, and
``tests/test_generation_contract.py`` checks every registered architecture against it.
"""

from typing import Dict, List, Protocol, Sequence, runtime_checkable

from fairseq.models import MODEL_REGISTRY
from torch import Tensor

from ..errors import SettingError


@runtime_checkable
class SummaryModel(Protocol):
    mixes_pages: bool
    prunes_pages: bool

    def set_beam_size(self, beam: int) -> None:
        ...


@runtime_checkable
class PagePruningModel(SummaryModel, Protocol):
    def keep_pages(self, encoder_out: Dict[str, List[Tensor]], kept: Tensor) -> Dict[str, List[Tensor]]:
        """The encoder output of only the pages ``kept`` (batch, k), as encoding just them gives it."""
        ...


def model_name(model) -> str:
    """The name ``model``'s class is registered under with fairseq (its class name if none)."""
    return next((name for name, cls in MODEL_REGISTRY.items() if cls is type(model)), type(model).__name__)


def check_models(models: Sequence, top_pages: int = 0) -> None:
    """Refuse, in one line, a model that does not offer ``SummaryModel``, or page pruning
    (``top_pages`` > 0) on a model that cannot decode a subset of its pages."""
    for model in models:
        if not isinstance(model, SummaryModel):
            missing = [name for name in ("mixes_pages", "prunes_pages", "set_beam_size") if not hasattr(model, name)]
            raise TypeError(f"the {model_name(model)} model cannot be decoded by the page generator: it does not "
                            f"define {', '.join(missing)} (see pagesum_plugin/generation/contract.py)")
        if top_pages > 0 and not (model.prunes_pages and isinstance(model, PagePruningModel)):
            raise SettingError(f"--top-pages {top_pages}: the {model_name(model)} model cannot decode a subset of its "
                               "pages (only PageSum with --page-decoding page can); decode without --top-pages")
