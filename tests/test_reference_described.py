"""The API reference describes every public name it shows, in words for users.

docs_tools/described.py loads the packages as the site does; run it to list what is left."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "docs_tools"))

import described  # noqa: E402


def test_every_name_the_reference_shows_has_a_description() -> None:
    """Each class, function, method, attribute, field, constant and hook the reference shows
    has a docstring of its own (an override that says nothing takes its base's)."""
    missing = described.undescribed()
    assert not missing, f"{len(missing)} shown without a description:\n" + "\n".join(missing)


def test_no_public_docstring_cites_a_rule_id_or_a_porting_note() -> None:
    """Rule ids and notes on where the design came from belong in docs/internals/ and in code
    comments, not in what a user reads."""
    notes = described.maintainer_notes()
    assert not notes, f"{len(notes)} docstrings speak to maintainers:\n" + "\n".join(notes)


def test_the_checker_sees_an_undescribed_member_and_a_rule_id() -> None:
    """The checker itself: it walks what the directives show, and it knows a rule id and a
    porting note when it sees one."""
    shown = dict(described.shown_objects())
    assert "nucleo_trio.dispatch.JobDispatcher" in shown
    ids = ["ADM~23".replace("~", "-"), "TOOL~05".replace("~", "-")]  # so this file cites none
    assert described.RULE_ID.findall(f"holds {ids[0]} and {ids[1]}, not SHA-256") == ids
    assert described.PORTING_NOTE.search("as the Java original did")
