"""Task behaviour not covered by the command-line and training tests."""
from numpytransformer.settings import ModelSettings
from numpytransformer.tasks.translate import TranslateData, TranslationTask


def test_translate_attention_on_an_output_that_runs_to_max_len():
    """An untrained model translates up to max_len tokens without <eos>; the maps of [BOS] + output
    must still fit the model (the output used to be one token too long for it)."""
    task = TranslationTask(TranslateData(dataset="numbers", tokenizer="bpe", bpe_merges=50, n_train=400, n_val=40,
                                         n_test=40, max_number=999, max_len=12),
                           ModelSettings(d_model=16, n_heads=2, n_layers=1, d_ff=32, dropout=0.0))
    maps, labels, _ = task.attention(task.build_model(), "three hundred forty-seven")
    assert maps["decoder.layers.0.self_attn"].shape == (2, 12, 12)
    assert labels["decoder.layers.0.cross_attn"][0][0] == "<bos>"


def test_translation_records_what_data_it_read():
    """A digest of the training and validation pairs, so that --resume refuses other data."""
    from numpytransformer.settings import ModelSettings
    from numpytransformer.tasks.translate import TranslateData, TranslationTask

    small = ModelSettings(d_model=16, n_heads=2, n_layers=1, d_ff=32)
    a, b = (TranslationTask(TranslateData(n_train=50, n_val=10, n_test=10, max_number=999, min_freq=1),
                            ModelSettings(**{**small.__dict__, "seed": seed})) for seed in (0, 1))
    s = a.data_summary()
    assert s["train_pairs"] == 50 and s["val_pairs"] == 10 and len(s["sha256"]) == 64
    assert s != b.data_summary()  # another seed draws other number pairs
