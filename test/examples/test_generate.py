"""fusegrad.examples.generate: the cached GPT equals the gpt example's full-sequence model, decodes with one capture,
wraps at the context, and the command continues a prompt from a checkpoint or says to train first."""

from __future__ import annotations

import pathlib

import numpy as np
import pytest

import fusegrad.engine.realize as realize_module
from fusegrad import Tensor, UOp
from fusegrad.examples import generate
from fusegrad.examples.gpt import GPT, GPTConfig, save_checkpoint
from fusegrad.nn import optim
from fusegrad.nn.state import get_parameters

CFG = GPTConfig(vocab_size=97, context=12, dim=16, heads=2, layers=2)


def _model() -> GPT:
    Tensor.manual_seed(3)
    return GPT(CFG)


def test_cached_logits_equal_the_full_sequence_model() -> None:
    model = _model()
    ids = [5, 17, 40, 2, 9, 60, 33, 8]
    full = model(Tensor([ids], dtype="int32")).numpy()[0]
    cached = generate.CachedGPT(model)
    position = UOp.variable("start_pos", 1, CFG.context - 1)
    np.testing.assert_allclose(cached.forward(Tensor([ids[:2]], dtype="int32"), 0).numpy()[0], full[1], atol=1e-4)
    for pos in range(2, len(ids)):
        step = cached.step_jit(Tensor([[ids[pos]]], dtype="int32").realize(), position.bind(pos)).numpy()[0]
        np.testing.assert_allclose(step, full[pos], rtol=1e-4, atol=1e-4)


def test_decoding_compiles_nothing_after_the_capture_and_wraps_at_the_context(monkeypatch: pytest.MonkeyPatch) -> None:
    cached = generate.CachedGPT(_model())
    compiles: list[int] = []
    real = realize_module.get_program
    monkeypatch.setattr(realize_module, "get_program", lambda ast, r: compiles.append(1) or real(ast, r))
    counts = []
    greedy = (0.0, 0, 1.0)
    for token in cached.continue_text([1, 2, 3], 3 * CFG.context, greedy, np.random.default_rng(0)):
        assert 0 <= token < CFG.vocab_size
        counts.append(len(compiles))
    # after the second decode step (the capture) and the first wrap (a prompt of context/2), no kernel is new
    first_wrap = CFG.context - 3 + 1
    assert counts[first_wrap + 1 :] == [counts[first_wrap]] * (len(counts) - first_wrap - 1)
    assert cached.step_jit.captured is not None


def test_command_continues_a_prompt(tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]) -> None:
    model = _model()
    path = tmp_path / "gpt.safetensors"
    save_checkpoint(path, model, optim.AdamW(get_parameters(model)), 7)
    generate.main(["--checkpoint", str(path), "--prompt", "def f", "--length", "5", "--temperature", "0"])
    out, err = capsys.readouterr()
    assert out.startswith("def f")
    assert len(out) == len("def f") + 5  # the summary goes to stderr
    assert "step 7" in err
    assert "5 characters in" in err


def test_command_without_a_checkpoint_says_to_train(tmp_path: pathlib.Path) -> None:
    with pytest.raises(SystemExit, match=r"no checkpoint at .*python -m fusegrad\.examples\.gpt"):
        generate.main(["--checkpoint", str(tmp_path / "missing.safetensors")])


def test_command_help_and_bad_settings(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as e:
        generate.main(["--help"])
    assert e.value.code == 0
    assert "--top-p" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        generate.main(["--top-k", "-1"])
    assert "top_k must be >= 0" in capsys.readouterr().err
