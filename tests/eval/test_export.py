"""Export to Hugging Face: a real run's newest checkpoint and newest published policy version load in transformers
(the independent reference) with logits equal to our model's on the exported weights (fp32, the project's 1e-4),
and the run's tokenizer with its chat template comes along."""

from __future__ import annotations

import json

import jax
import numpy as np
import pytest
import torch
from transformers import AutoTokenizer, LlamaForCausalLM

from swerl_jax.eval import export
from swerl_jax.model.llama import forward
from swerl_jax.policy import model_config_from
from swerl_jax.resolve import load_run_config
from swerl_jax.sampler import weights
from tests.eval.fake_runs import STEP, small_run

TOL = 1e-4  # the project's float32 logit bound (swerl_jax.model.check_logits)


def _hf_logits(path, tokens: np.ndarray) -> np.ndarray:
    model = LlamaForCausalLM.from_pretrained(str(path), torch_dtype=torch.float32).eval()
    with torch.no_grad():
        return model(torch.as_tensor(tokens, dtype=torch.long)).logits.numpy()


def _ours(run, params, tokens):
    return np.asarray(forward(model_config_from(load_run_config(run)), params, tokens))


def test_newest_checkpoint_exports_to_a_directory_transformers_loads(tiny_cpu_short_run, tmp_path):
    run, _ = tiny_cpu_short_run
    done = export.main(["--run", str(run), "--out", str(tmp_path / "hf")])
    assert done["checkpoint_step"] == 16 and done["dtype"] == "float32"
    _, params = export.checkpoint_params(run / "checkpoints", 16)
    tok = AutoTokenizer.from_pretrained(str(tmp_path / "hf"))
    assert tok.chat_template and tok.eos_token == "<|im_end|>"
    tokens = np.asarray([tok("def f(x):\n    return x + 1\n")["input_ids"]], np.int32)
    np.testing.assert_allclose(_hf_logits(tmp_path / "hf", tokens), _ours(run, params, tokens), atol=TOL, rtol=0)


def test_published_policy_version_exports(tiny_cpu_short_run, tmp_path):
    run, _ = tiny_cpu_short_run
    newest = weights.latest_version(run / "policy")
    done = export.main(["--run", str(run), "--out", str(tmp_path / "hf"), "--version", "-1"])
    # the run ends by publishing its final policy (issue 31.4: policy/ used to end one step old, at v15)
    assert done["policy_version"] == newest == 16
    params = jax.tree.map(np.asarray, weights.load(run / "policy", newest))
    _, final = export.checkpoint_params(run / "checkpoints", 16)
    jax.tree.map(np.testing.assert_array_equal, params, jax.tree.map(np.asarray, final))
    tokens = np.asarray([[1, 2, 3, 4, 5, 6, 7]], np.int32)
    np.testing.assert_allclose(_hf_logits(tmp_path / "hf", tokens), _ours(run, params, tokens), atol=TOL, rtol=0)


def test_conflicting_or_destructive_requests_are_refused(tiny_cpu_short_run, tmp_path):
    """Held-out check: --stage/--step with --version were ignored, --dtype int8 zeroed every weight, and --out RUN
    overwrote the run's config.json; each exited 0."""
    run, _ = tiny_cpu_short_run
    for extra, message in ((["--version", "-1", "--stage", "sft"], "give one or the other"),
                           (["--version", "-1", "--step", "16"], "give one or the other"),
                           (["--dtype", "int8"], "floating type")):
        with pytest.raises(SystemExit, match=message):
            export.main(["--run", str(run), "--out", str(tmp_path / "hf"), *extra])
    before = (run / "config.json").read_text()
    with pytest.raises(SystemExit, match="inside the run"):
        export.main(["--run", str(run), "--out", str(run)])
    assert (run / "config.json").read_text() == before and not (tmp_path / "hf").exists()


def test_missing_step_is_named(tiny_cpu_short_run, tmp_path):
    run, _ = tiny_cpu_short_run
    with pytest.raises(SystemExit, match="checkpoint step 7 is not in"):
        export.main(["--run", str(run), "--out", str(tmp_path / "hf"), "--step", "7"])


def test_sft_checkpoint_exports_and_scores_its_training_records(tiny_cpu_short_run, tmp_path):
    """The SFT baseline evaluated the paper's way: its checkpoint exported (`--stage sft`), then the repair metric
    on two of the records it was fine-tuned on, greedy, through the exported Hugging Face directory (measured on
    this machine: one exact fix, one malformed answer; the figures depend on XLA's CPU numerics, so only their
    consistency is asserted)."""
    from swerl_jax.data.records import write_records
    from swerl_jax.data.synthetic import synthetic_records
    from swerl_jax.eval import repair_score

    run, _ = tiny_cpu_short_run
    done = export.main(["--run", str(run), "--out", str(tmp_path / "sft-hf"), "--stage", "sft"])
    assert done["stage"] == "sft" and done["checkpoint_step"] == 100
    config = load_run_config(run)
    records = synthetic_records(config.data.synthetic_num_records, seed=config.seed,
                                repos=[config.data.synthetic_repos])[:2]
    write_records(tmp_path / "train2.jsonl", records)
    result = repair_score.main(["--config=experiments/tiny_cpu.py", f"--records={tmp_path / 'train2.jsonl'}",
                                f"--out={tmp_path / 'repair'}", f"--hf_dir={tmp_path / 'sft-hf'}"])
    rows = (tmp_path / "repair" / "repair.jsonl").read_text().splitlines()
    assert result.scored == result.answers == len(rows) == 2
    assert 0.0 <= result.exact_rate <= result.format_rate <= 1.0 and result.score <= 100 * result.format_rate


def test_an_export_generates_in_transformers_as_our_sampler_does(tiny_cpu_short_run, tmp_path):
    """Issue 46: without eos/pad ids in config.json and a generation_config.json, transformers' `generate` ran past
    `<|im_end|>` to its length limit. Greedy, on the exported weights: the same tokens as our engine, ending at the
    same stop token."""
    from transformers import GenerationConfig

    from swerl_jax.data.loader import source_from_config
    from swerl_jax.data.prompts import build_prompt
    from swerl_jax.sampler.engine import SamplingEngine
    from swerl_jax.sampler.types import SamplingParams
    from swerl_jax.tokenizer import tokenizer_for

    run, _ = tiny_cpu_short_run
    export.main(["--run", str(run), "--out", str(tmp_path / "hf")])
    tok = AutoTokenizer.from_pretrained(str(tmp_path / "hf"))
    assert GenerationConfig.from_pretrained(str(tmp_path / "hf")).eos_token_id == tok.eos_token_id
    config = load_run_config(run)
    _, params = export.checkpoint_params(run / "checkpoints", 16)
    record = next(iter(source_from_config(config)))  # a training record: the policy learned to answer and stop
    prompt = build_prompt(record, tokenizer_for(config.model), int(config.data.max_prompt_len),
                          str(config.data.prompt_style)).ids.tolist()
    engine = SamplingEngine(model_config_from(config), params, tokenizer=tokenizer_for(config.model),
                            max_batch=1, max_prompt_len=len(prompt) + 16, max_new_tokens=256)
    ours = engine.generate([prompt], SamplingParams(temperature=0.0, max_new_tokens=256))[0][0].tokens.tolist()
    assert ours[-1] == tok.eos_token_id and len(ours) < 256, "the policy must stop by itself for this test to mean it"
    model = LlamaForCausalLM.from_pretrained(str(tmp_path / "hf"), torch_dtype=torch.float32).eval()
    with torch.no_grad():
        theirs = model.generate(torch.as_tensor([prompt]), max_new_tokens=256, do_sample=False)[0, len(prompt):]
    assert theirs.tolist() == ours


def test_relative_run_and_out_paths_resolve_from_the_current_directory(tmp_path, monkeypatch):
    """Issue 46 item 9: the README's `--run runs/X` (relative) raised `AttributeError: 'NoneType' object has no
    attribute 'tree'` (Orbax reads relative paths as nothing)."""
    small_run(tmp_path / "runs" / "X")
    monkeypatch.chdir(tmp_path)
    done = export.main(["--run", "runs/X", "--out", "hf"])
    assert done["checkpoint_step"] == STEP and done["path"] == str(tmp_path / "hf")
    assert (tmp_path / "hf" / "config.json").is_file()
    assert export.main(["--run", "runs/X", "--out", "hf-v", "--version", "-1"])["policy_version"] == STEP


def test_weights_of_another_model_are_one_line_before_anything_is_written(tmp_path):
    """Issue 46 item 10: a checkpoint of another shape than its run's config.json gave Orbax's shape errors."""
    run = small_run(tmp_path / "run", model="demo-7m", weights_model="tiny")
    for extra in ([], ["--version", "-1"]):
        with pytest.raises(SystemExit) as err:
            export.main(["--run", str(run), "--out", str(tmp_path / "hf"), *extra])
        (line,) = str(err.value).splitlines()
        assert line.startswith("swerl_jax.eval.export: ") and "the weights are not" in line, line
        assert f"{run / 'config.json'}'s model.name='demo-7m'" in line and "embed_tokens is [512, 64] in the " \
            "weights, [49152, 128] in the model" in line, line
    assert not (tmp_path / "hf").exists()


def test_a_hugging_face_folder_or_a_cut_config_as_run_is_one_line_naming_the_file(tmp_path):
    """Issue 46 held-out item 6: --run at a Hugging Face folder said "'unknown config key architectures'", and a
    truncated config.json gave the JSON error without naming the file."""
    hf, cut = tmp_path / "hf", tmp_path / "cut"
    hf.mkdir()
    (hf / "config.json").write_text(json.dumps({"model_type": "llama", "architectures": ["LlamaForCausalLM"]}))
    run = small_run(cut)
    (run / "config.json").write_text((run / "config.json").read_text()[:-20])
    for folder, said in ((hf, "is a Hugging Face model's config.json"), (cut, "does not parse as JSON")):
        with pytest.raises(SystemExit) as err:
            export.main(["--run", str(folder), "--out", str(tmp_path / "out")])
        (line,) = str(err.value).splitlines()
        assert f"{folder / 'config.json'}" in line and said in line, line
    assert not (tmp_path / "out").exists()


def test_a_stage_folder_as_run_names_the_run_and_the_stage_flag(tmp_path):
    """New-user check: --run RUN/sft said only "not a run directory (no config.json)"."""
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.json").write_text("{}")  # never read: the folder is refused before
    (run / "sft" / "checkpoints").mkdir(parents=True)
    with pytest.raises(SystemExit) as err:
        export.main(["--run", str(run / "sft"), "--out", str(tmp_path / "out")])
    assert str(err.value) == (f"swerl_jax.eval.export: --run {run / 'sft'}: a folder inside the run {run}, not a run "
                              f"directory (no config.json); use --run {run} --stage sft")


def test_an_existing_folder_as_out_is_refused_and_kept(tmp_path):
    """Day-three check: --out at an existing HF folder (the base model's) deleted its safetensors shards and index
    and replaced its config.json with the export's, without a word."""
    run = small_run(tmp_path / "run")
    base = tmp_path / "base-model"
    base.mkdir()
    for name in ("config.json", "model-00001-of-00002.safetensors", "model.safetensors.index.json"):
        (base / name).write_text(name)
    with pytest.raises(SystemExit) as err:
        export.main(["--run", str(run), "--out", str(base)])
    (line,) = str(err.value).splitlines()
    assert f"--out {base}: already exists and holds files (config.json, model-00001" in line, line
    assert sorted((p.name, p.read_text()) for p in base.iterdir()) == sorted(
        (n, n) for n in ("config.json", "model-00001-of-00002.safetensors", "model.safetensors.index.json"))
    (tmp_path / "empty").mkdir()  # an empty folder is a fine place to export to
    done = export.main(["--run", str(run), "--out", str(tmp_path / "empty")])
    assert done["run"] == str(run) and done["checkpoint_step"] == STEP
    assert (tmp_path / "empty" / "config.json").is_file()


def test_an_interrupted_export_leaves_no_half_written_folder(tmp_path, monkeypatch):
    """Day-three check: Ctrl-C after the weights were written left --out with safetensors and a config.json but no
    tokenizer or stop ids: a folder that loads as a model and generates past its end token."""
    run = small_run(tmp_path / "run")

    def interrupted(*_args, **_kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(export, "write_stop_ids", interrupted)
    with pytest.raises(KeyboardInterrupt):
        export.main(["--run", str(run), "--out", str(tmp_path / "hf")])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]  # neither hf/ nor its staging folder
    monkeypatch.undo()
    assert export.main(["--run", str(run), "--out", str(tmp_path / "hf")])["path"] == str(tmp_path / "hf")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["hf", "run"]


def test_a_dtype_numpy_does_not_know_is_one_line_naming_the_flag(tmp_path):
    """Day-three check: --dtype bf16 said only "data type 'bf16' not understood"."""
    run = small_run(tmp_path / "run")
    with pytest.raises(SystemExit) as err:
        export.main(["--run", str(run), "--out", str(tmp_path / "hf"), "--dtype", "bf16"])
    assert str(err.value) == ("swerl_jax.eval.export: --dtype bf16: not a data type (did you mean bfloat16?); one of "
                              "float32, bfloat16, float16")
    assert not (tmp_path / "hf").exists()
