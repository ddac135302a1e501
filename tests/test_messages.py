"""Judge <-> child messages: typed on both sides, the same JSON on the pipe, malformed ones named."""

import json

import pytest

from kernelevo.config import TimingConfig
from kernelevo.errors import MessageError
from kernelevo.evaluate.shared import messages
from kernelevo.evaluate.shared.messages import (ORACLE_KINDS, WORKER_KINDS, CheckedCandidate,
                                                Failed, OracleDone, Progress, Ready, Timing,
                                                WorkerJob, decode)
from kernelevo.evaluate.shared.replies import Abort, ReadyReply, TimeThese, reply_to_ready


def _over_the_pipe(data: dict) -> dict:
    return json.loads(json.dumps(data))


EXAMPLES = [
    Progress("correctness", 1),
    Ready({"task_import": 0.5}, ("torch._inductor",)),
    Failed(0, "syntax_error", "line 3: invalid syntax"),
    CheckedCandidate(candidate=2, bundle={"kind": "file", "path": "/tmp/b.pt"},
                     structures={"set_0": "tensor"}, problems=("mutated_inputs: input 0",),
                     ops=("aten::add",), triton_launches=3, threads=("t1",), children=(41,),
                     rotation_problem="after 2 rounds: wrong", setup_s=0.1, check_s=0.2),
    Timing(measures={"call": {"eager": {"median_ms": 1.0, "iqr_ms": 0.1, "min_ms": 0.9,
                                        "samples": 5, "method": "call_loop",
                                        "mean_ms": 1.0}}},
           notes=("a note",), inconsistent={"0": "while timing: x"}, compile_s=2.5,
           ranges={"0": {"call": {"eager": [1.5, 1.75], "compile": [0.9, 1.0]}}},
           versions={"torch": "2.13"}),
    # a task whose backward is judged: training steps and the backward alone too
    Timing(measures={measure: {name: {"median_ms": 2.0, "iqr_ms": 0.2, "min_ms": 1.8,
                                      "samples": 20, "method": method, "mean_ms": 2.1}
                               for name in ("candidate_0", "eager", "compile")}
                     for measure, method in (("call", "call_loop"), ("train_gpu", "events"),
                                             ("train_call", "call_loop"),
                                             ("backward_gpu", "train-forward"))},
           ranges={"0": {"train_gpu": {"eager": [1.1, 1.3]},
                         "backward_gpu": {"compile": [0.8, 0.95]}}},
           backward_methods={"candidate_0": "replayed graph", "eager": "replayed graph",
                             "compile": "train-forward"}),
    OracleDone(kept_sets=(0, 1, 2), variants_used=(None, None, 64.0), stress={"2": "scale 64"},
               structure="tuple:2", ops=("aten::mm",), flops=1e6, bytes=4096,
               output_dtypes=("float32", "float32"), atol=1e-3),
    OracleDone(kept_sets=(0,), variants_used=(None,), stress={}, structure="tensor",
               ops=("aten::native_layer_norm",), flops=0, bytes=4096, output_dtypes=("float32",),
               constant_tensors=("ln.weight (all 1)", "ln.bias (all 0)")),
]


@pytest.mark.parametrize("message", EXAMPLES, ids=lambda m: type(m).__name__)
def test_every_message_comes_back_equal_after_the_pipe(message):
    kinds = ORACLE_KINDS if isinstance(message, OracleDone) else WORKER_KINDS
    assert decode(_over_the_pipe(message.to_json()), kinds) == message


def test_the_wire_keeps_the_fields_the_children_sent_before():
    assert Progress("timing").to_json() == {"kind": "progress", "phase": "timing"}
    assert Failed(1, "no_gpu", "m").to_json() == {"kind": "failed", "candidate": 1,
                                                    "reason": "no_gpu", "message": "m",
                                                    "failed_after_s": 0.0, "build_s": 0.0}
    # a child that sends only the older fields is still understood
    assert Failed.from_json({"kind": "failed", "candidate": 1, "reason": "no_gpu",
                             "message": "m"}) == Failed(1, "no_gpu", "m")
    assert TimeThese((0, 2)).to_json() == {"time": (0, 2)}
    assert Abort().to_json() == {"abort": True}


def test_the_worker_gets_the_judges_timing_config_itself():
    timing = TimingConfig(measure="gpu", baselines=("eager",), conv_tf32=True, min_samples=3)
    job = WorkerJob(task_source="x = 1", device="cpu", dtype="float32", scratch="/tmp/w",
                    time=True, timing=timing, task_folder="/tasks")
    again = WorkerJob.from_json(_over_the_pipe(job.to_json()))
    assert again.timing == timing and isinstance(again.timing, TimingConfig)
    assert again == job


def test_a_bad_timing_setting_in_a_job_is_named():
    data = _over_the_pipe(WorkerJob("x", "cpu", "float32", "/w", True, TimingConfig()).to_json())
    data["timing"]["measure"] = "wall"
    with pytest.raises(MessageError, match="field timing: .*measure"):
        WorkerJob.from_json(data)
    data["timing"] = {"warmup": 1}
    with pytest.raises(MessageError, match=r"field timing: warmup: unknown key \(did you mean "
                                           r"warmup_ms\?\)"):
        WorkerJob.from_json(data)


def test_the_reply_to_ready_is_either_the_work_or_an_abort():
    reply = ReadyReply(seeds=(1, 2), variants=(None, 40.0), tolerances=((1e-4, 1e-4),),
                       candidates=({"source": "s", "backend": "triton"},))
    assert reply_to_ready(_over_the_pipe(reply.to_json())) == reply
    assert reply_to_ready({"abort": True}) == Abort()


def test_an_unknown_kind_is_a_clear_error_naming_it():
    with pytest.raises(MessageError, match="kind 'hello' is none of"):
        decode({"kind": "hello"}, WORKER_KINDS)
    with pytest.raises(MessageError, match="kind None"):
        decode(["not", "an", "object"], WORKER_KINDS)
    # The same kind means another message from another sender.
    with pytest.raises(MessageError, match="kind 'reference'"):
        decode({"kind": "reference", "bundle": {}}, WORKER_KINDS)


def test_a_missing_field_is_named_not_a_key_error():
    with pytest.raises(MessageError, match="failed message lacks its field reason"):
        decode({"kind": "failed", "candidate": 0, "message": "m"}, WORKER_KINDS)


def test_a_field_of_the_wrong_type_is_named():
    with pytest.raises(MessageError, match="checked_candidate message's field candidate: "
                                           "expected a whole number, got '0'"):
        decode({"kind": "checked_candidate", "candidate": "0", "bundle": {}}, WORKER_KINDS)
    with pytest.raises(MessageError, match="field problems"):
        decode({"kind": "checked_candidate", "candidate": 0, "bundle": {},
                "problems": [1, 2]}, WORKER_KINDS)


def test_how_a_backward_was_timed_is_checked_on_the_way_in():
    with pytest.raises(MessageError, match="timing message's field backward_methods"):
        decode({"kind": "timing", "measures": {}, "backward_methods": {"eager": 1}},
               WORKER_KINDS)
    older = decode({"kind": "timing", "measures": {}}, WORKER_KINDS)  # a forward-only worker
    assert older.backward_methods == {}


def test_an_unknown_field_is_named():
    with pytest.raises(MessageError, match="unknown fields measure"):
        decode({"kind": "timing", "measures": {}, "measure": "gpu"}, WORKER_KINDS)


def test_the_sender_puts_the_kind_and_fields_on_the_channel():
    sent = []

    class Channel:
        def send(self, kind, **payload):
            sent.append({"kind": kind, **payload})

        def ask(self, kind, **payload):
            self.send(kind, **payload)
            return {"time": [1]}

    sender = messages.Sender(Channel())
    sender.send(Progress("compile", 0))
    assert TimeThese.from_json(sender.ask(messages.Checked())) == TimeThese((1,))
    assert sent == [{"kind": "progress", "phase": "compile", "candidate": 0},
                    {"kind": "checked", "peak_bytes": 0}]
