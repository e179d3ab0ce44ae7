"""A tokenizer folder whose files change is loaded again, in the same process (not served from memory)."""

from __future__ import annotations

import os

from packwise.text import load_tokenizer, tokenizer_fingerprint


def test_a_changed_tokenizer_folder_is_loaded_again(tmp_path, monkeypatch):
    folder = tmp_path / "tok"
    load_tokenizer("qwen2.5").save_pretrained(folder)
    first = load_tokenizer(str(folder))
    assert load_tokenizer(str(folder)) is first  # unchanged files: the same object, loaded once
    before = tokenizer_fingerprint(first, first.chat_template)
    (folder / "chat_template.jinja").write_text("{% for m in messages %}{{ m['content'] }}{% endfor %}")
    again = load_tokenizer(str(folder))
    assert again is not first and again.chat_template.startswith("{% for m in messages %}")
    assert tokenizer_fingerprint(again, again.chat_template) != before
    # a relative path means another folder after chdir: the folder there is loaded, not the first one
    other = tmp_path / "elsewhere" / "tok"
    load_tokenizer("qwen2.5").save_pretrained(other)
    monkeypatch.chdir(tmp_path)
    rel = load_tokenizer("tok")
    monkeypatch.chdir(tmp_path / "elsewhere")
    assert load_tokenizer("tok") is not rel
    assert os.path.samefile(tmp_path / "tok", folder)
