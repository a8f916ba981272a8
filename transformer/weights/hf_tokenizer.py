"""The run's tokenizer beside its Hugging Face GPT-2 export (`--mode=export`, hf_gpt2.py).

The id contract. A run whose tokenizer is another library's (`data.tokenizer=hf:` or `gpt2:`,
or a nanoGPT / llm.c token file, `tokenizer: ids` included) sees that tokenizer's id `i` as
`i + 3`; 0, 1, 2 are our pad, BOS and EOS (`transformer.data.tokenizers._ShiftedTokenizer`).
Its `id_offset` is 3. Export drops embedding rows 0..2, so the exported row `i` is the
tokenizer's id `i` and `vocab_size` in config.json is the tokenizer's own; import
(`model.init_from=hf:DIR` into such a run) puts 3 rows back in front (hf_gpt2.from_gpt2). Runs
with `bytes` or `sentencepiece` keep every row (their ids are this project's own: `bytes` is
byte + 3, SentencePiece models trained here have pad/bos/eos = 0/1/2): `id_offset` 0.

Files written beside model.safetensors:
  hf:    `tokenizer.json`, copied as it is;
  gpt2:  `vocab.json` + `merges.txt` (GPT-2's Hugging Face files, what `GPT2Tokenizer` reads),
         converted from tiktoken's ranks (`ranks_to_bpe`), and the `tokenizer.json` they make;
  both:  `tokenizer_config.json` naming `PreTrainedTokenizerFast`, so that
         `AutoTokenizer.from_pretrained(D)` reads `tokenizer.json`.
bytes, sentencepiece and `ids` token files have no Hugging Face tokenizer: nothing is written
and the export's output line says what the ids mean (`ids_meaning`).

Import checks a folder's `tokenizer.json` against the run's tokenizer before it takes the
folder's embedding rows (`check_folder_tokenizer`): the same file, or the same ids for a probe
text; another tokenizer is refused in one line.
"""

from __future__ import annotations

import json
import os
from typing import Callable

from transformer import paths
from transformer.errors import ConfigError, RunError

TOKENIZER_FILE = "tokenizer.json"
TOKENIZER_CONFIG = "tokenizer_config.json"
VOCAB_FILE, MERGES_FILE = "vocab.json", "merges.txt"
END_OF_TEXT = "<|endoftext|>"


def id_offset(tokenizer) -> int:
  """3 for a tokenizer whose ids are another library's shifted up (hf:, gpt2:, a foreign
  token file's `ids`), 0 for one whose ids are this project's own (bytes, sentencepiece)."""
  from transformer.data.foreign_tokens import IdsTokenizer
  from transformer.data.tokenizers import HFTokenizer, TiktokenTokenizer
  if isinstance(tokenizer, (HFTokenizer, TiktokenTokenizer, IdsTokenizer)):
    return int(tokenizer.offset)
  return 0


def ids_meaning(tokenizer) -> str:
  """One sentence: what the exported ids mean, for a run whose tokenizer is not written."""
  from transformer.data.tokenizers import ByteTokenizer
  if isinstance(tokenizer, ByteTokenizer):
    return ("no Hugging Face tokenizer for data.tokenizer=bytes: id = UTF-8 byte + 3, "
            "0 = pad, 1 = BOS, 2 = EOS")
  if id_offset(tokenizer):  # a foreign token file without its tokenizer
    return ("no tokenizer file (the run's token files named none): ids are the token files' "
            "own")
  return (f"no Hugging Face tokenizer for SentencePiece: ids are those of {tokenizer.path} "
          "(0 = pad, 1 = BOS, 2 = EOS, 3 = unk)")


# The text import encodes with both tokenizers (`check_folder_tokenizer`): code, prose, every
# printable ASCII character, accents, CJK and an emoji, so that two BPEs of one size differ.
PROBE = ("def f(x):\n\treturn x  # naïve café, 日本語 🙂\n\n  end\n"
         "The quick brown fox jumps over the lazy dog; import os, sys\n"
         "for i in range(10):\n    print(i, self.value, {'key': [1, 2.5]})\n"
         + "".join(chr(c) for c in range(32, 127)))


def check_folder_tokenizer(directory: str, tokenizer, what: str) -> None:
  """A one-line ConfigError, before any tensor is read, when the Hugging Face folder
  `directory` has a `tokenizer.json` that is not `tokenizer` (the run's): neither the same
  file (sha256) nor the same ids for `PROBE` (ours minus `id_offset`). Passes when there is
  nothing to compare: no tokenizer.json there, or a run whose tokenizer reads no text (ids)."""
  path = os.path.join(directory, TOKENIZER_FILE)
  if not os.path.isfile(path):
    return
  contents = _read_bytes(path)
  own = getattr(tokenizer, "path", None)
  if own and os.path.isfile(own) and _read_bytes(own) == contents:  # the same file
    return
  try:
    ours = [i - id_offset(tokenizer) for i in tokenizer.encode(PROBE)]
  except ConfigError:  # a token file's ids without their text: nothing to compare
    return
  theirs = _folder_ids(path, contents, what)
  if theirs == ours:
    return
  at = next((k for k, (a, b) in enumerate(zip(theirs, ours)) if a != b),
            min(len(theirs), len(ours)))
  there, here = (ids[at] if at < len(ids) else "none" for ids in (theirs, ours))
  raise ConfigError(
      f"{what}='hf:{directory}': its {path} is not this run's tokenizer "
      f"({own or type(tokenizer).__name__}): they encode a probe text differently (token {at}: "
      f"id {there} there, {here} here), so its embedding rows stand for other tokens. Train "
      f"with --config.data.tokenizer=hf:{path}, or import a folder exported with this run's "
      "tokenizer.")


def _folder_ids(path: str, contents: bytes, what: str) -> list[int]:
  """The ids the folder's tokenizer.json gives `PROBE` (its special tokens spelled out are
  text, as for our hf: tokenizers)."""
  try:
    from tokenizers import Tokenizer
  except ImportError:
    raise ConfigError(f"{what}: {path} is compared with this run's tokenizer by the "
                      "`tokenizers` package, which is not installed: pip install -e "
                      "\".[tokenizers]\".") from None
  try:
    tok = Tokenizer.from_buffer(contents)
  except Exception as e:  # noqa: BLE001 -- the library raises plain Exceptions
    raise ConfigError(f"{what}: {path} is not a readable tokenizer.json "
                      f"({str(e).splitlines()[0][:200]}), so it cannot be compared with this "
                      "run's tokenizer; put back the folder's own (--mode=export writes "
                      "it).") from None
  tok.no_padding()
  tok.no_truncation()
  tok.encode_special_tokens = True
  return tok.encode(PROBE, add_special_tokens=False).ids


def byte_to_unicode() -> dict[int, str]:
  """GPT-2's byte-level alphabet: the printable character that stands for each byte."""
  from transformer.data.tokenizers import byte_level_alphabet
  return {b: c for c, b in byte_level_alphabet().items()}


def ranks_to_bpe(ranks: dict[bytes, int]) -> tuple[dict[str, int], list[tuple[str, str]]]:
  """tiktoken's `{token bytes: rank}` -> Hugging Face's byte-level BPE `(vocab, merges)`.

  vocab: each token spelled in GPT-2's byte alphabet -> its rank. merges: for each token of
  two or more bytes, in rank order, the pair of tokens tiktoken's BPE joins last when it
  builds that token (run the BPE on the token's bytes using only ranks below its own: it
  stops at exactly two parts). Hugging Face's BPE applies merges in list order, tiktoken
  joins the lowest-ranked pair, so the two encode alike. A ranks file that no BPE made (a
  token not reachable as two lower-ranked tokens) raises ValueError.
  """
  alphabet = byte_to_unicode()
  spell = lambda b: "".join(alphabet[x] for x in b)
  merges = []
  for token, rank in sorted(ranks.items(), key=lambda kv: kv[1]):
    if len(token) == 1:
      continue
    parts = _bpe(ranks, token, rank)
    if len(parts) != 2:
      raise ValueError(f"rank {rank} ({token!r}) is not the merge of two lower-ranked tokens")
    merges.append((spell(parts[0]), spell(parts[1])))
  return {spell(t): r for t, r in ranks.items()}, merges


def _bpe(ranks: dict[bytes, int], token: bytes, below: int) -> list[bytes]:
  """tiktoken's BPE on `token`'s bytes, joining only pairs whose rank is below `below`."""
  parts = [bytes([b]) for b in token]
  while len(parts) > 1:
    pair_ranks = [ranks.get(a + b, below) for a, b in zip(parts, parts[1:])]
    best = min(range(len(pair_ranks)), key=pair_ranks.__getitem__)
    if pair_ranks[best] >= below:
      break
    parts[best:best + 2] = [parts[best] + parts[best + 1]]
  return parts


def bpe_tokenizer_json(vocab: dict[str, int], merges: list[tuple[str, str]],
                       end_of_text: int | None) -> str:
  """The `tokenizer.json` of a GPT-2 style byte-level BPE (`tokenizers` builds it)."""
  from tokenizers import Tokenizer, decoders, models, pre_tokenizers
  from tokenizers import AddedToken
  vocab = dict(vocab)
  if end_of_text is not None:
    vocab[END_OF_TEXT] = end_of_text
  tok = Tokenizer(models.BPE(vocab, merges))
  tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
  tok.decoder = decoders.ByteLevel()
  if end_of_text is not None:
    tok.add_special_tokens([AddedToken(END_OF_TEXT, special=True, normalized=False)])
  return tok.to_str()


def write_tokenizer(tokenizer, export_dir: str, max_len: int) -> tuple[list[str], dict[str, int]]:
  """Writes the Hugging Face files of an hf: or gpt2: `tokenizer` into `export_dir` (none for
  others); returns `(paths written, {"bos_token_id": i, "eos_token_id": i})`, the ids being
  `<|endoftext|>`'s when the tokenizer has it (GPT-2: 50256), else empty. Each file is written
  whole or not at all (`transformer.paths`' atomic writers)."""
  from transformer.data.tokenizers import HFTokenizer, TiktokenTokenizer
  files: dict[str, Callable[[], bytes]] = {}  # name -> its contents
  if isinstance(tokenizer, HFTokenizer):
    end = tokenizer._tok.token_to_id(END_OF_TEXT)  # noqa: SLF001
    files[TOKENIZER_FILE] = lambda: _read_bytes(tokenizer.path)
  elif isinstance(tokenizer, TiktokenTokenizer):
    end = len(tokenizer.ranks)  # TiktokenTokenizer's <|endoftext|>
    try:
      vocab, merges = ranks_to_bpe(tokenizer.ranks)
    except ValueError as e:
      raise RunError(f"{tokenizer.path}: cannot be written as Hugging Face BPE files ({e}); "
                     "export a run trained with hf:<tokenizer.json> instead.") from None
    with_end = {**vocab, END_OF_TEXT: end}
    files[VOCAB_FILE] = lambda: _text_file(json.dumps(with_end, ensure_ascii=False))
    files[MERGES_FILE] = lambda: _text_file("#version: 0.2\n"
                                            + "\n".join(f"{a} {b}" for a, b in merges))
    files[TOKENIZER_FILE] = lambda: _text_file(bpe_tokenizer_json(vocab, merges, end))
  else:
    return [], {}
  special = {} if end is None else {"bos_token_id": end, "eos_token_id": end}
  settings = {"tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": max_len,
              "clean_up_tokenization_spaces": False}
  if end is not None:
    settings |= {"bos_token": END_OF_TEXT, "eos_token": END_OF_TEXT}
  files[TOKENIZER_CONFIG] = lambda: _text_file(json.dumps(settings, indent=2))
  written = []
  for name, contents in files.items():
    path = os.path.join(export_dir, name)
    try:
      paths.write_bytes(path, contents(), mode=0o644)
    except OSError as e:
      raise RunError(f"--export_dir={export_dir}: cannot write {name} ({e}).") from None
    written.append(path)
  return written, special


def _text_file(text: str) -> bytes:
  """`text` as a UTF-8 text file's bytes, ending in a newline."""
  return (text + "\n").encode("utf-8")


def _read_bytes(path: str) -> bytes:
  with open(path, "rb") as f:
    return f.read()
