"""Prompt templates as data: a checkpoint's prompt_template.json (or the setting's file) is what the model is asked,
a malformed one is refused naming the file and the problem, and the answer prefix is given, not generated."""

from __future__ import annotations

import json
import shutil

import pytest

from dice_lsp.engine import prompts
from dice_lsp.engine.checkpoint import BUNDLED, load
from dice_lsp.engine.drafts import generate_kernel
from dice_lsp.engine.errors import EngineError
from dice_lsp.engine.templates import TEMPLATE_FILE, read_template, template_for
from dice_lsp.engine.tokenizer import Tokenizer
from dice_lsp.settings import read_settings
from tests.engine.test_prompts import PROBLEM, SKELETON

SHORT = {"system": None, "end_to_end": "Speed up:\n{reference}", "infill": "{reference}|{prefix}|{suffix}"}


@pytest.fixture
def checkpoint(tiny_model_dir, tmp_path):
    target = tmp_path / "model"
    shutil.copytree(tiny_model_dir, target)
    return target


def write(path, data) -> str:
    path.write_text(json.dumps(data) if not isinstance(data, str) else data)
    return str(path)


def test_the_built_in_template_round_trips_through_a_file(tmp_path):
    template = read_template(write(tmp_path / "ours.json", prompts.BUILT_IN.to_json()))
    prefix, _, suffix = prompts.skeleton_parts(SKELETON)
    assert prompts.end_to_end_prompt(PROBLEM, template) == prompts.end_to_end_prompt(PROBLEM)
    assert prompts.infill_prompt(PROBLEM, prefix, suffix, template) == prompts.infill_prompt(PROBLEM, prefix, suffix)
    assert template.answer_prefix == prompts.BUILT_IN.answer_prefix and template.origin.endswith("ours.json")


def test_placeholders_are_filled_once_and_other_braces_stay(tmp_path):
    raw = dict(SHORT, end_to_end="__global__ void k() { int i; }\n{reference}\n{{reference}}")
    template = read_template(write(tmp_path / "t.json", raw))
    (user,) = template.end_to_end_messages("x = '{prefix}'")
    assert user == {"role": "user",
                    "content": "__global__ void k() { int i; }\nx = '{prefix}'\n{x = '{prefix}'}"}
    system = read_template(write(tmp_path / "s.json", dict(SHORT, system="Be terse."))).end_to_end_messages("m")
    assert system[0] == {"role": "system", "content": "Be terse."}


@pytest.mark.parametrize("raw, expected", [
    (dict(SHORT, infill="{reference} and {prefix}"), "'infill' lacks the placeholder {suffix}"),
    (dict(SHORT, infill="nothing"), "'infill' lacks the placeholders {reference}, {prefix} and {suffix}"),
    ({"infill": SHORT["infill"]}, "'end_to_end' must be a string holding {reference}"),
    (dict(SHORT, end_to_end=3), "'end_to_end' must be a string holding {reference}, not int"),
    (dict(SHORT, end_to_end="{reference} {suffix}"), "'end_to_end' holds {suffix}, which only the infilling"),
    (dict(SHORT, user="{reference}"), "unknown key 'user'"),
    (dict(SHORT, system=["a"]), "'system' must be a string, or null"),
    (dict(SHORT, answer_prefix=None), "'answer_prefix' must be a string"),
    (["end_to_end"], "must be a JSON object"),
    ('{"end_to_end": ', "is not JSON"),
])
def test_a_malformed_template_is_refused_naming_the_file_and_the_problem(tmp_path, raw, expected):
    path = write(tmp_path / "bad_template.json", raw)
    with pytest.raises(EngineError) as error:
        read_template(path)
    assert expected in str(error.value) and path in str(error.value)


def test_a_missing_template_file_says_what_to_give(tmp_path):
    with pytest.raises(EngineError, match="no prompt template .*nowhere.json.*\"end_to_end\""):
        read_template(tmp_path / "nowhere.json")


def test_the_setting_wins_over_the_checkpoint_which_wins_over_ours(tmp_path):
    own = read_template(write(tmp_path / "own.json", SHORT))
    chosen = write(tmp_path / "chosen.json", dict(SHORT, system="chosen"))
    assert template_for("", own, prompts.BUILT_IN) is own
    assert template_for("", None, prompts.BUILT_IN) is prompts.BUILT_IN
    assert template_for("built-in", own, prompts.BUILT_IN) is prompts.BUILT_IN
    assert template_for(chosen, own, prompts.BUILT_IN).system == "chosen"


def test_a_checkpoints_template_is_read_at_load_and_asked_in(checkpoint, tmp_path):
    ours = load(str(checkpoint), device="cpu")
    assert ours.template is None
    write(checkpoint / TEMPLATE_FILE, SHORT)
    loaded = load(str(checkpoint), device="cpu")
    assert loaded.template.origin == str(checkpoint / TEMPLATE_FILE)
    args = dict(max_new_tokens=4, seed=0, given_prefix=False)
    (own,) = generate_kernel(PROBLEM, loaded, **args)
    (built_in,) = generate_kernel(PROBLEM, loaded, prompt_template="built-in", **args)
    tokenizer = loaded.tokenizer
    expected = len(tokenizer.encode(prompts.render(prompts.end_to_end_prompt(PROBLEM, loaded.template),
                                                   loaded.chat_template)))
    assert own.generation.prompt_tokens == expected < built_in.generation.prompt_tokens
    chosen = write(tmp_path / "chosen.json", dict(SHORT, end_to_end="Make this one faster, please:\n{reference}"))
    (by_setting,) = generate_kernel(PROBLEM, loaded, prompt_template=chosen, **args)
    assert by_setting.generation.prompt_tokens > own.generation.prompt_tokens


def test_a_malformed_checkpoint_template_fails_the_load_naming_its_file(checkpoint):
    write(checkpoint / TEMPLATE_FILE, dict(SHORT, infill="{reference}{prefix}"))
    with pytest.raises(EngineError, match=f"{TEMPLATE_FILE}.*lacks the placeholder {{suffix}}"):
        load(str(checkpoint), device="cpu")


def test_the_answer_prefix_is_given_not_generated(tiny_model_dir):
    loaded = load(str(tiny_model_dir), device="cpu")
    args = dict(max_new_tokens=6, seed=0)
    (given,) = generate_kernel(PROBLEM, loaded, **args)
    (written,) = generate_kernel(PROBLEM, loaded, given_prefix=False, **args)
    prefix_tokens = len(loaded.tokenizer.encode(prompts.BUILT_IN.answer_prefix))
    assert given.generation.prompt_tokens == written.generation.prompt_tokens + prefix_tokens
    # A random model writes no code block of its own: given the prefix, its text continues one that is open.
    assert written.code is None and "no code block" in written.note
    assert given.code.startswith(prompts.SOLUTION_HEADER) and prompts.SOLUTION_HEADER not in given.generation.text
    assert len(given.generation.token_ids) == 6


@pytest.mark.skipif(not (BUNDLED / "tokenizer.json").is_file(), reason="no bundled model in this tree")
def test_the_built_in_answer_prefix_is_how_every_training_answer_begins_token_for_token():
    """Given tokens equal to what training showed: the prefix is the start of every training answer, and encoding
    it apart from the rest (as decoding does) gives the first tokens of the answer encoded whole (as training does)."""
    from dice_lsp.train.data import answer_text
    from dice_lsp.train.tasks import generate

    tokenizer = Tokenizer.from_dir(BUNDLED)
    given = tokenizer.encode(prompts.BUILT_IN.answer_prefix)
    tasks = generate(seed=3, count=48)
    assert len({t.family for t in tasks}) >= 4
    for task in tasks:
        answer = answer_text(task.solution)
        assert answer.startswith(prompts.BUILT_IN.answer_prefix), (task.family, answer[:200])
        assert tokenizer.encode(answer)[: len(given)] == given


def test_the_editor_setting_and_its_problems():
    reading = read_settings({"decoding": {"promptTemplate": "/ckpt/dice.json", "givenPrefix": False,
                                          "confidence": "model"}})
    decoding = reading.settings.decoding
    assert (decoding.prompt_template, decoding.given_prefix, decoding.confidence) == ("/ckpt/dice.json", False,
                                                                                      "model")
    bad = read_settings({"decoding": {"givenPrefix": "yes", "confidence": "best"}})
    assert any("dice.decoding.givenPrefix: expected true or false" in p for p in bad.problems)
    assert any("dice.decoding.confidence" in p and "sampled" in p for p in bad.problems)
