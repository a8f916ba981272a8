"""The prose corpus (issue 46): SWORD Bible modules read offline, one document per chapter
(transformer/data/sword.py), split by a hash of the chapter id (transformer/data/local_files.py),
built by `local_text`, and a one-line error naming the apt-get command when the packages are
absent. Fake modules in tmp_path mimic the real layout; the last test reads the real packages
when they are installed."""

import collections
import os
import struct
import zlib

import pytest

from configs import prose
from transformer.config import ConfigError, from_config_dict
from transformer.data import local_files, sword

BOOKS = {"Gen": 3, "Exod": 2, "Ps": 4}


def _osis(module: str, book: str, chapters: int) -> str:
  """A book as the modules hold it: a book div, a title, an introduction before chapter 1,
  chapter milestones, Strong's-numbered words, footnotes, paragraph milestones."""
  parts = [f'<div osisID="{book}" type="book"/> <title type="main">{book} of {module}</title>'
           f' <div sID="i1" type="x-p"/>An introduction.<div eID="i1" type="x-p"/>']
  for n in range(1, chapters + 1):
    parts.append(f'<chapter n="{n}" osisID="{book}.{n}" sID="{book}.{n}"/><w lemma="x">Words'
                 f'</w> of {book} {n} in {module} &amp; more.<note placement="foot">a note'
                 f'</note><div sID="p" type="x-p"/>Next  paragraph.<chapter eID="{book}.{n}"/>')
  return " ".join(parts)


def _module(folder, module: str, books: dict[str, int]) -> None:
  """A zText module `folder/module/ot.bzz` + `ot.bzs`: a header block, then one zlib block a
  book (12-byte index entries: offset, compressed size, size)."""
  os.makedirs(folder / module, exist_ok=True)
  texts = ['<milestone type="x-importer"/>'] + [_osis(module, b, n) for b, n in books.items()]
  index, data = b"", b""
  for text in texts:
    raw = text.encode()
    packed = zlib.compress(raw)
    index += struct.pack("<III", len(data), len(packed), len(raw))
    data += packed
  (folder / module / "ot.bzs").write_bytes(index + struct.pack("<III", len(data), 0, 0))
  (folder / module / "ot.bzz").write_bytes(data)


@pytest.fixture
def fake_sword(tmp_path, monkeypatch):
  """Both modules of the prose corpus, fake, in a folder that stands for `PROSE_DIR`."""
  root = tmp_path / "ztext"
  for module in sword.PROSE_MODULES:
    _module(root, module, BOOKS)
  monkeypatch.setattr(sword, "PROSE_DIR", str(root))
  return root


def test_each_chapter_is_one_document_of_plain_text(fake_sword):
  chapters = dict(sword.chapters(str(fake_sword / "engWEB2015eb" / "ot.bzz")))
  assert list(chapters) == [f"{b}.{n}" for b, c in BOOKS.items() for n in range(1, c + 1)]
  assert chapters["Exod.1"] == ("Exod of engWEB2015eb\n\nAn introduction.\n\n"
                                "Words of Exod 1 in engWEB2015eb & more.\nNext paragraph.")
  assert chapters["Exod.2"] == "Words of Exod 2 in engWEB2015eb & more.\nNext paragraph."
  assert not any("note" in t or "<" in t for t in chapters.values())


def test_a_torn_module_file_is_one_line_naming_the_reinstall(fake_sword):
  bzz = fake_sword / "engKJV2006eb" / "ot.bzz"
  bzz.write_bytes(bzz.read_bytes()[:-20])  # the last book's block cut short
  with pytest.raises(ValueError, match=r"ot\.bzz is damaged at byte \d+ .*reinstall it with "
                     r"`apt-get install --reinstall sword-text-kjv sword-text-web`"):
    list(sword.chapters(str(bzz)))


def test_split_is_by_chapter_id_deterministic_and_shared_by_translations(fake_sword):
  files = local_files.list_source_files(str(fake_sword), (".bzz",))
  assert files == ["engKJV2006eb/ot.bzz", "engWEB2015eb/ot.bzz"]
  split = {v: list(local_files.split_documents(str(fake_sword), files, 30, v))
           for v in (False, True)}
  names = {v: [n for n, _ in docs] for v, docs in split.items()}
  assert names[True] and names[False] and not set(names[True]) & set(names[False])
  assert len(names[True]) + len(names[False]) == 2 * sum(BOOKS.values())
  for v in (False, True):  # each chapter of one translation is with its other translation
    ids = [n.split("#")[1] for n in names[v]]
    assert set(collections.Counter(ids).values()) == {2}
    assert all(local_files.is_validation(i, 30) == v for i in ids)
  assert split == {v: list(local_files.split_documents(str(fake_sword), files, 30, v))
                   for v in (False, True)}
  assert "engWEB2015eb/ot.bzz#Gen.2" in names[False] + names[True]


def test_the_builder_makes_train_and_validation_from_the_modules(fake_sword, tmp_path):
  import tensorflow_datasets as tfds

  from transformer.data.builders.local_text import local_text_builder
  builder = local_text_builder(str(fake_sword), (".bzz",), 30, str(tmp_path / "tfds"))
  builder.download_and_prepare()
  got = {s: {ex["path"].decode(): ex["text"].decode()
             for ex in tfds.as_numpy(builder.as_dataset(split=s))} for s in ("train", "validation")}
  files = local_files.list_source_files(str(fake_sword), (".bzz",))
  for s in got:
    assert got[s] == dict(local_files.split_documents(str(fake_sword), files, 30,
                                                      s == "validation"))


def test_missing_packages_are_one_line_naming_the_apt_get_command(fake_sword):
  assert sword.missing_message(str(fake_sword)) == ""
  assert sword.missing_message("/some/other/folder") == ""  # any other folder: not ours
  (fake_sword / "engWEB2015eb" / "ot.bzz").unlink()
  message = sword.missing_message(str(fake_sword))
  assert "sword-text-web" in message and "sword-text-kjv not" not in message
  assert "apt-get install sword-text-kjv sword-text-web" in message and "\n" not in message


def test_the_prose_config_stops_before_compiling_without_the_packages(tmp_path, monkeypatch):
  from transformer.cli.preflight import check_files
  assert prose.get_config().data.source_dir == sword.PROSE_DIR
  monkeypatch.setattr(sword, "PROSE_DIR", str(tmp_path / "absent"))
  c = prose.get_config("smoke")
  c.data.source_dir = str(tmp_path / "absent")
  with pytest.raises(ConfigError, match="apt-get install sword-text-kjv sword-text-web"):
    check_files(from_config_dict(c))


@pytest.mark.skipif(sword.missing_packages(sword.PROSE_DIR) != [] or
                    not os.path.isdir(sword.PROSE_DIR),
                    reason="sword-text-kjv and sword-text-web are not installed")
def test_the_real_corpus_is_over_5_mb_with_about_5_percent_held_out():
  files = local_files.list_source_files(sword.PROSE_DIR, (".bzz",))
  size = {v: sum(len(t.encode()) for _, t in
                 local_files.split_documents(sword.PROSE_DIR, files, 5, v)) for v in (False, True)}
  assert size[False] + size[True] >= 5_000_000
  assert 0.03 < size[True] / (size[False] + size[True]) < 0.08
