from .pagesum import PageSumModel  # noqa: F401
from .hed import HEDModel  # noqa: F401
from .hepos import HeposModel  # noqa: F401
