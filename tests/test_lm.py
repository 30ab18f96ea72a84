"""The decoder-only language model (GPT), its sampling, its data and its task.

Proofs: whole-model finite differences in float64 with dropout on and tied weights
(< 1e-5), the learned-position pair (< 1e-7), causality as a property, parity with a
model built from ``torch.nn`` (< 1e-10), the KV cache equal to recomputation, and the
per-character loss accounting of both tokenizations.
"""
from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from numpytransformer.nn.config import TransformerConfig
from numpytransformer.datasets.shakespeare import BPETokenizer, CharTokenizer, chunks, split_text
from numpytransformer.datasets.tinygrammar import SPEAKERS, grammar_corpus
from numpytransformer.errors import NumpyTransformerError
from numpytransformer.core.gradcheck import SMOOTH_TOL, WHOLE_MODEL_TOL, check_module, check_pair, rel_error
from numpytransformer.nn.gpt import TransformerLM, prefix_mask
from numpytransformer.core.losses import cross_entropy
from numpytransformer.core.positional import learned_positional_backward, learned_positional_forward
from numpytransformer.nn.sampling import generate, next_token_probs, sample_from, top_k_filter, top_p_filter
from numpytransformer.training.settings import ModelSettings
from numpytransformer.tasks.base import task_class, task_from_dict
from numpytransformer.tasks.lm import LanguageModelTask, LMData
from helpers import train_briefly

PARITY_TOL = 1e-10


def tiny_lm(norm_first=True, tie=True, positions="learned", dropout=0.1, dtype="float64", V=7, max_len=6,
            seed=0) -> TransformerLM:
    cfg = TransformerConfig(src_vocab_size=V, d_model=8, n_heads=2, n_layers=2, d_ff=12, max_len=max_len,
                            dropout=dropout, dtype=dtype, seed=seed, norm_first=norm_first,
                            tie_embeddings=tie, positions=positions)
    return TransformerLM(cfg)


IDS = np.array([[1, 4, 0, 6, 2], [3, 3, 5, 0, 1]])  # (B, T); id 0 is an ordinary token here


# ---- gradients ------------------------------------------------------------------------------
@pytest.mark.parametrize("norm_first", [True, False], ids=["preLN", "postLN"])
@pytest.mark.parametrize("positions", ["learned", "sinusoidal"])
@pytest.mark.parametrize("tie", [True, False], ids=["tied", "untied"])
def test_whole_model_gradients_with_dropout(norm_first, positions, tie):
    """Every parameter, dropout on (check_module replays the masks), float64."""
    model = tiny_lm(norm_first, tie, positions).train()
    errors = check_module(model, [IDS], [None], max_entries=8)
    assert set(errors) == set(model.parameters())
    assert max(errors.values()) < WHOLE_MODEL_TOL, errors
    if tie:
        assert "out.linear.W" not in errors and "embed.W" in errors


def test_gradient_through_the_loss_tied():
    """The tied matrix gets the sum of its two uses; checked through cross-entropy and dropout."""
    model = tiny_lm().train()
    targets = np.roll(IDS, -1, axis=1)
    state = model.rng.bit_generator.state

    def loss():
        model.rng.bit_generator.state = state
        return cross_entropy(model.forward(IDS), targets)

    _, dlogits = loss()
    model.zero_grad()
    model.backward(dlogits)
    W = model.parameters()["embed.W"]
    analytic = model.gradients()["embed.W"].copy()
    numeric = np.zeros_like(W)
    for i in np.ndindex(*W.shape):
        old = W[i]
        W[i] = old + 1e-5
        up = loss()[0]
        W[i] = old - 1e-5
        down = loss()[0]
        W[i] = old
        numeric[i] = (up - down) / 2e-5
    assert rel_error(analytic, numeric) < WHOLE_MODEL_TOL


def test_learned_positional_pair():
    r = np.random.default_rng(0)
    for offset in (0, 2):
        errors = check_pair(learned_positional_forward, learned_positional_backward,
                            {"x": r.standard_normal((2, 3, 4)), "P": r.standard_normal((6, 4))}, ["x", "P"],
                            offset=offset)
        assert max(errors.values()) < SMOOTH_TOL, errors


def test_learned_positions_unused_rows_get_zero_gradient():
    x, P = np.zeros((2, 3, 4)), np.ones((6, 4))
    _, cache = learned_positional_forward(x, P, 1)
    _, dP = learned_positional_backward(np.ones((2, 3, 4)), cache)
    assert np.all(dP[[0, 4, 5]] == 0) and np.all(dP[1:4] == 2)


# ---- causality --------------------------------------------------------------------------------
@settings(max_examples=25, deadline=None)
@given(T=st.integers(2, 6), t=st.integers(0, 5), seed=st.integers(0, 2 ** 16), norm_first=st.booleans())
def test_causality(T, t, seed, norm_first):
    """Changing the token at t changes no logit before t (and, generically, the one at t)."""
    t = t % T
    model = tiny_lm(norm_first=norm_first, dropout=0.0).eval()
    r = np.random.default_rng(seed)
    ids = r.integers(0, 7, (2, T))
    changed = ids.copy()
    changed[:, t] = (ids[:, t] + 1 + r.integers(0, 6)) % 7
    a, b = model.forward(ids), model.forward(changed)
    np.testing.assert_array_equal(a[:, :t], b[:, :t])
    assert np.abs(a[:, t] - b[:, t]).max() > 1e-12


def test_prefix_mask():
    np.testing.assert_array_equal(prefix_mask(2, 3)[0, 0], [[1, 1, 1, 1, 0], [1, 1, 1, 1, 1]])


# ---- PyTorch parity -----------------------------------------------------------------------------
@pytest.mark.parametrize("norm_first", [True, False], ids=["preLN", "postLN"])
@pytest.mark.parametrize("positions", ["learned", "sinusoidal"])
def test_torch_parity(norm_first, positions):
    """Our model beside torch.nn.Embedding + TransformerEncoderLayer(s) + LayerNorm + tied head, float64."""
    torch = pytest.importorskip("torch")
    nn = torch.nn
    model = tiny_lm(norm_first, True, positions, dropout=0.0).train()
    r = np.random.default_rng(1)
    for p in model.parameters().values():  # away from the initial ones (zero biases, unit gains)
        p += 0.3 * r.standard_normal(p.shape)
    p = model.parameters()
    D, H, T = 8, 2, IDS.shape[1]

    t = lambda a: torch.tensor(a, dtype=torch.float64)  # noqa: E731
    emb = nn.Embedding(7, D, dtype=torch.float64)
    emb.weight.data = t(p["embed.W"])
    layers = []
    for i in range(2):
        layer = nn.TransformerEncoderLayer(D, H, 12, dropout=0.0, activation="relu", batch_first=True,
                                           norm_first=norm_first, dtype=torch.float64)
        q = f"layers.{i}."
        layer.self_attn.in_proj_weight.data = t(np.concatenate([p[q + "self_attn.W_q"], p[q + "self_attn.W_k"],
                                                                p[q + "self_attn.W_v"]], axis=1).T)
        layer.self_attn.in_proj_bias.data = t(np.concatenate([p[q + "self_attn.b_q"], p[q + "self_attn.b_k"],
                                                              p[q + "self_attn.b_v"]]))
        layer.self_attn.out_proj.weight.data = t(p[q + "self_attn.W_o"].T)
        layer.self_attn.out_proj.bias.data = t(p[q + "self_attn.b_o"])
        layer.linear1.weight.data, layer.linear1.bias.data = t(p[q + "ffn.W1"].T), t(p[q + "ffn.b1"])
        layer.linear2.weight.data, layer.linear2.bias.data = t(p[q + "ffn.W2"].T), t(p[q + "ffn.b2"])
        for k, sublayer in ((1, "self_attn_sublayer"), (2, "ffn_sublayer")):
            getattr(layer, f"norm{k}").weight.data = t(p[q + f"{sublayer}.norm.gamma"])
            getattr(layer, f"norm{k}").bias.data = t(p[q + f"{sublayer}.norm.beta"])
        layers.append(layer)
    final = nn.LayerNorm(D, dtype=torch.float64)
    if norm_first:
        final.weight.data, final.bias.data = t(p["final_norm.gamma"]), t(p["final_norm.beta"])
    out_b = t(p["out.b"]).requires_grad_()
    pos = t(p["pos.P"]).requires_grad_() if positions == "learned" else t(model.pos.pe)

    mask = nn.Transformer.generate_square_subsequent_mask(T, dtype=torch.float64)
    x = emb(torch.tensor(IDS)) * math.sqrt(D) + pos[:T]
    for layer in layers:
        x = layer(x, src_mask=mask, is_causal=True)
    if norm_first:
        x = final(x)
    logits_t = x @ emb.weight.T + out_b

    logits = model.forward(IDS)
    assert rel_error(logits, logits_t.detach().numpy()) < PARITY_TOL
    dout = r.standard_normal(logits.shape)
    model.zero_grad()
    model.backward(dout.copy())
    (logits_t * t(dout)).sum().backward()
    g = model.gradients()
    pairs = [("embed.W", emb.weight.grad), ("out.b", out_b.grad)]
    if positions == "learned":
        pairs.append(("pos.P", pos.grad))
    if norm_first:
        pairs += [("final_norm.gamma", final.weight.grad), ("final_norm.beta", final.bias.grad)]
    for i, layer in enumerate(layers):
        q = f"layers.{i}."
        dW_in = layer.self_attn.in_proj_weight.grad.numpy().T  # (D, 3D)
        for j, name in enumerate("qkv"):
            pairs.append((q + f"self_attn.W_{name}", torch.tensor(dW_in[:, j * D:(j + 1) * D])))
        pairs += [(q + "self_attn.W_o", layer.self_attn.out_proj.weight.grad.T),
                  (q + "ffn.W1", layer.linear1.weight.grad.T), (q + "ffn.W2", layer.linear2.weight.grad.T),
                  (q + "self_attn_sublayer.norm.gamma", layer.norm1.weight.grad),
                  (q + "ffn_sublayer.norm.beta", layer.norm2.bias.grad)]
    for name, grad_t in pairs:
        assert rel_error(g[name], grad_t.numpy()) < PARITY_TOL, name


# ---- the public boundary -------------------------------------------------------------------------
@pytest.mark.parametrize("ids, what", [
    (np.array([[1, 7]]), "outside the vocabulary"),
    (np.array([[1.0, 2.0]]), "integer"),
    (np.zeros((1, 7), dtype=np.int64), "max_len"),
    (np.array([1, 2]), "dimensions"),
])
def test_bad_ids_are_refused(ids, what):
    with pytest.raises(NumpyTransformerError, match=what):
        tiny_lm().forward(ids)


def test_float32_model():
    model = tiny_lm(dtype="float32").train()
    logits = model.forward(IDS)
    assert logits.dtype == np.float32
    model.backward(np.ones_like(logits))
    assert all(g.dtype == np.float32 for g in model.gradients().values())


def test_attention_maps_are_causal():
    model = tiny_lm().eval()
    model.forward(IDS)
    maps = model.attention_maps()
    assert len(maps) == 2
    for w in maps.values():
        assert w.shape == (2, 2, 5, 5)
        assert np.all(np.triu(w[0, 0], 1) == 0)


# ---- sampling ---------------------------------------------------------------------------------------
def test_kv_cache_forward_equals_full_forward():
    model = tiny_lm().eval()
    full = model.forward(IDS)
    caches = model.new_kv_caches()
    parts = [model.forward_cached(IDS[:, :2], caches, 0), model.forward_cached(IDS[:, 2:3], caches, 2),
             model.forward_cached(IDS[:, 3:], caches, 3)]
    assert np.abs(np.concatenate(parts, axis=1) - full).max() < 1e-12


@pytest.mark.parametrize("settings_", [dict(temperature=1.0), dict(temperature=0.7, top_k=3),
                                       dict(temperature=1.2, top_p=0.8), dict(temperature=0.0)])
def test_cached_generation_equals_uncached(settings_):
    """20 tokens with a context of 6: the window is refilled several times."""
    model = tiny_lm()
    cached = generate(model, [1, 2, 3], 20, seed=3, **settings_)
    plain = generate(model, [1, 2, 3], 20, seed=3, use_cache=False, **settings_)
    assert cached == plain and len(cached) == 20


def test_generation_is_seeded():
    model = tiny_lm()
    a = generate(model, [1], 30, temperature=1.0, seed=5)
    assert a == generate(model, [1], 30, temperature=1.0, seed=5)
    assert a != generate(model, [1], 30, temperature=1.0, seed=6)
    assert generate(model, list(range(7)) * 2, 3, seed=0)  # a prompt longer than the context


def test_top_k_and_top_p_on_hand_made_distributions():
    p = np.array([0.05, 0.4, 0.1, 0.3, 0.15])
    np.testing.assert_allclose(top_k_filter(p, 2), [0, 0.4 / 0.7, 0, 0.3 / 0.7, 0])
    np.testing.assert_allclose(top_k_filter(p, 5), p)
    # 0.4 < 0.6, then 0.4 + 0.3 = 0.7 >= 0.6: the nucleus is {1, 3}
    np.testing.assert_allclose(top_p_filter(p, 0.6), [0, 0.4 / 0.7, 0, 0.3 / 0.7, 0])
    np.testing.assert_allclose(top_p_filter(p, 0.71), [0, 0.4 / 0.85, 0, 0.3 / 0.85, 0.15 / 0.85])
    np.testing.assert_allclose(top_p_filter(p, 0.1), [0, 1, 0, 0, 0])  # the top token is always kept
    np.testing.assert_allclose(top_p_filter(p, 1.0), p)


def test_temperature():
    z = np.log(np.array([0.1, 0.2, 0.7]))
    np.testing.assert_allclose(next_token_probs(z, 1.0), [0.1, 0.2, 0.7])
    sq = np.array([0.01, 0.04, 0.49])
    np.testing.assert_allclose(next_token_probs(z, 0.5), sq / sq.sum())  # tau = 1/2 squares the odds
    np.testing.assert_array_equal(next_token_probs(z, 0.0), [0, 0, 1])
    np.testing.assert_allclose(next_token_probs(z, 1.0, top_k=1), [0, 0, 1])
    np.testing.assert_array_equal(next_token_probs(z, 1e-320), [0, 0, 1])  # not inf / inf = NaN


def test_sample_from_draws_by_the_probabilities():
    p = np.array([0.1, 0.0, 0.2, 0.7])
    rng = np.random.default_rng(0)
    counts = np.bincount([sample_from(p, rng) for _ in range(20000)], minlength=4) / 20000
    assert counts[1] == 0
    np.testing.assert_allclose(counts, p, atol=0.015)  # about 5 standard errors


@pytest.mark.parametrize("kw, what", [(dict(temperature=-1.0), "temperature"), (dict(top_k=0), "top_k"),
                                      (dict(top_p=1.5), "top_p")])
def test_bad_sampling_settings(kw, what):
    with pytest.raises(NumpyTransformerError, match=what):
        generate(tiny_lm(), [1], 3, **kw)


# ---- data and tokenizers --------------------------------------------------------------------------
def test_grammar_corpus_is_deterministic_and_shaped_like_a_play():
    text = grammar_corpus(5000)
    assert text == grammar_corpus(5000) and text != grammar_corpus(5000, seed=1)
    assert len(text) >= 5000 and text.split(":\n")[0] in SPEAKERS and text.endswith("\n\n")


def test_tokenizers_are_lossless():
    text = grammar_corpus(20000) + "Odd  spacing,\t--here!\n"
    assert "".join(chunks(text)) == text
    char = CharTokenizer.learn(text)
    bpe = BPETokenizer.learn(text, 100)
    for tok in (char, bpe):
        assert tok.decode(tok.encode(text)) == text
        assert int(tok.lengths[tok.encode(text)].sum()) == len(text)
    assert len(bpe.encode(text)) < len(text) / 2  # merges do shorten the text
    with pytest.raises(NumpyTransformerError, match="vocabulary"):
        char.encode("é")


def embedded_task(tokenization="char", **data) -> LanguageModelTask:
    model = ModelSettings(d_model=16, n_heads=2, n_layers=1, d_ff=32, dropout=0.0, norm="pre",
                          tie_embeddings=True, dtype="float64")
    data = LMData(corpus="embedded", tokenization=tokenization, block_size=16, batch_size=8, batches_per_epoch=5,
                  embedded_chars=20000, bpe_merges=60, **data)
    return LanguageModelTask(data, model)


class Uniform:
    """A model whose every distribution is uniform: loss log(V) per token."""

    def __init__(self, V):
        self.V = V

    def forward(self, ids):
        return np.zeros((*ids.shape, self.V))


@pytest.mark.parametrize("tokenization", ["char", "bpe"])
def test_loss_is_counted_per_character(tokenization):
    """A uniform model pays log V per token; per character that is log V * tokens / characters,
    where the characters are those of the decoded targets."""
    task = embedded_task(tokenization)
    V = len(task.tokenizer)
    m = task.val_loss(Uniform(V))
    _, val = task.split_ids
    T = task.data.block_size
    n = (len(val) - 1) // T
    targets = val[1:n * T + 1]
    chars = len(task.tokenizer.decode(targets))
    assert m["val_chars"] == chars and m["val_tokens"] == n * T
    assert m["val_loss"] == pytest.approx(math.log(V) * n * T / chars, rel=1e-12)
    assert m["val_ppl"] == pytest.approx(math.exp(m["val_loss"]))
    if tokenization == "char":
        assert chars == n * T
    else:
        assert chars > 1.5 * n * T  # a BPE token stands for several characters


@pytest.mark.parametrize("tokenization", ["char", "bpe"])
def test_training_loss_is_per_character_too(tokenization):
    """The training loss is reported as the validation loss is, per character: a uniform model
    shows the same figure on both (log V * tokens / characters), not log V against it."""
    task = embedded_task(tokenization)
    V, batch = len(task.tokenizer), task.train_batches(0)[0]
    (x,), y = task.batch_arrays(batch)
    loss, chars, _ = task.loss(Uniform(V).forward(x), y, 0.0)
    assert chars == len(task.tokenizer.decode(batch[:, 1:].ravel()))
    assert loss == pytest.approx(math.log(V) * batch[:, 1:].size / chars, rel=1e-12)
    assert task.input_tokens(batch) == batch[:, 1:].size


def test_task_round_trip_and_batches():
    task = embedded_task("bpe")
    again = task_from_dict(task.to_dict())
    assert again.tokenizer.units == task.tokenizer.units and task_class("lm") is LanguageModelTask
    b1, b2 = task.train_batches(0), task.train_batches(0)
    assert len(b1) == 5 and b1[0].shape == (8, 17)
    np.testing.assert_array_equal(b1[3], b2[3])
    assert not np.array_equal(b1[0], task.train_batches(1)[0])
    (x,), y = task.batch_arrays(b1[0])
    np.testing.assert_array_equal(x[:, 1:], y[:, :-1])


def test_training_on_the_embedded_corpus_lowers_the_loss():
    """A few seconds: 60 updates of the task's own batches and loss, the trainer's update."""
    task = embedded_task("char")
    model = task.build_model().train()
    before, after = train_briefly(task, model)
    assert before > 3.5 and after < before - 1.0, (before, after)
    text = task.generate(model, "KING:", 40, 0.8, 10, None, 0)
    assert text.startswith("KING:") and len(text) == 45


def test_split_is_first_ninety_percent():
    train, val = split_text("abcdefghij")
    assert (train, val) == ("abcdefghi", "j")


def test_exact_resume_through_the_trainer(tmp_path):
    """Two epochs in one go equal one epoch, then --resume for the second (dropout on)."""
    from numpytransformer.training.trainer import TrainConfig, Trainer

    def run(out, epochs, resume=False):
        task = embedded_task("char")
        task.model.dropout = 0.1
        model = task.build_model()
        trainer = Trainer(model, task, TrainConfig(epochs=epochs, lr_factor=1.0, warmup=10, label_smoothing=0.0,
                                                   log_every=1000), out, log=lambda *_: None)
        if resume:
            trainer.resume()
            assert trainer.epoch == 1 and trainer.optimizer.t == 5  # it goes on after the first epoch
        trainer.fit()
        return model

    whole = run(tmp_path / "a", 2)
    run(tmp_path / "b", 1)
    resumed = run(tmp_path / "b", 2, resume=True)
    for name, p in whole.parameters().items():
        np.testing.assert_array_equal(p, resumed.parameters()[name])


def test_task_attention_predict_and_evaluate():
    task = embedded_task("bpe")
    model = task.build_model()
    maps, labels, guess = task.attention(model, "KING:\nThe moon")
    assert list(maps) == ["layers.0.self_attn"] and maps["layers.0.self_attn"].shape[0] == 2  # heads
    T = maps["layers.0.self_attn"].shape[-1]
    assert len(labels["layers.0.self_attn"][0]) == T and "".join(labels["layers.0.self_attn"][0]) == "KING:\nThe moon"
    out = task.predict(model, ["KING:", ""])
    assert out[0].startswith("KING:") and out[1] == ""  # an empty line gives an empty line
    m = task.evaluate(model, 5, seed=0)
    assert m["val_tokens"] == 5 * task.data.block_size and m["val_ppl"] == pytest.approx(math.exp(m["val_loss"]))
    with pytest.raises(NumpyTransformerError, match="beam"):
        task.evaluate(model, 5, 0, beam=4)


def test_the_cached_forward_and_generate_check_their_arguments():
    model = tiny_lm(dropout=0.0).eval()
    ids = np.array([[1, 2]])
    for caches, position, message in (([], 0, "kv_caches must be a list of 2 dicts"),
                                      (None, 0, "kv_caches must be a list of 2 dicts"),
                                      (model.new_kv_caches(), 3, "position must be 0, the number of positions already"),
                                      (model.new_kv_caches(), -1, r"position must be an integer in \[0, 5\]"),
                                      (model.new_kv_caches(), 1.5, "position must be an integer"),
                                      ([{"k": [1]}, {}], 0, r"kv_caches\[0\] is not a cache this model filled")):
        with pytest.raises(NumpyTransformerError, match=message):
            model.forward_cached(ids, caches, position)
    caches = model.new_kv_caches()
    model.forward_cached(ids, caches, 0)
    with pytest.raises(NumpyTransformerError, match="kv_caches.0. holds a batch of 1, but the new ids have 2 rows"):
        model.forward_cached(np.array([[3], [4]]), caches, 2)
    for kw, message in ((dict(prompt=[1.7, 2.2]), "prompt must be an array of integer token ids, got dtype float64"),
                        (dict(prompt=[[1, 2], [3, 4]]), r"prompt must have 1 dimensions, got shape \(2, 2\)"),
                        (dict(prompt=[]), "prompt must hold at least one sequence and one position"),
                        (dict(prompt=[9]), r"prompt holds id 9, outside the vocabulary \[0, 7\)"),
                        (dict(seed=-1), "seed must be an integer >= 0"),
                        (dict(use_cache="no"), "use_cache must be True or False")):
        with pytest.raises(NumpyTransformerError, match=message):
            generate(model, **{"prompt": [1, 2], "tokens": 3, **kw})
    assert len(generate(model, [1, 2], 3, temperature=np.float32(0.5))) == 3  # a NumPy float is a number
    with pytest.raises(NumpyTransformerError, match="model must be a TransformerLM"):
        generate(object(), [1], 3)
    z = np.zeros(4)
    for kw, message in ((dict(top_k=0), "top_k must be a whole number >= 1"), (dict(top_p=0.0), "top_p must be"),
                        (dict(temperature=-1.0), "temperature must be a finite number >= 0")):
        with pytest.raises(NumpyTransformerError, match=message):
            next_token_probs(z, **kw)
    with pytest.raises(NumpyTransformerError, match="logits must be one non-empty row without NaN"):
        next_token_probs(np.array([0.0, np.nan]))


def test_the_package_exports_the_language_model():
    import numpytransformer

    assert numpytransformer.TransformerLM is TransformerLM and "TransformerLM" in numpytransformer.__all__


# ---- the two faults a fuzz found: a diverged model, a damaged tokenizer ----------------------
DIVERGING = ["train", "lm", "--corpus", "embedded", "--tokenization", "char", "--embedded-chars", "3000",
             "--block-size", "16", "--batch-size", "4", "--batches-per-epoch", "20", "--d-model", "8", "--heads", "2",
             "--layers", "1", "--d-ff", "16"]


def _cli(argv, capsys):
    """``(exit code, stdout, stderr)`` of the command line."""
    from numpytransformer.cli import main

    code = main(argv)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


class Confident:
    """A model sure of the last token everywhere: thousands of nats on every other target."""

    def __init__(self, V):
        self.V = V

    def forward(self, ids):
        return np.broadcast_to(1e4 * np.arange(self.V, dtype=np.float64), (*ids.shape, self.V))


def test_the_perplexity_of_a_loss_beyond_the_largest_exponent_is_infinite():
    """exp of a loss above about 709 nats overflows a float: the figure is inf, not an OverflowError."""
    task = embedded_task("char")
    m = task.val_loss(Confident(len(task.tokenizer)))
    assert m["val_loss"] > 1000 and np.isfinite(m["val_loss"]) and m["val_ppl"] == math.inf


def test_a_diverging_run_stops_with_the_trainers_one_line_message(tmp_path, capsys, monkeypatch):
    import numpytransformer.training.trainer as trainer_module

    monkeypatch.setattr(trainer_module, "plot_history", lambda *a, **kw: None)
    code, _, err = _cli(DIVERGING + ["--epochs", "4", "--lr-factor", "100", "--warmup", "1", "--out",
                                     str(tmp_path / "div")], capsys)
    assert code == 2 and err.count("\n") == 1, err
    assert err.startswith("error: ") and "diverged" in err and "Traceback" not in err


def test_eval_of_huge_finite_weights_reports_an_infinite_perplexity(tmp_path, capsys, monkeypatch):
    import numpytransformer.training.trainer as trainer_module
    from numpytransformer.training.checkpoint import read_checkpoint_meta, save_checkpoint
    from numpytransformer.cli import load_for_inference

    monkeypatch.setattr(trainer_module, "plot_history", lambda *a, **kw: None)
    assert _cli(DIVERGING + ["--epochs", "1", "--out", str(tmp_path / "run")], capsys)[0] == 0
    _, model, ck = load_for_inference(str(tmp_path / "run"))
    for p in model.parameters().values():
        p *= 1e4  # finite, and far beyond anything training makes
    doc = read_checkpoint_meta(ck)
    meta = {k: doc[k] for k in ("task", "data", "train", "step", "epoch", "best_score", "history")}
    save_checkpoint(tmp_path / "huge", model, meta)
    code, out, err = _cli(["eval", "--checkpoint", str(tmp_path / "huge")], capsys)
    assert code == 0 and err == "" and "val_ppl inf" in out, (out, err)


def _damaged(tokenization, fn):
    state = embedded_task(tokenization).to_dict()
    fn(state["state"]["tokenizer"])
    return state


@pytest.mark.parametrize("tokenization, damage, message", [
    ("char", lambda t: t["units"].__setitem__(1, t["units"][0]), r"state\.tokenizer\.units holds '.+' twice"),
    ("char", lambda t: t["units"].__setitem__(1, "ab"), r"state\.tokenizer\.units\[1\] must be one character"),
    ("char", lambda t: t["units"].__setitem__(2, ""), r"state\.tokenizer\.units\[2\] must be a non-empty str"),
    ("char", lambda t: t["units"].__setitem__(0, 7), r"state\.tokenizer\.units\[0\] must be a non-empty str"),
    ("bpe", lambda t: t["units"].__setitem__(-1, t["units"][0]), r"state\.tokenizer\.units holds '.+' twice"),
    ("bpe", lambda t: t["units"].__setitem__(0, "</w>"), r"state\.tokenizer\.units\[0\] must be a non-empty str"),
    ("bpe", lambda t: t["merges"].__setitem__(0, ["Q", "Z"]), r"state\.tokenizer\.merges\[0\] makes 'QZ', which is "
                                                               "not among the units"),
    ("bpe", lambda t: t["merges"].__setitem__(0, ["a"]), r"state\.tokenizer\.merges\[0\] must be a pair"),
    ("bpe", lambda t: t.__setitem__("merges", None), r"state\.tokenizer\.merges must be a list"),
])
def test_a_damaged_tokenizer_state_is_refused_naming_the_field(tokenization, damage, message):
    """A unit listed twice, or a character unit of two characters, would load and then decode
    wrongly without a word; the loader refuses them in one line."""
    with pytest.raises(NumpyTransformerError, match=message):
        task_from_dict(_damaged(tokenization, damage))
    task_from_dict(_damaged(tokenization, lambda t: None))  # undamaged, it loads


# ---- the language model's loss (exercise 12.3) ---------------------------------------------
def test_lm_loss_is_the_loss_the_language_model_trains_on():
    """lm_loss_forward on ids (B, T+1) is cross_entropy of the logits against the shifted ids (the task's
    batch_arrays), and its backward is that gradient; finite differences agree in float64."""
    from numpytransformer.core.losses import lm_loss_backward, lm_loss_forward

    cfg = TransformerConfig(src_vocab_size=7, d_model=8, n_heads=2, n_layers=1, d_ff=16, max_len=6, dropout=0.0,
                            norm_first=True, dtype="float64")
    ids = np.random.default_rng(3).integers(0, 7, size=(2, 6))
    logits = TransformerLM(cfg).forward(ids[:, :-1])
    loss, cache = lm_loss_forward(logits, ids)
    expected, dlogits = cross_entropy(logits, ids[:, 1:], pad_id=None)
    assert abs(loss - expected) < 1e-12 * expected
    assert rel_error(lm_loss_backward(1.0, cache), dlogits) < 1e-12
    z = np.random.default_rng(4).standard_normal((2, 3, 5))
    errors = check_pair(lm_loss_forward, lm_loss_backward, {"logits": z}, ("logits",),
                        ids=np.array([[0, 4, 4, 1], [2, 3, 0, 0]]))
    assert errors["logits"] < 1e-7


@pytest.mark.parametrize("dloss", [1.0, np.float64(0.5)])
def test_lm_loss_keeps_the_logits_dtype(dloss):
    """A float32 model gets float32 dlogits (its backward would otherwise run in float64), equal to
    the float64 computation to float32's precision; a loss of large logits stays finite."""
    from numpytransformer.core.losses import lm_loss_backward, lm_loss_forward

    rng = np.random.default_rng(5)
    z = rng.standard_normal((2, 3, 7)) * 30
    ids = rng.integers(0, 7, size=(2, 4))
    loss64, cache64 = lm_loss_forward(z, ids)
    loss32, cache32 = lm_loss_forward(z.astype(np.float32), ids)
    d32 = lm_loss_backward(dloss, cache32)
    assert cache32.probs.dtype == np.float32 and d32.dtype == np.float32
    assert lm_loss_backward(dloss, cache64).dtype == np.float64
    assert np.isfinite(loss32) and abs(loss32 - loss64) < 1e-5 * abs(loss64)
    assert rel_error(d32.astype(np.float64), lm_loss_backward(dloss, cache64)) < 1e-5


@pytest.mark.parametrize("logits_shape, ids, name", [
    ((2, 3, 5), np.zeros((2, 3), dtype=np.int64), "ids"),          # not one longer than the logits
    ((2, 3, 5), np.zeros((2, 4)), "ids"),                          # float ids
    ((2, 3, 5), np.full((2, 4), 5), "ids"),                        # past the vocabulary
    ((2, 3, 5), np.full((2, 4), -1), "ids"),
    ((6, 5), np.zeros((2, 4), dtype=np.int64), "logits"),         # not (B, T, V)
])
def test_lm_loss_refuses_bad_input_naming_it(logits_shape, ids, name):
    from numpytransformer.core.losses import lm_loss_forward

    with pytest.raises(NumpyTransformerError, match=f"^{name} must") as info:
        lm_loss_forward(np.zeros(logits_shape), ids)
    assert "\n" not in str(info.value)
