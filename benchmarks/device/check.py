"""After the kit's install: the versions the GPU machine runs, as one JSON line, and a refusal
if torch came from the wheelhouse (``python -m benchmarks.device.check SITE``) rather than
from the machine's own installation."""

import json
import os
import sys

import fairseq
import numpy
import torch

import pagesum_plugin


def main(site: str) -> None:
    origin = {name: os.path.dirname(os.path.realpath(module.__file__))
              for name, module in (("torch", torch), ("fairseq", fairseq), ("pagesum_plugin", pagesum_plugin))}
    if origin["torch"].startswith(os.path.realpath(site)):
        raise SystemExit(f"torch was imported from the wheelhouse's {site}: the machine's own CUDA torch must stay")
    print(json.dumps({"python": sys.version.split()[0], "torch": torch.__version__, "cuda": torch.version.cuda,
                      "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
                      "fairseq": fairseq.__version__, "numpy": numpy.__version__, "from": origin}))


if __name__ == "__main__":
    main(sys.argv[1])
