"""The caller <-> worker messages: every command and reply survives its JSON line unchanged, and a line that is not
a message of its direction is a MessageError that says what is wrong, briefly."""

from __future__ import annotations

import json

import pytest

from dice_lsp.harness import Options, messages
from dice_lsp.harness.build import Call, Extension, Segment
from dice_lsp.harness.report import KernelShare
from dice_lsp.harness.samples import TimedRound

OPTIONS = Options(cuda_home="/opt/cuda-12.4", seed=7, baseline="eager", cache_dir="/tmp/cache")

EXTENSION = Extension("ext", "k1", "/c/ext-k1", with_cuda=True, mode="light", cached=True, ok=True, seconds=1.5,
                      output="warning: x", layout={"cuda.cu": [Segment(4, 2, "cuda", "__global__ void k() {}\n")]})
CALL = Call("ext", ("torch::Tensor f(torch::Tensor x);",), ("__global__ void k() {}",),
            {"functions": ["f"], "extra_cuda_cflags": ["-O3"], "with_cuda": None}, "9.0", "2.11.0", "3.11")
COMMANDS = [
    messages.Build(path="/w/solution.py", options=OPTIONS, arch="8.0"),
    messages.Prepare(cache_dir="/tmp/cache"),
    messages.Compile(call=CALL, directory="/tmp/build", light_build=False, mode="plain"),
    messages.BuildAnswer(extension=EXTENSION),
    messages.MakeReference(path="/w/reference.py", options=OPTIONS, exchange="/tmp/exchange"),
    messages.RunSolution(reference="/w/reference.py", share=True),
    messages.SaveOutputs(exchange="/tmp/exchange"),
    messages.Compare(exchange="/tmp/exchange"),
    messages.Inspect(kernels=("add_kernel", "scale_kernel")),
    messages.Time(compiled=True, trials=25, warmup=1, warm_s=0.0025, round=3, check="abc", watch=True,
                  staging="/tmp/staged.bin", threads=1),
    messages.Next(first=2, second=0, seed=(1 << 62) + 5),
    messages.Snapshot(slot=3, outputs=(messages.Output("float32", (4, 0)),), staging=({"handle": "ab", "size": 4},)),
    messages.CompareTimed(exchange="/tmp/exchange", calls=(
        messages.TimedCall(1, 17, 0, 3, 99, 4, (messages.Output("bfloat16", (2, 3)),)),)),
]
REPLIES = [
    messages.Failed(error="RuntimeError: no", traceback="Traceback ...", extensions=(EXTENSION,),
                    cost=messages.Cost(seconds=0.5, imported=3, warm_up_seconds=6.0, warm_up_error="")),
    messages.Built(extensions=(EXTENSION,), arch="9.0", cuda_available=False, has_model_new=True),
    messages.Prepared(header="/c/pch/abc/dice_torch.h"),
    messages.BuildRequest(call=CALL, mode="plain"),
    messages.Compiled(extension=EXTENSION),
    messages.ReferenceMade(device="cpu", tf32=False, cudnn_tf32=True, matmul_precision="highest",
                           dtypes=("torch.float32",)),
    messages.Ran(device="cpu", changed_tensors=2, threads=("Thread-1",), precision_before={"tf32": False},
                 precision_after={"tf32": True}, outputs="file", inputs="device", mutated=(0,), lazy="a Lazy",
                 tampered=("stages.time",), bases=5),
    messages.OutputsSaved(),
    messages.Compared(trials=(messages.TrialResult(43, True, 0.0, 0.0, "", 0.0, "", ()),
                              messages.TrialResult(10042, False, 2.0, float("inf"), "output[1, 2]", 1.0, "",
                                                   ("output is torch.float16",), True)),
                      reference_norm=3.5),
    messages.Compared(unshared="RuntimeError: cannot open the handle"),
    messages.Compared(unstable="two runs differ", mutates=(1,)),
    messages.Inspected(kernels=(KernelShare("add_kernel", 0.75, 12.5, 3), KernelShare("at::foo", 0.25, own=False)),
                       operators=(KernelShare("aten::add", 0.5, 3.0, 1, own=False),),
                       lines=(messages.LibraryLine(12, ("aten::add",), 3.0, 0.5),), own_share=0.5),
    messages.Timed(timing=TimedRound((0.01, 0.009, 0.02), (0.011, 0.01, 0.021), "host", 0.0, 2, (5.0, 5.1, 5.2),
                                     4.9, 5.3),
                   tf32=False, cudnn_tf32=True, matmul_precision="highest", lazy="",
                   threads=("thread 9 'x' (while timed)",), tampered=("timing._perf_counter",)),
    messages.Called(index=4, outputs=(messages.Output("float32", (512, 512)), messages.Output("bool", ())),
                    staging=({"handle": "ab"},), lazy=""),
    messages.Snapshotted(),
]


def test_every_command_and_reply_has_an_example_here():
    assert {type(c) for c in COMMANDS} == set(messages.COMMANDS.values())
    assert {type(r) for r in REPLIES} == set(messages.REPLIES.values())


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: c.tag)
def test_a_command_round_trips_through_its_json_line(command):
    line = messages.encode_command(command)
    assert "\n" not in line and messages.decode_command(line) == command


@pytest.mark.parametrize("reply", REPLIES, ids=lambda r: r.tag)
def test_a_reply_round_trips_through_its_json_line(reply):
    line = messages.encode_reply(reply)
    assert "\n" not in line and messages.decode_reply(line.encode()) == reply


def test_options_cross_as_their_dict_and_come_back_whole():
    line = messages.encode_command(COMMANDS[0])
    assert json.loads(line)["options"] == OPTIONS.to_dict()
    back = messages.decode_command(line).options
    assert isinstance(back, Options) and back == OPTIONS and back.cuda_home == "/opt/cuda-12.4"


BUILT = {"reply": "built", "extensions": [], "arch": "9.0", "cuda_available": True, "has_model_new": True}


@pytest.mark.parametrize("line, says", [
    (b"\x00not json at all", "not JSON"),
    (b"[1, 2]", "list, not a JSON object"),
    (b"[" * 100_000, "not JSON"),  # nested past the parser's recursion limit
    (json.dumps({"reply": "nope"}), "unknown reply 'nope'"),
    (json.dumps({"reply": 3}), "unknown reply 3"),
    (json.dumps({k: v for k, v in BUILT.items() if k != "arch"}), "built lacks arch"),
    (json.dumps({**BUILT, "extensions": "oops"}), "built.extensions is str, not an array"),
    (json.dumps({**BUILT, "extensions": [{"name": "x"}]}), "built.extensions[0] lacks key"),
    (json.dumps({**BUILT, "has_model_new": 1}), "built.has_model_new is int, not bool"),
    (json.dumps({**BUILT, "extra": 1}), "built has no field 'extra'"),
    (json.dumps({"reply": "prepared", "header": "h", "cost": {"seconds": "slow"}}), "prepared.cost.seconds is str"),
    (json.dumps({"reply": "inspected", "kernels": [{"name": "k", "share": 0.5, "launches": True}]}),
     "inspected.kernels[0].launches is bool, not int"),
])
def test_a_line_that_is_no_reply_says_what_is_wrong(line, says):
    with pytest.raises(messages.MessageError) as raised:
        messages.decode_reply(line)
    assert says in str(raised.value)


def test_what_a_bad_line_holds_is_quoted_briefly():
    with pytest.raises(messages.MessageError) as raised:
        messages.decode_reply(json.dumps({"reply": "x" * 100_000}))
    assert len(str(raised.value)) < 200
    with pytest.raises(messages.MessageError) as raised:
        messages.decode_reply(json.dumps({"reply": "prepared", "header": "h", "y" * 100_000: 1}))
    assert len(str(raised.value)) < 200


def test_a_command_the_worker_does_not_know_is_a_message_error():
    with pytest.raises(messages.MessageError, match="unknown command 'nothing'"):
        messages.decode_command('{"op": "nothing"}')
    with pytest.raises(messages.MessageError, match="time.trials is str, not int"):
        messages.decode_command('{"op": "time", "trials": "many"}')
