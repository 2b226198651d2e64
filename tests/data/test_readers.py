from __future__ import annotations

import json
import re

import pytest

from zoo.data.readers import (
    expand_files,
    read_labelled,
    read_pairs,
    read_texts,
    read_tsv_pairs,
    read_utf8,
)


def write(path, content: str | bytes):
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content, encoding="utf-8")
    return path


def test_expand_files_glob_and_list(tmp_path):
    b = write(tmp_path / "b.txt", "b")
    a = write(tmp_path / "a.txt", "a")
    assert expand_files(str(tmp_path / "*.txt")) == [a, b]
    assert expand_files([str(b), str(a), str(b)]) == [b, a]


def test_missing_file_names_path(tmp_path):
    with pytest.raises(FileNotFoundError, match="missing.txt"):
        expand_files(str(tmp_path / "missing.txt"))


def test_empty_glob_names_pattern(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"glob .*\*\.md' matched no files"):
        expand_files(str(tmp_path / "*.md"))


def test_directory_is_rejected(tmp_path):
    with pytest.raises(ValueError, match="is a directory"):
        expand_files(str(tmp_path))


def test_whitespace_only_corpus(tmp_path):
    write(tmp_path / "a.txt", "  \n\t\n")
    write(tmp_path / "b.txt", "")
    with pytest.raises(ValueError, match="empty or whitespace-only"):
        read_texts(str(tmp_path / "*.txt"))


def test_non_utf8_names_file_and_offset(tmp_path):
    path = write(tmp_path / "latin1.txt", b"caf" + b"\xe9 au lait")
    with pytest.raises(ValueError, match=r"latin1.txt: not valid UTF-8 at byte offset 3"):
        read_utf8(path)


def test_binary_names_file_and_offset(tmp_path):
    path = write(tmp_path / "blob.bin", b"PK\x03\x04\x00\x00")
    with pytest.raises(ValueError, match=r"blob.bin: looks binary \(NUL byte at byte offset 4\)"):
        read_texts([path])


def test_bom_is_stripped(tmp_path):
    path = write(tmp_path / "bom.txt", "\ufeffhello")
    assert read_utf8(path) == "hello"


def test_tsv_pairs_and_missing_tab(tmp_path):
    good = write(tmp_path / "p.tsv", "나는\ti am\n\nhello\tworld\twith tab\n")
    assert read_tsv_pairs(good) == [("나는", "i am"), ("hello", "world\twith tab")]
    bad = write(tmp_path / "bad.tsv", "a\tb\nc\td\nno tab here\n")
    with pytest.raises(ValueError, match=r"bad.tsv:3: expected 'src<TAB>tgt'"):
        read_tsv_pairs(bad)
    empty_side = write(tmp_path / "e.tsv", "a\t \n")
    with pytest.raises(ValueError, match=r"e.tsv:1: field 'tgt' is empty"):
        read_tsv_pairs(empty_side)


def test_jsonl_pairs_fields_and_errors(tmp_path):
    rows = [{"ko": "가", "en": "a"}, {"ko": "나", "en": "b"}]
    path = write(tmp_path / "p.jsonl", "\n".join(json.dumps(r, ensure_ascii=False) for r in rows))
    assert read_pairs(path, src_field="ko", tgt_field="en") == [("가", "a"), ("나", "b")]
    with pytest.raises(ValueError, match=r"p.jsonl:1: missing field\(s\) \['src', 'tgt'\]"):
        read_pairs(path)
    broken = write(tmp_path / "b.jsonl", '{"src": "a", "tgt": "b"}\n{"src": "a",\n')
    with pytest.raises(ValueError, match=r"b.jsonl:2: invalid JSON"):
        read_pairs(broken)


def test_pair_format_errors(tmp_path):
    path = write(tmp_path / "p.csv", "a,b\n")
    with pytest.raises(ValueError, match="cannot tell the format"):
        read_pairs(path)
    with pytest.raises(ValueError, match=r"data.format='csv' is unknown"):
        read_pairs(path, fmt="csv")


def test_labelled(tmp_path):
    path = write(tmp_path / "l.jsonl", '{"text": "good", "label": "pos"}\n{"text": "bad", "label": 0}\n')
    assert read_labelled(path) == [("good", "pos"), ("bad", "0")]
    missing = write(tmp_path / "m.jsonl", '{"text": "good", "label": "pos"}\n{"text": "bad"}\n')
    with pytest.raises(ValueError, match=r"m.jsonl:2: missing field\(s\) \['label'\]"):
        read_labelled(missing)
    bad_label = write(tmp_path / "x.jsonl", '{"text": "good", "label": [1]}\n')
    with pytest.raises(ValueError, match=r"x.jsonl:1: field 'label' must be"):
        read_labelled(bad_label)


def test_empty_pairs_file(tmp_path):
    path = write(tmp_path / "e.tsv", "\n  \n")
    with pytest.raises(ValueError, match="e.tsv: no examples"):
        read_tsv_pairs(path)


@pytest.mark.parametrize("reader", ["chat", "preference"])
def test_chat_and_preference_jsonl_name_a_bad_byte_and_a_bad_line(tmp_path, reader):
    """Both read through readers.jsonl_values: a latin-1 byte names the file and its byte offset (they
    raised a bare UnicodeDecodeError), a line that is not JSON names path:line."""
    from zoo.data.chat_rows import read_jsonl
    from zoo.data.preference import read_preference_jsonl

    read = {"chat": lambda p: list(read_jsonl(p)), "preference": read_preference_jsonl}[reader]
    bad = tmp_path / "bad.jsonl"
    bad.write_bytes(b'{"text": "caf\xe9"}\n')
    with pytest.raises(ValueError, match=rf"{re.escape(str(bad))}: not valid UTF-8 at byte offset 13"):
        read(bad)
    bad.write_text('\n{"text": \n', encoding="utf-8")
    with pytest.raises(ValueError, match=rf"{re.escape(str(bad))}:2: not JSON"):
        read(bad)
