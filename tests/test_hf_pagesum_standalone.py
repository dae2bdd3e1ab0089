"""pagesum_plugin.hf runs where fairseq is not installed: a process in which ``import fairseq`` fails builds a
PageSum model, saves it as safetensors, loads it back (by its class and through the Auto classes) and generates."""

import os
import subprocess
import sys
import textwrap

from builders.cli import REPO_ROOT

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
    from pagesum_plugin.hf import PageSumConfig, PageSumForConditionalGeneration, pad_pages, summary_lengths

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
    print("ok", summaries[0].shape[1])
''')


def test_the_transformers_model_needs_no_fairseq(tmp_path):
    environment = dict(os.environ, PYTHONPATH=REPO_ROOT)
    done = subprocess.run([sys.executable, "-c", SCRIPT], cwd=tmp_path, env=environment, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.startswith("ok")
