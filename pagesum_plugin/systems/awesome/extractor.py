"""AWESOME's salient-sentence extractor (Appendix D of the AWESOME paper).

Every sentence is encoded on its own by BART's encoder and represented by the mean of
its final-layer states; a self-attention layer (with its residual and layer norm) lets
the sentence vectors of a document see one another; a multi-layer perceptron with one
hidden layer turns each into an extraction score (a logit). It is trained on the
greedy-oracle labels of the ``salient_extraction`` task, fine-tuned from BART
(``--finetune-from-model bart.large/model.pt``: the decoder is dropped, the head is new).

Inputs: ``src_tokens`` (n_sentences, sent_len), every sentence of the batch packed in
document order, and ``sentence_counts`` (batch,). Output: logits (batch, max_sentences)
and the padding mask (batch, max_sentences), True where a document has no sentence.
"""

import logging
from typing import Tuple

import torch
import torch.nn as nn
from torch import Tensor

from fairseq import utils
from fairseq.models import FairseqEncoderModel, register_model, register_model_architecture
from fairseq.models.bart import BARTModel
from fairseq.models.bart.model import bart_base_architecture, bart_large_architecture
from fairseq.models.transformer import TransformerEncoder
from fairseq.modules import LayerNorm, MultiheadAttention

from ..bart.arguments import bart_dimensions
from ...modules.page_mixing import unpack_pages

logger = logging.getLogger(__name__)

HEAD_PREFIX = "head."
ENCODE_CHUNK = 512  # sentences encoded at once when no gradient is needed


class SentenceScorer(nn.Module):
    """Self-attention over a document's sentence vectors, then MLP(d -> d -> 1)."""

    def __init__(self, embed_dim: int, heads: int, hidden_dim: int, dropout: float, attention_dropout: float,
                 activation_fn: str):
        super().__init__()
        self.self_attn = MultiheadAttention(embed_dim, heads, dropout=attention_dropout, self_attention=True)
        self.self_attn_layer_norm = LayerNorm(embed_dim)
        self.dropout = nn.Dropout(dropout)
        self.hidden = nn.Linear(embed_dim, hidden_dim)
        self.activation_fn = utils.get_activation_fn(activation_fn)
        self.out = nn.Linear(hidden_dim, 1)

    def forward(self, sentences: Tensor, padding: Tensor) -> Tensor:
        """sentences: (batch, n, dim); padding: (batch, n) bool -> logits (batch, n)."""
        x = sentences.transpose(0, 1)  # (n, batch, dim)
        attended, _ = self.self_attn(query=x, key=x, value=x, key_padding_mask=padding, need_weights=False)
        x = self.self_attn_layer_norm(x + self.dropout(attended)).transpose(0, 1)  # (batch, n, dim)
        hidden = self.dropout(self.activation_fn(self.hidden(x)))
        return self.out(hidden).squeeze(-1)


@register_model("awesome_extractor")
class SalientExtractorModel(FairseqEncoderModel):
    def __init__(self, args, encoder: TransformerEncoder, head: SentenceScorer):
        super().__init__(encoder)
        self.args = args
        self.head = head

    @staticmethod
    def add_args(parser):
        BARTModel.add_args(parser)
        parser.add_argument("--extractor-hidden-dim", type=int, metavar="N", help="hidden units of the scoring MLP")

    @classmethod
    def build_model(cls, args, task):
        dictionary = task.source_dictionary
        embed_tokens = nn.Embedding(len(dictionary), args.encoder_embed_dim, dictionary.pad())
        nn.init.normal_(embed_tokens.weight, mean=0, std=args.encoder_embed_dim ** -0.5)
        nn.init.constant_(embed_tokens.weight[dictionary.pad()], 0)
        encoder = TransformerEncoder(args, dictionary, embed_tokens)
        head = SentenceScorer(args.encoder_embed_dim, args.encoder_attention_heads, args.extractor_hidden_dim,
                              args.dropout, args.attention_dropout, args.activation_fn)
        return cls(args, encoder, head)

    def sentence_vectors(self, src_tokens: Tensor) -> Tensor:
        """(n_sentences, sent_len) -> (n_sentences, dim): mean of the final states of each
        sentence's tokens (padding excluded)."""
        chunks = [src_tokens] if torch.is_grad_enabled() else src_tokens.split(ENCODE_CHUNK)
        vectors = []
        for chunk in chunks:
            chunk = chunk[:, : int(chunk.ne(self.encoder.padding_idx).sum(1).max())]
            states = self.encoder(chunk)["encoder_out"][0].transpose(0, 1)  # (n, len, dim)
            keep = chunk.ne(self.encoder.padding_idx).unsqueeze(-1).type_as(states)  # (n, len, 1)
            vectors.append((states * keep).sum(1) / keep.sum(1))
        return torch.cat(vectors)

    def forward(self, src_tokens: Tensor, sentence_counts: Tensor, **unused) -> Tuple[Tensor, Tensor]:
        vectors = self.sentence_vectors(src_tokens)  # (n_sentences, dim)
        max_sentences = int(sentence_counts.max())
        dense = unpack_pages(vectors, sentence_counts, max_sentences, fill=0.0)  # (batch, n, dim)
        padding = torch.arange(max_sentences, device=dense.device)[None, :] >= sentence_counts[:, None]
        return self.head(dense, padding), padding

    def max_positions(self):
        return self.encoder.max_positions()

    def upgrade_state_dict_named(self, state_dict, name):
        """A BART checkpoint: keep its encoder, drop its decoder (and the <mask> row of the
        embeddings, as BART does for fine-tuning), and start the head fresh."""
        super().upgrade_state_dict_named(state_dict, name)
        prefix = name + "." if name != "" else ""
        decoder_keys = [k for k in state_dict if k.startswith(prefix + "decoder.")]
        for key in decoder_keys:
            del state_dict[key]
        embeddings = prefix + "encoder.embed_tokens.weight"
        dictionary = self.encoder.dictionary
        if embeddings in state_dict and state_dict[embeddings].size(0) == len(dictionary) + 1 \
                and "<mask>" not in dictionary:
            state_dict[embeddings] = state_dict[embeddings][:-1]
        fresh = self.state_dict()
        missing = [k for k in fresh if k.startswith(HEAD_PREFIX) and prefix + k not in state_dict]
        if missing:
            logger.info("initializing the extractor's sentence scorer fresh (not in the checkpoint)")
            for key in missing:
                state_dict[prefix + key] = fresh[key].clone()


def _extractor_defaults(args):
    args.extractor_hidden_dim = getattr(args, "extractor_hidden_dim", None) or args.encoder_embed_dim


@register_model_architecture("awesome_extractor", "awesome_extractor_bart_large")
def awesome_extractor_bart_large(args):
    bart_dimensions(args, "bart_large")
    bart_large_architecture(args)
    _extractor_defaults(args)


@register_model_architecture("awesome_extractor", "awesome_extractor_bart_base")
def awesome_extractor_bart_base(args):
    bart_dimensions(args, "bart_base")
    bart_base_architecture(args)
    _extractor_defaults(args)


@register_model_architecture("awesome_extractor", "awesome_extractor_tiny")
def awesome_extractor_tiny(args):
    bart_dimensions(args, "tiny")
    awesome_extractor_bart_base(args)
