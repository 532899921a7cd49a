"""The text-embedding table trained as quarter-frame phoneme parts (rvqspec.mini.text_parts,
MiniModelConfig.text_parts): which parts a token is made of, that the table is exactly their sums
while training, and that materializing leaves a plain table with the same rows."""
import pytest
import torch

from rvqspec.mini.text_parts import factorize, materialize, part_index, quarter_parts

TOKENS = ["<pad>", "<sil>", "<bos>", "<eos>", "<unk>", "en:k", "en:w", "en:k w", "en:w k", "en:k k w w",
          "en:- - k k", "de:k"]


def incidence(tokens: list[str]) -> torch.Tensor:
    """(V, 4P) 0/1 matrix: which quarter parts each token's row is the sum of."""
    idx, _ = part_index(tokens)
    a = torch.zeros(len(tokens), int(idx.max()) + 1)
    a.scatter_(1, idx, 1.0)
    return a


def test_quarter_parts_of_each_token_form():
    assert quarter_parts("en:k") == ("en:k",) * 4
    assert quarter_parts("en:k w") == ("en:k", "en:k", "en:w", "en:w")
    assert quarter_parts("en:- k k w") == ("en:-", "en:k", "en:k", "en:w")
    assert quarter_parts("<sil>") == ("<sil>",) * 4
    assert quarter_parts("de:k")[0] != quarter_parts("en:k")[0]  # phonemes are language-tagged
    with pytest.raises(ValueError, match="en:a b c"):
        quarter_parts("en:a b c")


def test_part_index_separates_quarters_and_shares_phonemes():
    idx, names = part_index(TOKENS)
    assert idx.shape == (len(TOKENS), 4) and len(names) == len(set(names))
    P = len(names)
    assert all(int(idx[i, q]) // P == q for i in range(len(TOKENS)) for q in range(4))  # quarter q's block
    k, kw, kkww = TOKENS.index("en:k"), TOKENS.index("en:k w"), TOKENS.index("en:k k w w")
    assert torch.equal(idx[kw], idx[kkww])  # the pair and its quarter spelling are the same parts
    assert torch.equal(idx[kw, :2], idx[k, :2]) and not torch.equal(idx[kw, 2:], idx[k, 2:])


def test_table_is_the_sum_of_parts_and_materializes_unchanged():
    emb = torch.nn.Embedding(len(TOKENS), 6)
    n_parts = factorize(emb, TOKENS, torch.Generator().manual_seed(0))
    assert n_parts == len(part_index(TOKENS)[1])
    w = emb.weight.detach().clone()  # (V, 6)
    parts = emb.parametrizations.weight.original.detach()  # (4P, 6)
    torch.testing.assert_close(w, incidence(TOKENS) @ parts)
    # a step moves every token that shares the stepped part: en:k's first quarter reaches en:k w too
    opt = torch.optim.SGD(emb.parameters(), lr=1.0)
    emb(torch.tensor([TOKENS.index("en:k")])).sum().backward()
    opt.step()
    moved = (emb.weight.detach() - w).abs().sum(1) > 0  # (V,)
    assert moved[TOKENS.index("en:k w")] and moved[TOKENS.index("en:k k w w")] and not moved[TOKENS.index("de:k")]
    before = emb.weight.detach().clone()
    materialize(emb)
    assert isinstance(emb.weight, torch.nn.Parameter) and list(emb.state_dict()) == ["weight"]
    assert torch.equal(emb.weight.detach(), before)
    materialize(emb)  # a plain table: nothing to do


def test_factorize_rejects_a_table_of_another_vocabulary():
    with pytest.raises(ValueError, match="3 rows for 12 tokens"):
        factorize(torch.nn.Embedding(3, 4), TOKENS, torch.Generator())
