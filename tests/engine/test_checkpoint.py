"""Loading checkpoints in the HF layout (one file or sharded, a directory or the local HF cache) and each error."""

from __future__ import annotations

import json
import shutil

import pytest
import torch
from safetensors.torch import load_file, save_file

from dice_lsp.engine import checkpoint
from dice_lsp.engine.checkpoint import load, save
from dice_lsp.engine.errors import EngineError


@pytest.fixture
def copy(tiny_model_dir, tmp_path):
    target = tmp_path / "model"
    shutil.copytree(tiny_model_dir, target)
    return target


def same_weights(a, b):
    return all(torch.equal(x, y) for x, y in zip(a.model.state_dict().values(), b.model.state_dict().values()))


def test_load_single_file_checkpoint(tiny_model_dir):
    loaded = load(str(tiny_model_dir), device="cpu")
    assert loaded.config.mask_token_id == loaded.tokenizer.token_id("<|MASK|>")
    assert loaded.tokenizer.token_id("<|im_end|>") in loaded.config.stop_token_ids
    assert loaded.model.lm_head.weight.dtype == torch.float32 and not loaded.model.training
    assert loaded.chat_template and "<|im_start|>" in loaded.chat_template
    assert loaded.tokenizer.decode(loaded.tokenizer.encode("__global__ void k() {}")) == "__global__ void k() {}"


def test_sharded_checkpoint_loads_the_same_weights(tiny_model_dir, tmp_path):
    loaded = load(str(tiny_model_dir), device="cpu")
    sharded = save(loaded.model, loaded, tmp_path / "sharded", max_shard_bytes=50_000)
    assert len(list(sharded.glob("model-*-of-*.safetensors"))) > 2 and not (sharded / "model.safetensors").exists()
    assert same_weights(load(str(sharded), device="cpu"), loaded)


def test_dtype_option(tiny_model_dir):
    assert load(str(tiny_model_dir), device="cpu", dtype="bfloat16").model.lm_head.weight.dtype == torch.bfloat16
    with pytest.raises(EngineError, match="unknown dtype"):
        load(str(tiny_model_dir), device="cpu", dtype="int8")


def test_hub_id_found_in_the_local_cache(tiny_model_dir, tmp_path, monkeypatch):
    repo = tmp_path / "hf" / "hub" / "models--DeadlyKitt3n--DICE-tiny"
    shutil.copytree(tiny_model_dir, repo / "snapshots" / "abc123")
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("abc123")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    loaded = load("DeadlyKitt3n/DICE-tiny", device="cpu")
    assert loaded.path == repo / "snapshots" / "abc123"


def test_hub_id_not_cached_says_how_to_get_it(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HOME", str(tmp_path))
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    with pytest.raises(EngineError, match="huggingface-cli download DeadlyKitt3n/DICE-1.7B"):
        load("DeadlyKitt3n/DICE-1.7B")


def test_missing_config(copy):
    (copy / "config.json").unlink()
    with pytest.raises(EngineError, match="no config.json"):
        load(str(copy))


def test_missing_tokenizer(copy):
    (copy / "tokenizer.json").unlink()
    with pytest.raises(EngineError, match="no tokenizer.json"):
        load(str(copy))


def test_missing_weights(copy):
    (copy / "model.safetensors").unlink()
    with pytest.raises(EngineError, match="no model.safetensors"):
        load(str(copy))


def test_missing_shard(tiny_model_dir, tmp_path):
    loaded = load(str(tiny_model_dir), device="cpu")
    sharded = save(loaded.model, loaded, tmp_path / "sharded", max_shard_bytes=50_000)
    (sharded / "model-00002-of-" f"{len(list(sharded.glob('model-*'))):05d}.safetensors").unlink()
    with pytest.raises(EngineError, match="lacks shard model-00002-of-"):
        load(str(sharded))


def test_shape_mismatch_names_the_tensor(copy):
    config = json.loads((copy / "config.json").read_text())
    config["intermediate_size"] = 96
    (copy / "config.json").write_text(json.dumps(config))
    with pytest.raises(EngineError, match=r"model\.layers\.0\.mlp\.\w+_proj\.weight has shape"):
        load(str(copy))


def test_missing_tensor_is_named(copy):
    weights = load_file(str(copy / "model.safetensors"))
    del weights["model.layers.1.self_attn.k_norm.weight"]
    save_file(weights, str(copy / "model.safetensors"))
    with pytest.raises(EngineError, match=r"lacks tensor model\.layers\.1\.self_attn\.k_norm\.weight"):
        load(str(copy))


def test_not_a_directory(tmp_path):
    with pytest.raises(EngineError, match="no checkpoint directory"):
        load(str(tmp_path / "nowhere"))


def test_save_replaces_an_existing_checkpoint_whole(tiny_model_dir, tmp_path):
    loaded = load(str(tiny_model_dir), device="cpu")
    target = tmp_path / "out"
    save(loaded.model, loaded, target, max_shard_bytes=50_000)
    save(loaded.model, loaded, target)  # now one file: no stale shards or index may remain
    assert sorted(p.name for p in target.iterdir()) == [
        "config.json", "generation_config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"]
    assert [p.name for p in tmp_path.iterdir()] == ["out"], "no temporary directories left behind"
    assert same_weights(load(str(target), device="cpu"), loaded)


def test_default_model_is_the_bundled_one_unless_the_environment_says_otherwise(tiny_model_dir, tmp_path,
                                                                               monkeypatch):
    monkeypatch.delenv("DICE_LSP_DEFAULT_MODEL", raising=False)
    monkeypatch.setattr(checkpoint, "BUNDLED", tmp_path / "bundled")
    with pytest.raises(EngineError, match="no default model is installed"):
        checkpoint.choose("")
    shutil.copytree(tiny_model_dir, tmp_path / "bundled")
    assert checkpoint.choose("") == str(tmp_path / "bundled")
    assert checkpoint.choose("some/model") == "some/model"  # a configured model always wins
    monkeypatch.setenv("DICE_LSP_DEFAULT_MODEL", str(tiny_model_dir))
    assert checkpoint.choose(None) == str(tiny_model_dir)
    monkeypatch.setenv("DICE_LSP_DEFAULT_MODEL", "none")
    with pytest.raises(EngineError, match="huggingface-cli download DeadlyKitt3n/DICE-1.7B"):
        checkpoint.choose("")
