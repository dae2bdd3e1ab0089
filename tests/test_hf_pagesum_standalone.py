"""pagesum_plugin.hf runs where fairseq is not installed: a process in which ``import fairseq`` fails builds a
PageSum model, saves it as safetensors, loads it back (by its class and through the Auto classes), reads a raw
document into pages with PageSumProcessor and generates. Where transformers is older than the ``hf`` extra asks,
it refuses at import, in one line."""

import os
import subprocess
import sys
import textwrap

from builders.cli import REPO_ROOT
from pagesum_plugin.hf import REQUIRED

WITHOUT_FAIRSEQ = textwrap.dedent('''
    import importlib.abc, sys

    class NoFairseq(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name == "fairseq" or name.startswith("fairseq."):
                raise ImportError(f"{name} is not installed here")

    sys.meta_path.insert(0, NoFairseq())
''')

SCRIPT = WITHOUT_FAIRSEQ + textwrap.dedent('''
    import sys, tempfile
    import torch
    from transformers import AutoConfig, AutoModelForSeq2SeqLM
    import json
    from tokenizers import ByteLevelBPETokenizer
    from pagesum_plugin.hf import (PageSumConfig, PageSumForConditionalGeneration, PageSumProcessor, pad_pages,
                                   summary_lengths)

    try:
        import fairseq  # noqa: F401
        sys.exit("fairseq imported")
    except ImportError:
        pass
    torch.manual_seed(0)
    config = PageSumConfig(vocab_size=40, d_model=16, encoder_layers=1, decoder_layers=1, encoder_attention_heads=2,
                           decoder_attention_heads=2, encoder_ffn_dim=32, decoder_ffn_dim=32,
                           max_position_embeddings=32, label_smoothing=0.2)
    model = PageSumForConditionalGeneration(config).eval()
    torch.nn.init.normal_(model.model.page_confidence.weight)
    batch = pad_pages([[[0, 5, 6, 7, 2], [0, 8, 9, 2]], [[0, 10, 11, 12, 13, 2]]], config.pad_token_id)
    with tempfile.TemporaryDirectory() as directory:
        model.save_pretrained(directory)
        loaded = PageSumForConditionalGeneration.from_pretrained(directory).eval()
        auto = AutoModelForSeq2SeqLM.from_pretrained(directory).eval()
        assert AutoConfig.from_pretrained(directory).label_smoothing == 0.2
        import os
        assert "model.safetensors" in os.listdir(directory), os.listdir(directory)
    for other in (loaded, auto):
        assert type(other) is PageSumForConditionalGeneration
        for (name, value), (_, again) in zip(model.state_dict().items(), other.state_dict().items()):
            assert torch.equal(value, again), name
    summaries = [m.generate(input_ids=batch["input_ids"], num_beams=3, no_repeat_ngram_size=2, length_penalty=2.0,
                            **summary_lengths(2, 6)) for m in (model, auto)]
    assert torch.equal(summaries[0], summaries[1])
    assert summaries[0][:, 1].eq(config.bos_token_id).all()

    with tempfile.TemporaryDirectory() as directory:  # a byte-level BPE with BART's four specials first
        bpe = ByteLevelBPETokenizer()
        bpe.train_from_iterator(["Pages are read one by one. Each page is encoded on its own."] * 4, vocab_size=300,
                                special_tokens=["<s>", "<pad>", "</s>", "<unk>", "<mask>"])
        bpe.save_model(directory)  # vocab.json and merges.txt, as pagesum-convert to-hf writes them
        with open(os.path.join(directory, "tokenizer_config.json"), "w") as config_file:
            json.dump({"tokenizer_class": "BartTokenizer"}, config_file)
        processor = PageSumProcessor.from_pretrained(directory)
    pages = processor(["Pages are read one by one. Each page is encoded on its own. " * 6], num_pages=3)
    assert tuple(pages["input_ids"].shape[:2]) == (1, 3) and pages["input_ids"][0, :, 0].eq(0).all()
    print("ok", summaries[0].shape[1])
''')


def test_the_transformers_model_needs_no_fairseq(tmp_path):
    environment = dict(os.environ, PYTHONPATH=REPO_ROOT)
    done = subprocess.run([sys.executable, "-c", SCRIPT], cwd=tmp_path, env=environment, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().splitlines()[-1].startswith("ok")  # after the BPE trainer's progress lines


def test_a_transformers_older_than_the_hf_extra_asks_is_refused_at_import_in_one_line():
    """transformers 5.17 imports the model but fails at its first cross-attention, deep inside a forward pass."""
    older = "import transformers\ntransformers.__version__ = '5.17.0'\nimport pagesum_plugin.hf\n"
    done = subprocess.run([sys.executable, "-c", older], cwd=REPO_ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 1
    assert done.stderr.strip().splitlines()[-1] == \
        f"ImportError: pagesum_plugin.hf needs transformers{REQUIRED} (setup.py's hf extra): this environment has 5.17.0"
    assert REQUIRED is not None, "read from the installed package's metadata"
