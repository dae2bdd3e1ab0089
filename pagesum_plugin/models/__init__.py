from .pagesum import PageSumModel  # noqa: F401
from .hed import HEDModel  # noqa: F401
from .hepos import HeposModel  # noqa: F401
from . import awesome, extractor  # noqa: F401  (AWESOME and its salient-sentence extractor)
