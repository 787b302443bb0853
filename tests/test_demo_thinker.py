"""The demo's second act: a thinker on the scripted fake model, and its spend ledger."""

from __future__ import annotations

import pytest

from nucleo_trio._demo.render import WIDTH, Style
from nucleo_trio._demo.thinking import CAP, render_thinker_section, run_thinker
from nucleo_trio.cli import main
from nucleo_trio.models import Cost


def test_the_thinker_answers_with_its_source_and_the_ledger_adds_up() -> None:
    """GRD-33, TOOL-14, OBS-28 in the demo: two tool jobs in one turn, a 429 re-run, a refused
    answer fed back, the accepted one delivered; every call is on the ledger and the total is
    their sum, under the cap; the same seed tells the same story."""
    outcome = run_thinker(7)
    assert outcome.answer is not None and "(source: glossary)" in outcome.answer
    assert [call.successful for call in outcome.calls] == [True, False, True, True]
    total = Cost.zero("USD")
    for call in outcome.calls:
        assert call.cost is not None and call.model_id == "demo-small"
        total = total.plus(call.cost)
    assert outcome.spent == total and not outcome.spent.exceeds(CAP)
    labels = [label for label, _ in outcome.story]
    assert labels == ["turn 1", "429", "turn 2", "", "turn 3", ""]
    assert "refused by the validation guard" in outcome.story[3][1]
    plain = Style()
    assert render_thinker_section(run_thinker(7), plain) == render_thinker_section(outcome, plain)


def test_the_demo_ends_with_the_thinker_and_its_spend_ledger(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The demo prints the thinker's section and the ledger after the first act, within the
    report's width, and without colour when not on a terminal."""
    assert main(["demo", "--jobs", "10"]) == 0
    out = capsys.readouterr().out
    assert out.index("Trajectory") < out.index("A thinker at work") < out.index("Spend ledger")
    assert "failed (429)" in out and "Spent 0.0000" in out
    assert max(len(line) for line in out.splitlines()) <= WIDTH
    coloured = render_thinker_section(run_thinker(7), Style(True))
    assert "\x1b[1mA thinker at work" in coloured
