"""A word vocabulary for the task's instructions and a tokenizer that pads to a fixed length.

The instructions come from one template ("put the <colour> block in the box"), so a word
vocabulary of a dozen entries covers them; a subword tokenizer would buy nothing here.
Index 0 is the padding token (masked out of attention), index 1 the unknown-word token.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence

import numpy as np
import torch

PAD = "<pad>"
UNK = "<unk>"
PAD_ID = 0
UNK_ID = 1
COLOURS = ("red", "green", "blue", "yellow", "purple", "orange")
TEMPLATE = "put the {colour} block in the box"

_log = logging.getLogger(__name__)


def split_words(text: str) -> list[str]:
    """Lower-case and split on whitespace (the whole normalisation the tokenizer applies)."""
    return text.lower().split()


def build_vocab(instructions: Iterable[str]) -> tuple[str, ...]:
    """Vocabulary from example instructions: (PAD, UNK, words in order of first appearance)."""
    words: list[str] = [PAD, UNK]
    seen = set(words)
    for text in instructions:
        for word in split_words(text):
            if word not in seen:
                seen.add(word)
                words.append(word)
    return tuple(words)


def default_vocab() -> tuple[str, ...]:
    """The vocabulary of the pick-and-place task: the template filled with the six colours."""
    return build_vocab(TEMPLATE.format(colour=c) for c in COLOURS)


def validate_vocab(vocab: Sequence[str]) -> None:
    """Raise ValueError unless vocab starts with (PAD, UNK) and holds unique lower-case words."""
    if len(vocab) < 2 or vocab[0] != PAD or vocab[1] != UNK:
        raise ValueError(f"vocab must start with ({PAD!r}, {UNK!r}), got {list(vocab[:2])!r}")
    if len(set(vocab)) != len(vocab):
        dupes = sorted({w for w in vocab if list(vocab).count(w) > 1})
        raise ValueError(f"vocab has duplicate words {dupes!r}")
    for word in vocab[2:]:
        if not isinstance(word, str) or not word or word != word.lower() or len(word.split()) != 1:
            raise ValueError(f"vocab word {word!r} must be one non-empty lower-case word")


class InstructionTokenizer:
    """Maps instructions to fixed-length id arrays plus a mask (True = real token)."""

    def __init__(self, vocab: Sequence[str], max_tokens: int):
        validate_vocab(vocab)
        if max_tokens < 1:
            raise ValueError(f"max_tokens={max_tokens} must be >= 1")
        self.vocab = tuple(vocab)
        self.max_tokens = max_tokens
        self._index = {w: i for i, w in enumerate(self.vocab)}

    def encode(self, text: str) -> tuple[np.ndarray, np.ndarray]:
        """One instruction -> (ids (L,) int64, mask (L,) bool). Unknown words map to UNK.

        Instructions longer than L are truncated (with a warning): the policy then sees the
        first L words, which is what a fixed-size token budget can hold.
        """
        words = split_words(text)
        if len(words) > self.max_tokens:
            _log.warning("instruction %r has %d words; keeping the first %d",
                         text, len(words), self.max_tokens)
            words = words[: self.max_tokens]
        ids = np.full(self.max_tokens, PAD_ID, dtype=np.int64)
        mask = np.zeros(self.max_tokens, dtype=bool)
        for i, word in enumerate(words):
            ids[i] = self._index.get(word, UNK_ID)
            mask[i] = True
        return ids, mask

    def encode_batch(self, texts: Sequence[str]) -> tuple[torch.Tensor, torch.Tensor]:
        """Instructions -> (ids (B, L) long, mask (B, L) bool) tensors."""
        pairs = [self.encode(t) for t in texts]
        ids = np.stack([p[0] for p in pairs]) if pairs else np.zeros((0, self.max_tokens), np.int64)
        mask = np.stack([p[1] for p in pairs]) if pairs else np.zeros((0, self.max_tokens), bool)
        return torch.from_numpy(ids), torch.from_numpy(mask)

    def decode(self, ids: Sequence[int]) -> str:
        """Ids back to words, padding dropped (for logs and tests)."""
        return " ".join(self.vocab[int(i)] for i in ids if int(i) != PAD_ID)
