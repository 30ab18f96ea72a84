"""More siblings, each a real option: PaLM's z-loss beside the cross-entropy, the parallel block beside
the sequential one, the moving average of the weights beside checkpoint averaging, a least length
beside the decoders' EOS rule, and min-p beside top-k and top-p sampling."""
from __future__ import annotations

import json

import numpy as np
import pytest

import numpytransformer.training.trainer as trainer_module
from numpytransformer.cli import build_parser, main
from numpytransformer.core import fast
from numpytransformer.core.gradcheck import SMOOTH_TOL, WHOLE_MODEL_TOL, check_module, check_pair, rel_error
from numpytransformer.core.losses import cross_entropy, softmax_cross_entropy_backward, softmax_cross_entropy_forward
from numpytransformer.errors import NumpyTransformerError
from numpytransformer.nn.blocks import ParallelBlock
from numpytransformer.nn.config import TransformerConfig
from numpytransformer.nn.decoding import beam_search, greedy_decode
from numpytransformer.nn.gpt import TransformerLM
from numpytransformer.nn.models import Transformer, TransformerClassifier
from numpytransformer.nn.sampling import generate, min_p_filter, next_token_probs
from numpytransformer.tasks.lm import LanguageModelTask, LMData
from numpytransformer.tasks.reverse import ReversalTask, ReverseData
from numpytransformer.training.optim import EMA
from numpytransformer.training.settings import ModelSettings
from numpytransformer.training.trainer import TrainConfig, Trainer
from helpers import train_briefly

RNG = np.random.default_rng(0)
IDS = np.array([[1, 4, 0, 6, 2], [3, 3, 5, 0, 1]])


def normal(*shape):
    return RNG.standard_normal(shape)


@pytest.fixture(autouse=True)
def _no_curves(monkeypatch):
    monkeypatch.setattr(trainer_module, "plot_history", lambda *a, **kw: None)


# ---- z-loss ---------------------------------------------------------------------------------------
def _ce(pad_id, z_loss, eps=0.0):
    """The pair as a function of the logits only: the targets, with pad rows, are fixed."""
    targets = np.array([[2, 0, 4], [1, 3, 0]])

    def forward(logits):
        return softmax_cross_entropy_forward(logits, targets, pad_id, eps, z_loss)

    return forward, targets


@pytest.mark.parametrize("eps", [0.0, 0.1])
def test_z_loss_gradient_with_padding(eps):
    forward, _ = _ce(pad_id=0, z_loss=0.3, eps=eps)
    logits = 3.0 * normal(2, 3, 5)  # large enough that log Z is far from 0
    errors = check_pair(forward, softmax_cross_entropy_backward, dict(logits=logits), ["logits"])
    assert errors["logits"] < SMOOTH_TOL, errors


def test_z_loss_value_and_pad_rows():
    forward, targets = _ce(pad_id=0, z_loss=0.5)
    logits = normal(2, 3, 5)
    loss, cache = forward(logits)
    plain, _ = softmax_cross_entropy_forward(logits, targets, 0)
    log_z = np.log(np.exp(logits).sum(-1))  # (2, 3)
    real = targets != 0
    assert loss == pytest.approx(plain + 0.5 * (log_z[real] ** 2).mean(), rel=1e-13)
    d = softmax_cross_entropy_backward(1.0, cache)
    assert not d[~real].any()  # pad rows: no gradient, from either term
    # the z-loss's part of the gradient is 2 c log Z p / N in a real row
    want = 2 * 0.5 * log_z[real][:, None] * np.exp(logits[real]) / np.exp(logits[real]).sum(-1, keepdims=True) / 4
    assert rel_error(d[real] - softmax_cross_entropy_backward(1.0, softmax_cross_entropy_forward(
        logits, targets, 0)[1])[real], want) < 1e-13


def test_z_loss_pulls_log_z_to_zero():
    """Descending the z-loss alone (the cross-entropy kept) moves log Z towards 0 without changing the
    softmax much: adding a constant to a row changes log Z only."""
    logits = normal(4, 6) + 5.0
    targets = np.array([1, 2, 3, 4])
    for _ in range(200):
        _, cache = softmax_cross_entropy_forward(logits, targets, None, 0.0, 1.0)
        logits = logits - 0.5 * softmax_cross_entropy_backward(1.0, cache)
    log_z = np.log(np.exp(logits).sum(-1))
    assert np.abs(log_z).max() < 0.5


def test_z_loss_zero_leaves_the_loss_bit_for_bit():
    logits, targets = normal(3, 4, 7).astype(np.float32), RNG.integers(0, 7, (3, 4))
    for path in (True, False):
        fast.use_fast(path)
        try:
            a, da = cross_entropy(logits, targets, pad_id=0, label_smoothing=0.1)
            b, db = cross_entropy(logits, targets, pad_id=0, label_smoothing=0.1, z_loss=0.0)
        finally:
            fast.use_fast(fast.ON_BY_DEFAULT)
        assert a == b and np.array_equal(da, db)
    ref, ref_cache = softmax_cross_entropy_forward(logits, targets, 0, 0.1)
    assert softmax_cross_entropy_forward(logits, targets, 0, 0.1, 0.0)[0] == ref
    assert ref_cache.z_loss == 0.0 and ref_cache.log_z is None


def test_cross_entropy_with_z_loss_runs_the_textbook_pair_and_checks_it():
    logits, targets = normal(2, 3, 5), np.array([[1, 2, 0], [4, 0, 3]])
    loss, d = cross_entropy(logits, targets, pad_id=0, z_loss=1e-2)
    want, cache = softmax_cross_entropy_forward(logits, targets, 0, 0.0, 1e-2)
    assert loss == want and np.array_equal(d, softmax_cross_entropy_backward(1.0, cache))
    with pytest.raises(NumpyTransformerError, match=r"^z_loss must be a finite number in \[0, inf\), got -1.0$"):
        cross_entropy(logits, targets, z_loss=-1.0)


def test_z_loss_flag_reaches_the_lm_loss():
    args = build_parser().parse_args(["train", "lm", "--z-loss", "1e-4", "--block", "parallel", "--norm", "pre"])
    assert vars(args)["LMData.z_loss"] == 1e-4 and vars(args)["LMData.block"] == "parallel"
    task = lm_task(z_loss=0.01)
    logits, targets = normal(2, 4, len(task.tokenizer)), RNG.integers(0, len(task.tokenizer), (2, 4))
    with_z, _, d = task.loss(logits, targets, 0.0)
    without, _, d0 = lm_task().loss(logits, targets, 0.0)
    assert with_z > without and not np.array_equal(d, d0)


# ---- the parallel block ---------------------------------------------------------------------------
def test_parallel_block_module_gradients():
    block = ParallelBlock(8, 4, 12, 0.1, np.random.default_rng(1), np.random.default_rng(2)).train()
    errors = check_module(block, [normal(2, 5, 8)], ["x"])
    assert max(errors.values()) < SMOOTH_TOL, errors


def test_parallel_block_is_the_equation():
    block = ParallelBlock(8, 4, 12, 0.0, np.random.default_rng(1), np.random.default_rng(2)).eval()
    x = normal(2, 5, 8)
    h = block.norm(x)
    assert rel_error(block(x), x + block.self_attn(h) + block.ffn(h)) < 1e-15
    assert "norm.gamma" in block.parameters() and not any("sublayer" in k for k in block.parameters())


def tiny_config(**kw) -> TransformerConfig:
    base = dict(src_vocab_size=7, d_model=8, n_heads=4, n_layers=2, d_ff=12, max_len=8, dropout=0.1,
                dtype="float64", norm_first=True, tie_embeddings=True, positions="learned", block="parallel")
    return TransformerConfig(**(base | kw))


@pytest.mark.parametrize("kw", [{}, dict(norm="rmsnorm", activation="swiglu", positions="rotary", n_kv_heads=2)],
                         ids=["gpt2", "llama"])
def test_parallel_gpt_whole_model_gradients(kw):
    model = TransformerLM(tiny_config(**kw)).train()
    assert isinstance(model.layers[0], ParallelBlock)
    errors = check_module(model, [IDS], [None], max_entries=8)
    assert set(errors) == set(model.parameters())
    assert max(errors.values()) < WHOLE_MODEL_TOL, errors


def test_parallel_gpt_cached_decoding_equals_the_full_forward():
    model = TransformerLM(tiny_config(positions="rotary")).eval()
    ids = np.array([[1, 4, 0, 6, 2, 5, 3]])
    caches = model.new_kv_caches()
    parts = [model.forward_cached(ids[:, :3], caches, 0), model.forward_cached(ids[:, 3:], caches, 3)]
    assert np.abs(np.concatenate(parts, axis=1) - model.forward(ids)).max() < 1e-12


@pytest.mark.parametrize("make, message", [
    (lambda: tiny_config(norm_first=False), r"block='parallel' .* needs norm_first=True"),
    (lambda: tiny_config(block="hybrid"), "TransformerConfig.block must be"),
    (lambda: Transformer(tiny_config(tie_embeddings=False, positions="sinusoidal")), "block='parallel' is the language"),
    (lambda: TransformerClassifier(tiny_config(tie_embeddings=False, positions="sinusoidal")), "block='parallel'"),
    (lambda: lm_task(block="parallel", norm="post"), "--block parallel .* needs --norm pre, got --norm post"),
])
def test_parallel_refuses_in_one_line(make, message):
    with pytest.raises(NumpyTransformerError, match=message) as e:
        make()
    assert "\n" not in str(e.value)


def lm_task(norm="pre", **data) -> LanguageModelTask:
    model = ModelSettings(d_model=16, n_heads=4, n_layers=1, d_ff=32, dropout=0.0, norm=norm,
                          tie_embeddings=True, dtype="float64")
    data = LMData(corpus="embedded", tokenization="char", block_size=16, batch_size=8, batches_per_epoch=5,
                  embedded_chars=20000, **data)
    return LanguageModelTask(data, model)


def test_the_parallel_gpt_trains_with_the_z_loss():
    """60 updates on the embedded corpus: the validation loss falls by more than a nat per character."""
    task = lm_task(block="parallel", z_loss=1e-4)
    model = task.build_model()
    assert model.cfg.block == "parallel"
    before, after = train_briefly(task, model)
    assert after < before - 1.0, (before, after)


def test_a_config_saved_before_block_loads_sequential():
    from numpytransformer.nn.config import with_later_defaults

    saved = tiny_config(block="sequential").to_dict()
    del saved["block"]
    assert with_later_defaults(saved)["block"] == "sequential"
    assert TransformerConfig.from_dict(saved).block == "sequential"


# ---- EMA of the weights ---------------------------------------------------------------------------
def test_ema_update_formula():
    w = {"W": np.array([[1.0, 2.0]]), "b": np.array([0.0])}
    ema = EMA(w, 0.9)
    w["W"][...] = [[3.0, 0.0]]
    w["b"][...] = [10.0]
    ema.update(w)
    np.testing.assert_allclose(ema.shadow["W"], [[1.2, 1.8]], rtol=0, atol=1e-15)
    np.testing.assert_allclose(ema.shadow["b"], [1.0], rtol=0, atol=1e-15)
    ema.update(w)  # 0.9 * 1.2 + 0.1 * 3
    np.testing.assert_allclose(ema.shadow["W"], [[1.38, 1.62]], rtol=0, atol=1e-15)
    out = {k: np.zeros_like(v) for k, v in w.items()}
    ema.copy_to(out)
    assert np.array_equal(out["W"], ema.shadow["W"]) and w["W"][0, 0] == 3.0  # the weights themselves untouched


def test_ema_keeps_float32_and_refuses_bad_input_in_one_line():
    ema = EMA({"p": np.zeros(3, np.float32)}, 0.5)
    ema.update({"p": np.ones(3, np.float32)})
    assert ema.shadow["p"].dtype == np.float32
    for bad, message in ((lambda: EMA({"p": np.zeros(2)}, 1.0), r"^decay must be a finite number in \(0, 1\), got 1.0$"),
                         (lambda: ema.update({"q": np.zeros(3)}), r"these differ: \['p', 'q'\]$"),
                         (lambda: ema.update({"p": np.zeros(4)}), r"params\['p'\] has shape \(4,\), expected \(3,\)$")):
        with pytest.raises(NumpyTransformerError, match=message):
            bad()


def _reverse_task():
    data = ReverseData(n_symbols=8, min_len=1, max_len=6, n_train=300, n_val=40, n_test=40, batch_size=64)
    return ReversalTask(data, ModelSettings(d_model=16, n_heads=2, n_layers=1, d_ff=32, dropout=0.1, seed=0))


def _cfg(**kw):
    return TrainConfig(**(dict(epochs=3, warmup=5, label_smoothing=0.1, log_every=10 ** 6, ema=0.9) | kw))


def test_ema_run_resumes_exactly(tmp_path):
    """Interrupted after epoch 2 (ema/ then holds epoch 2) and resumed: ema/ at the end equals an
    uninterrupted run's, bit for bit; each epoch logs the average's validation."""
    straight_logs = []
    task = _reverse_task()
    straight = Trainer(task.build_model(), task, _cfg(), tmp_path / "a", log=straight_logs.append)
    straight.fit()
    assert sum("moving average of the weights (decay 0.9): validation" in m for m in straight_logs) == 3
    assert "ema_exact_match" in straight.history["epochs"][-1]

    def log(msg):
        if msg.startswith("epoch 2 done"):
            raise KeyboardInterrupt

    task = _reverse_task()
    with pytest.raises(KeyboardInterrupt):
        Trainer(task.build_model(), task, _cfg(), tmp_path / "b", log=log).fit()
    task = _reverse_task()
    again = Trainer(task.build_model(), task, _cfg(), tmp_path / "b", log=lambda m: None)
    again.resume()
    again.fit()
    for k, p in straight.ema.shadow.items():
        np.testing.assert_array_equal(again.ema.shadow[k], p)
    a = np.load(next((tmp_path / "a" / "ema").glob("weights-*.npz")))
    b = np.load(next((tmp_path / "b" / "ema").glob("weights-*.npz")))
    assert sorted(a.files) == sorted(b.files) and all(np.array_equal(a[k], b[k]) for k in a.files)
    assert not np.array_equal(a[a.files[0]], np.load(next((tmp_path / "a" / "last").glob("weights-*.npz")))[a.files[0]])


def test_train_with_ema_writes_ema_that_eval_accepts(tmp_path, capsys):
    out = tmp_path / "run"
    tiny = ["train", "reverse", "--n-symbols", "6", "--max-len", "6", "--n-train", "300", "--n-val", "30",
            "--n-test", "30", "--d-model", "16", "--heads", "2", "--d-ff", "32", "--layers", "1", "--epochs", "1"]
    assert main(tiny + ["--ema", "0.9", "--out", str(out)]) == 0
    assert "saved as ema/" in capsys.readouterr().out
    doc = json.loads((out / "ema" / "checkpoint.json").read_text())
    assert doc["train"]["ema"] == 0.9 and doc["epoch"] == 1
    assert main(["eval", "--checkpoint", str(out / "ema")]) == 0
    assert capsys.readouterr().out.strip()


# ---- min_len of the decoders ----------------------------------------------------------------------
def _eager_to_stop():
    """A tiny translation model whose output bias makes EOS (id 2) the most likely token at every step."""
    model = Transformer(TransformerConfig(src_vocab_size=9, d_model=8, n_heads=2, n_layers=1, d_ff=16, max_len=12,
                                          dropout=0.0, dtype="float64"))
    model.parameters()["out.linear.b"][2] += 50.0
    return model


def test_min_len_holds_greedy_and_beam_to_a_least_length():
    model, src = _eager_to_stop(), np.array([[3, 4, 5, 0], [6, 7, 0, 0]])
    assert greedy_decode(model, src, 10) == [[], []] and beam_search(model, src, 10, beam_size=3) == [[], []]
    for use_cache in (True, False):
        out = greedy_decode(model, src, 10, use_cache=use_cache, min_len=4)
        assert [len(o) for o in out] == [4, 4] and 2 not in sum(out, [])
    assert [len(o) for o in beam_search(model, src, 10, beam_size=3, min_len=3)] == [3, 3]
    assert greedy_decode(model, src, 10, min_len=0) == greedy_decode(model, src, 10)


def test_min_len_zero_changes_nothing_on_an_ordinary_model():
    model = Transformer(TransformerConfig(src_vocab_size=9, d_model=8, n_heads=2, n_layers=1, d_ff=16, max_len=12,
                                          dropout=0.0, dtype="float64", seed=3))
    src = np.array([[3, 4, 5, 0], [6, 7, 8, 1]])
    assert greedy_decode(model, src, 8, min_len=0) == greedy_decode(model, src, 8)
    assert beam_search(model, src, 8, 3, min_len=0) == beam_search(model, src, 8, 3)


def test_min_len_is_checked_in_one_line():
    with pytest.raises(NumpyTransformerError, match=r"^min_len must be"):
        greedy_decode(_eager_to_stop(), np.array([[3, 4]]), 5, min_len=6)
    with pytest.raises(NumpyTransformerError, match=r"^min_len must be"):
        beam_search(_eager_to_stop(), np.array([[3, 4]]), 5, min_len=-1)


# ---- min-p sampling -------------------------------------------------------------------------------
def test_min_p_filter():
    probs = np.array([0.5, 0.25, 0.1, 0.1, 0.05])
    np.testing.assert_allclose(min_p_filter(probs, 0.2), [0.5, 0.25, 0.1, 0.1, 0.0] / np.float64(0.95), rtol=1e-15)
    np.testing.assert_allclose(min_p_filter(probs, 0.5), [2 / 3, 1 / 3, 0, 0, 0], rtol=1e-15)
    assert np.array_equal(min_p_filter(probs, 0.0), probs)
    assert np.array_equal(min_p_filter(probs, 1.0), [1.0, 0, 0, 0, 0])
    flat = np.full(5, 0.2)  # a flat distribution keeps every token whatever p
    assert np.array_equal(min_p_filter(flat, 0.9), flat)


def test_min_p_in_next_token_probs_and_generate():
    z = np.log(np.array([0.5, 0.25, 0.1, 0.1, 0.05]))
    np.testing.assert_allclose(next_token_probs(z, min_p=0.3), [2 / 3, 1 / 3, 0, 0, 0], rtol=1e-14)
    assert np.array_equal(next_token_probs(z, top_k=4), next_token_probs(z, top_k=4, min_p=None))
    with pytest.raises(NumpyTransformerError, match=r"^min_p must be a number in \[0, 1\] or None, got 1.5$"):
        next_token_probs(z, min_p=1.5)
    model = TransformerLM(TransformerConfig(src_vocab_size=7, d_model=8, n_heads=2, n_layers=1, d_ff=16, max_len=8,
                                            dropout=0.0, norm_first=True, positions="learned"))
    model.parameters()["out.linear.b"][:] = [0.0, 3.0, 2.9, -5, -5, -5, -5]  # two likely tokens, five very unlikely
    ids = generate(model, [1], 40, min_p=0.5, seed=1)
    assert set(ids) <= {1, 2} and generate(model, [1], 40, min_p=0.5, seed=1, use_cache=False) == ids
    assert generate(model, [1], 40, seed=1) == generate(model, [1], 40, seed=1, min_p=None)


def test_generate_flag_min_p(tmp_path, capsys):
    args = build_parser().parse_args(["generate", "--checkpoint", "x", "--min-p", "0.1"])
    assert args.min_p == 0.1
