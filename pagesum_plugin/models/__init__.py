from .pagesum import PageSumModel  # noqa: F401
from .hed import HEDModel  # noqa: F401
