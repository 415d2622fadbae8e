"""The cascade's pure parts (barge/cascade/): CEL select and fields over result lines, the upstream's results
read from a real SQLite ledger, and the waves that take each upstream line once."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from pydantic import ValidationError

from barge.api.batchjob import FromJobSpec, InputSpec
from barge.batch.outputs import write_outputs
from barge.batch.outputs_parquet import Form
from barge.cascade.feed import taken, wave
from barge.cascade.lines import inline_lines
from barge.cascade.select import SelectError, Selector, activation, parsed_output
from barge.cascade.source import Upstream, final_results
from barge.columnar import read_rows
from barge.ledger import ItemUpdate, Ledger
from barge.providers.content import pack
from barge.storage import StoragePolicy

COMPLEX = "status == 'succeeded' && output_json.complex == true"


def selector(select: str = COMPLEX, **fields: str) -> Selector:
    return Selector.compile(FromJobSpec(name="up", select=select, fields=fields))


def test_select_on_output_json_status_and_input() -> None:
    s = selector("status == 'succeeded' && output_json.complex && input.policy.startsWith('P-1')")
    ok = {"id": "1", "status": "succeeded", "output": '{"complex": true}'}
    assert s.chosen(activation(ok, {"policy": "P-123"}))
    assert not s.chosen(activation(ok, {"policy": "P-999"}))
    assert not s.chosen(activation({**ok, "status": "failed"}, {"policy": "P-123"}))


def test_structured_output_json_wins_over_the_text() -> None:
    assert parsed_output({"output": '{"complex": false}', "output_json": {"complex": True}}) == {"complex": True}
    assert parsed_output({"output": "Emulated reply: hi"}) is None
    assert selector().chosen(activation({"status": "succeeded", "output": "x", "output_json": {"complex": True}}, {}))


def test_an_output_that_is_not_json_is_an_error_naming_the_field_unless_has_asks() -> None:
    names = activation({"status": "succeeded", "output": "not json"}, {})
    with pytest.raises(SelectError, match=r"fromJob\.select: .*complex"):
        selector().chosen(names)
    assert not selector("has(output_json.complex) && output_json.complex").chosen(names)


def test_a_select_that_is_not_a_bool_is_an_error() -> None:
    with pytest.raises(SelectError, match="not a bool"):
        selector("output").chosen(activation({"status": "succeeded", "output": "yes"}, {}))


def test_fields_map_result_values_into_template_variables() -> None:
    s = selector("true", claim="input.text", category="output_json.category", long="size(input.text) > 3")
    result = {"id": "c1", "status": "succeeded", "output": '{"category": "fire"}'}
    names = activation(result, {"text": "a pan fire"})
    assert s.item(result, {"text": "a pan fire"}, names, "id") == {
        "claim": "a pan fire",
        "category": "fire",
        "long": True,
        "id": "c1",
    }
    plain = selector("true")
    assert plain.item(result, {"text": "t"}, names, "key") == {
        "text": "t",
        "output": '{"category": "fire"}',
        "output_json": {"category": "fire"},
        "key": "c1",
    }


def test_a_cel_compile_error_is_refused_at_admission() -> None:
    with pytest.raises(ValidationError, match=r"fromJob\.select is not a CEL expression"):
        FromJobSpec(name="up", select="status ==")
    with pytest.raises(ValidationError, match=r"fromJob\.fields\.x is not a CEL expression"):
        FromJobSpec(name="up", fields={"x": "input."})
    with pytest.raises(ValidationError, match="exactly one of"):
        InputSpec.model_validate({"fromJob": {"name": "up"}, "inline": [{"id": "1"}]})


def _upstream(tmp_path: Path, ledger: Ledger, n: int, *, terminal: bool = False) -> Upstream:
    items = [{"id": f"c{i}", "text": "fire" if i % 3 == 0 else "water"} for i in range(1, n + 1)]
    ledger.ensure_job("ns/up/u1", "h")
    ledger.add_items(
        "ns/up/u1",
        [{"custom_id": f"cls-c{i}", "line": i, "item_id": f"c{i}", "state": "submitted"} for i in range(1, n + 1)],
    )
    return Upstream(
        "up", "ns/up/u1", "Running", terminal, str(tmp_path / "up-out"), StoragePolicy(), inline_lines(items)
    )


def _land(ledger: Ledger, lines: range) -> None:
    ledger.apply(
        "ns/up/u1",
        [ItemUpdate(f"cls-c{i}", "succeeded", output=json.dumps({"complex": i % 3 == 0}), attempts=1) for i in lines],
    )


def test_waves_take_each_landed_line_once(tmp_path: Path) -> None:
    ledger = Ledger(str(tmp_path / "l.db"))
    up = _upstream(tmp_path, ledger, 9)
    s = selector(COMPLEX, claim="input.text")
    assert list(final_results(ledger, up, set())) == []
    _land(ledger, range(1, 5))  # the first batch landed: lines 1-4, of which line 3 is complex
    first = wave(ledger, "ns/down/u2", up, s, "id")
    assert (first.read, first.passed_over, [n for n, _ in first.chosen]) == (4, 3, [3])
    assert json.loads(first.chosen[0][1]) == {"claim": "fire", "id": "c3"}
    ledger.ensure_job("ns/down/u2", "h2")
    ledger.add_items("ns/down/u2", [{"custom_id": "sum-c3", "line": 3, "item_id": "c3", "state": "pending"}])
    assert taken(ledger, "ns/down/u2") == {3}
    _land(ledger, range(5, 10))
    second = wave(ledger, "ns/down/u2", up, s, "id")
    assert [n for n, _ in second.chosen] == [6, 9]  # line 3 is not taken twice
    assert second.read == 8  # the ones passed over are asked again (they leave no row)


def test_an_evaluation_error_makes_that_item_invalid_with_the_reason(tmp_path: Path) -> None:
    ledger = Ledger(str(tmp_path / "l.db"))
    up = _upstream(tmp_path, ledger, 2)
    ledger.apply(
        "ns/up/u1",
        [
            ItemUpdate("cls-c1", "succeeded", output="I think it is complex", attempts=1),
            ItemUpdate("cls-c2", "succeeded", output='{"complex": true}', attempts=1),
        ],
    )
    found = wave(ledger, "ns/down/u2", up, selector(), "id")
    assert [n for n, _ in found.chosen] == [2]
    assert len(found.invalid) == 1
    row = found.invalid[0]
    assert (row["line"], row["state"], row["error_type"], row["item_id"]) == (1, "invalid", "select_error", "c1")
    assert "complex" in row["reason"]


def test_dropped_outputs_are_read_from_results_jsonl_once_the_upstream_ended(tmp_path: Path) -> None:
    ledger = Ledger(str(tmp_path / "l.db"))
    up = _upstream(tmp_path, ledger, 2, terminal=True)
    ledger.apply("ns/up/u1", [ItemUpdate(f"cls-c{i}", "succeeded", attempts=1) for i in (1, 2)])  # no output kept
    out = tmp_path / "up-out"
    out.mkdir()
    (out / "results.jsonl").write_text(
        "".join(
            json.dumps({"id": f"c{i}", "custom_id": f"cls-c{i}", "status": "succeeded", "output": f"text {i}"}) + "\n"
            for i in (1, 2)
        )
    )
    got = list(final_results(ledger, up, {1}))
    assert [(r["line"], r["output"]) for r in got] == [(2, "text 2")]


def test_packed_outputs_give_their_text_and_tool_calls_to_select(tmp_path: Path) -> None:
    ledger = Ledger(str(tmp_path / "l.db"))
    up = _upstream(tmp_path, ledger, 1)
    call = [{"type": "function", "function": {"name": "route", "arguments": '{"complex": true}'}}]
    ledger.apply("ns/up/u1", [ItemUpdate("cls-c1", "succeeded", output=pack("", {"tool_calls": call}), attempts=1)])
    s = selector("size(tool_calls) == 1 && tool_calls[0].function.name == 'route'", args="tool_calls[0].function")
    found = wave(ledger, "ns/down/u2", up, s, "id")
    assert [json.loads(raw) for _, raw in found.chosen] == [{"args": call[0]["function"], "id": "c1"}]


@pytest.mark.parametrize("output_format", ["jsonl", "parquet"])
def test_output_json_of_a_structured_upstream_is_read_back_from_its_results_file(
    tmp_path: Path, output_format: str
) -> None:
    """The upstream ended and dropped its outputs: results.jsonl (or results.parquet, spec.output.format), as
    outputs.write_outputs writes it for a job with spec.request.responseFormat (output_json beside output), is what
    select reads."""
    ledger = Ledger(str(tmp_path / "l.db"))
    up = replace(_upstream(tmp_path, ledger, 3, terminal=True), output_format=output_format)
    answers = [{"complex": True, "category": "fire"}, {"complex": False, "category": "glass"}, {"complex": True}]
    ledger.apply(
        "ns/up/u1",
        [ItemUpdate(f"cls-c{i}", "succeeded", output=json.dumps(a), attempts=1) for i, a in enumerate(answers, 1)],
    )
    write_outputs(ledger, "ns/up/u1", up.output_url, StoragePolicy(), True, Form(output_format))
    if output_format == "jsonl":
        written = [json.loads(x) for x in (Path(up.output_url) / "results.jsonl").read_text().splitlines()]
        assert [r["output_json"] for r in written] == answers
    else:
        assert not (Path(up.output_url) / "results.jsonl").exists()
        rows = read_rows(str(Path(up.output_url) / "results.parquet"))
        assert [json.loads(r["output_json"]) for r in rows] == answers
    ledger.apply("ns/up/u1", [ItemUpdate(f"cls-c{i}", "succeeded", attempts=1) for i in (1, 2, 3)])  # texts dropped
    assert {row[1] for row in ledger.iter_items("ns/up/u1", "output", ("succeeded",))} == {None}
    s = selector(COMPLEX, category="has(output_json.category) ? output_json.category : 'unknown'")
    found = wave(ledger, "ns/down/u2", up, s, "id")
    assert [json.loads(raw) for _, raw in found.chosen] == [
        {"category": "fire", "id": "c1"},
        {"category": "unknown", "id": "c3"},
    ]
