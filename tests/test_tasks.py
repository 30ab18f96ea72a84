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
