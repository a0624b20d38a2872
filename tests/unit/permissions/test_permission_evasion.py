"""perm:evasion: deny globs see through case and look-alike letters; allow globs stay exact."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tooldir.errors import PermissionDeniedError
from tooldir.model import Risk, Source
from tooldir.names import NAME_RE, skeleton, skeleton_pattern
from tooldir.policy import DeferPolicy, PermissionsPolicy, Policy
from tooldir.run.permissions import AllowNames, DenyNames, PermissionRequest, from_policy


def request(name: str) -> PermissionRequest:
    return PermissionRequest(name, Source.USER, Risk.WRITE)


def refused(check: DenyNames | AllowNames, name: str) -> bool:
    try:
        check.check(request(name))
    except PermissionDeniedError as exc:
        assert exc.code == "permission-denied"
        return True
    return False


@pytest.mark.parametrize(
    "name",
    ["delete_tag", "Delete_tag", "DELETE_REPO", "de1ete_issue", "DeIete_x", "dElEtE", "repo_de1ete"],
)
def test_a_deny_glob_refuses_case_and_look_alike_spellings(name: str) -> None:
    assert refused(DenyNames(("*delete*",)), name)


@pytest.mark.parametrize("name", ["get_issue", "dalete_tag", "undo_last", "create_tag"])
def test_a_deny_glob_still_lets_unrelated_names_through(name: str) -> None:
    assert not refused(DenyNames(("*delete*",)), name)


def test_the_denial_names_the_rule_and_the_form_that_matched() -> None:
    with pytest.raises(PermissionDeniedError) as caught:
        DenyNames(("*delete*",)).check(request("de1ete_issue"))
    assert "'*delete*'" in caught.value.message and "'delete_lssue'" in caught.value.message


@pytest.mark.parametrize(
    ("pattern", "name"),
    [
        ("*DELETE*", "delete_tag"),  # the pattern is normalised too
        ("*de1ete*", "delete_tag"),
        ("drop_[a-z]*", "DROP_Table"),
        ("rm_?", "RM_X"),
        ("[Dd]elete_*", "DELETE_x"),
    ],
)
def test_the_pattern_is_normalised_the_same_way_as_the_name(pattern: str, name: str) -> None:
    assert refused(DenyNames((pattern,)), name)


@pytest.mark.parametrize("name", ["Delete_tag", "DELETE_tag", "de1ete_tag", "deIete_tag"])
def test_an_allow_glob_is_never_widened_by_case_or_look_alikes(name: str) -> None:
    assert refused(AllowNames(("delete_*",)), name)
    assert not refused(AllowNames(("delete_*",)), "delete_tag")


def test_the_policy_chain_denies_an_evasive_name_even_when_allow_lists_it_exactly() -> None:
    chain = from_policy(PermissionsPolicy(allow=("DELETE_REPO",), deny=("*delete*",)))
    with pytest.raises(PermissionDeniedError) as caught:
        chain.check(request("DELETE_REPO"))
    assert "deny rule" in caught.value.message


_names = st.from_regex(NAME_RE, fullmatch=True)


@given(_names)
def test_every_name_matches_a_deny_of_its_own_skeleton_and_of_its_exact_spelling(name: str) -> None:
    assert refused(DenyNames((name,)), name)
    assert refused(DenyNames((skeleton(name),)), name)


@given(_names, st.sampled_from(["*", "?*", "*_*", "[a-z]*", "[!x]*", "a*", "*[0-9]"]))
def test_a_deny_glob_refuses_at_least_what_plain_fnmatch_refuses(name: str, pattern: str) -> None:
    import fnmatch

    if fnmatch.fnmatchcase(name, pattern):
        assert refused(DenyNames((pattern,)), name)


@pytest.mark.parametrize(
    ("pattern", "expected"),
    [("*delete*", "*delete*"), ("x[]", "x[[]]"), ("a[b", "a[[]b"), ("[0-9]", "[2346789los]"), ("EDIT?", "edlt?")],
)
def test_skeleton_patterns_keep_wildcards_and_fnmatch_literal_rules(pattern: str, expected: str) -> None:
    assert skeleton_pattern(pattern) == expected


def test_defer_rules_and_pins_still_match_names_exactly() -> None:
    """Deferral and pins are not permissions: they keep exact, case-sensitive names."""
    defer = DeferPolicy(mode="on", rules=("Defer(*delete*)",))
    assert defer.is_deferred("delete_tag") and not defer.is_deferred("DELETE_REPO")
    policy = Policy.model_validate({"pins": {"delete_tag": "sha256:" + "0" * 64}})
    assert "delete_tag" in policy.pins and "Delete_tag" not in policy.pins
