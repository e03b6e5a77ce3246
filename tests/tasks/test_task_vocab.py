"""Vocabularies match SPEC §1.1 / §1.2 exactly."""

from __future__ import annotations

import string

import numpy as np
import pytest

from posym.errors import PosymError
from posym.tasks import LETTER_VOCAB, NUMBER_VOCAB, get_vocab


def test_number_vocab_spot_checks():
    v = NUMBER_VOCAB
    assert v.size == 137 and len(v.tokens) == 137
    expected = {"<PAD>": 0, "1": 1, "9": 9, "16": 16, "a": 17, "z": 42, "aa": 43, "az": 68, "ba": 69,
                "cz": 120, "da": 121, "dp": 136}
    for tok, i in expected.items():
        assert v.id_of(tok) == i
        assert v.tokens[i] == tok


def test_number_vocab_full_order():
    letters = list(string.ascii_lowercase) + [a + b for a in string.ascii_lowercase for b in string.ascii_lowercase]
    assert NUMBER_VOCAB.tokens[17:] == letters[:120]
    assert NUMBER_VOCAB.tokens[1:17] == [str(i) for i in range(1, 17)]
    assert "dq" not in NUMBER_VOCAB and "17" not in NUMBER_VOCAB


def test_letter_vocab_spot_checks():
    v = LETTER_VOCAB
    assert v.size == 129
    expected = {"<PAD>": 0, "a1": 1, "a8": 8, "b1": 9, "h8": 64, "aa": 65, "ab": 66, "ba": 73, "hh": 128}
    for tok, i in expected.items():
        assert v.id_of(tok) == i


def test_letter_vocab_formulas():
    for li, l in enumerate("abcdefgh"):
        for num in range(1, 9):
            assert LETTER_VOCAB.id_of(f"{l}{num}") == 1 + 8 * li + (num - 1)
        for ri, r in enumerate("abcdefgh"):
            assert LETTER_VOCAB.id_of(l + r) == 65 + 8 * li + ri


def test_encode_decode_roundtrip():
    for v in (NUMBER_VOCAB, LETTER_VOCAB):
        ids = np.arange(v.size)
        assert v.decode(ids) == v.tokens
        np.testing.assert_array_equal(v.encode(v.tokens), ids)


def test_vocab_errors():
    with pytest.raises(PosymError):
        NUMBER_VOCAB.id_of("i9")
    with pytest.raises(PosymError):
        LETTER_VOCAB.id_of("a9")
    with pytest.raises(PosymError):
        NUMBER_VOCAB.decode([137])
    with pytest.raises(PosymError):
        LETTER_VOCAB.decode([-1])
    with pytest.raises(PosymError):
        get_vocab("numbers")
    assert get_vocab("number") is NUMBER_VOCAB and get_vocab("letter") is LETTER_VOCAB
