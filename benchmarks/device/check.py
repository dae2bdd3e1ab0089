"""After the kit's install: the versions the GPU machine runs, as one JSON line, and a refusal
if torch came from the wheelhouse (``python -m benchmarks.device.check SITE``) rather than
from the machine's own installation. transformers is reported, not required: a carried one that
needs a newer package than the machine has fails to import, and the kit then falls back to the
machine's own (``kit.install``)."""

import json
import os
import sys

import fairseq
import numpy
import torch

import pagesum_plugin

try:  # optional here: reported, not required; its BART model too, which transformers imports when first asked for
    import transformers
    from transformers import BartForConditionalGeneration  # noqa: F401
except ImportError as error:  # e.g. a carried transformers that needs a newer huggingface-hub
    transformers, TRANSFORMERS_ERROR = None, " ".join(str(error).split())
else:
    TRANSFORMERS_ERROR = None


def where(module) -> str:
    return os.path.dirname(os.path.realpath(module.__file__))


def main(site: str) -> None:
    origin = {name: where(module) for name, module in (("torch", torch), ("fairseq", fairseq),
                                                        ("pagesum_plugin", pagesum_plugin))}
    if origin["torch"].startswith(os.path.realpath(site)):
        raise SystemExit(f"torch was imported from the wheelhouse's {site}: the machine's own CUDA torch must stay")
    versions = {"python": sys.version.split()[0], "torch": torch.__version__, "cuda": torch.version.cuda,
                "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
                "fairseq": fairseq.__version__, "numpy": numpy.__version__}
    if transformers is None:
        versions.update(transformers=None, transformers_error=TRANSFORMERS_ERROR)
    else:
        versions["transformers"] = transformers.__version__
        origin["transformers"] = where(transformers)
    print(json.dumps({**versions, "from": origin}))


if __name__ == "__main__":
    main(sys.argv[1])
