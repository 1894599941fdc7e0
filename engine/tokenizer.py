"""A checkpoint's tokenizer: HF `tokenizer.json` through the `tokenizers` library, plus its chat template.

Reads and writes the same files as HF (tokenizer.json, tokenizer_config.json, chat_template.jinja), offline.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tokenizers import Tokenizer as RustTokenizer
from tokenizers import decoders, models, pre_tokenizers, trainers

from dice_lsp.engine.config import read_json
from dice_lsp.engine.errors import EngineError

SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|MASK|>")  # SDAR-Chat's, in this order

# Qwen3's chat layout: <|im_start|>role\ncontent<|im_end|>\n per message, then the assistant's opening.
CHAT_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)


class Tokenizer:
    def __init__(self, inner: RustTokenizer, settings: dict[str, Any] | None = None, chat_template: str | None = None):
        self.inner = inner
        self.settings = dict(settings or {})  # tokenizer_config.json
        template = chat_template if chat_template is not None else self.settings.get("chat_template")
        if isinstance(template, list):  # HF allows a list of named templates; take the default one
            named = {t.get("name"): t.get("template") for t in template if isinstance(t, dict)}
            template = named.get("default") or next(iter(named.values()), None)
        self.chat_template: str | None = template or None

    @classmethod
    def from_dir(cls, directory: Path) -> Tokenizer:
        path = Path(directory) / "tokenizer.json"
        if not path.is_file():
            raise EngineError(f"{directory} has no tokenizer.json: copy it from the checkpoint it was trained with")
        try:
            inner = RustTokenizer.from_file(str(path))
        except Exception as error:  # the library raises a bare Exception on malformed files
            raise EngineError(f"{path} is not a valid tokenizers file: {error}") from None
        settings = read_json(Path(directory) / "tokenizer_config.json") or {}
        template_file = Path(directory) / "chat_template.jinja"
        template = template_file.read_text(encoding="utf-8") if template_file.is_file() else None
        return cls(inner, settings, template)

    @property
    def vocab_size(self) -> int:
        return self.inner.get_vocab_size(with_added_tokens=True)

    def encode(self, text: str) -> list[int]:
        """Token ids of `text`; special tokens written in it (`<|im_start|>`) become their ids."""
        return self.inner.encode(text, add_special_tokens=False).ids

    def decode(self, ids, skip_special_tokens: bool = False) -> str:
        return self.inner.decode(list(ids), skip_special_tokens=skip_special_tokens)

    def token_id(self, token: str) -> int | None:
        return self.inner.token_to_id(token)

    def save(self, directory: Path) -> None:
        directory = Path(directory)
        self.inner.save(str(directory / "tokenizer.json"))
        settings = dict(self.settings)
        if self.chat_template is not None:
            settings["chat_template"] = self.chat_template
        (directory / "tokenizer_config.json").write_text(json.dumps(settings, indent=2) + "\n", encoding="utf-8")


def train(texts, vocab_size: int, max_length: int = 4096) -> Tokenizer:
    """A byte-level BPE learned from `texts` (so any text still encodes), with SDAR-Chat's special tokens and a
    Qwen3 chat template: what a model trained from scratch on kernel code starts from."""
    if vocab_size < 256 + len(SPECIAL_TOKENS):
        raise EngineError(f"a byte-level tokenizer needs a vocabulary of at least {256 + len(SPECIAL_TOKENS)}")
    inner = RustTokenizer(models.BPE())
    inner.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    inner.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=list(SPECIAL_TOKENS),
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    inner.train_from_iterator(texts, trainer=trainer)
    settings = {
        "eos_token": "<|im_end|>",
        "pad_token": "<|endoftext|>",
        "mask_token": "<|MASK|>",
        "model_max_length": max_length,
        "tokenizer_class": "PreTrainedTokenizerFast",
    }
    return Tokenizer(inner, settings, CHAT_TEMPLATE)
