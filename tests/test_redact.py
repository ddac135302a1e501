"""What children are given and what they say back: no secret, none of the judge's code."""

import json
import sys

from kernelevo.evaluate.sandbox import redact


def test_secret_variables_are_told_by_name_and_by_registration():
    names = ["OPENAI_API_KEY", "HF_TOKEN", "DB_PASSWORD", "MY_LLM", "PATH", "TRITON_CACHE_DIR"]
    redact.hide_variable("MY_LLM")
    assert [name for name in names if redact.is_secret(name)] == names[:4]


def test_secret_values_and_the_service_token_are_redacted_everywhere(tmp_path):
    key, token = "sk-" + "a" * 40, "service-token-" + "b" * 30
    (tmp_path / "service.json").write_text(json.dumps({"url": "u", "token": token}))
    secrets = redact.secret_values({"OPENAI_API_KEY": key, "SHORT_TOKEN": "false",
                                    "HOME": "/root"}, [tmp_path, tmp_path / "missing"])
    assert secrets == sorted([key, token], key=len, reverse=True)
    message = {"kind": "failed", "message": f"got {key}", "items": [f"x{token}y", 3]}
    assert redact.redact(message, secrets) == {
        "kind": "failed", "message": "got [redacted]", "items": ["x[redacted]y", 3]}
    assert redact.redact("nothing here", secrets) == "nothing here"


def _fail_in_candidate(folder):
    """Import, as the worker does, a candidate that raises at import; the exception."""
    from kernelevo.evaluate.shared.inputs import import_source

    source = ("def forward(x):\n    return helper(x)\n\n\ndef helper(x):\n"
              "    raise ValueError('bad ' + x)\n\n\nforward('shape')\n")
    try:
        import_source(source, "kernelevo_candidate_0", folder)
    except ValueError as exc:
        return exc


def test_a_traceback_keeps_the_candidates_lines_and_drops_the_judges(tmp_path):
    text = redact.candidate_traceback(_fail_in_candidate(tmp_path))
    assert 'File "kernelevo_candidate_0.py", line 2, in forward' in text
    assert "    return helper(x)" in text and "    raise ValueError('bad ' + x)" in text
    assert text.endswith("ValueError: bad shape")
    assert "evaluate/shared/inputs.py" not in text and str(tmp_path) not in text


def test_library_frames_keep_their_place_but_not_their_source():
    try:
        json.loads("{")
    except json.JSONDecodeError as exc:
        text = redact.candidate_traceback(exc)
    assert 'File "json/decoder.py"' in text
    assert "raise JSONDecodeError" not in text and sys.prefix not in text
    assert "json.decoder.JSONDecodeError: Expecting property name" in text


def test_chained_exceptions_come_in_python_s_order(tmp_path):
    try:
        try:
            raise KeyError("first")
        except KeyError as first:
            raise RuntimeError("second") from first
    except RuntimeError as exc:
        text = redact.candidate_traceback(exc)
    assert text.index("KeyError: 'first'") < text.index("direct cause") < text.index(
        "RuntimeError: second")
