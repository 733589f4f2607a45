"""Namespace names: one per machine identity, never shared by two, short enough for a file name. Pure: no root."""

import re

import pytest

from forewarn.sandbox.namespaces import SandboxError, namespace_name

SHAPE = re.compile(r"forewarn-(?:t1-)?[A-Za-z0-9_.-]{1,40}-[0-9a-f]{16}")


@pytest.mark.parametrize(
    ("one", "other"), [("rel x", "rel-x"), ("relé", "relá"), ("a/b", "a<b"), ("WestNO_0", "westno_0")]
)
def test_names_that_read_alike_get_namespaces_of_their_own(one, other):
    assert namespace_name(one) != namespace_name(other)
    assert namespace_name(one, "t1") != namespace_name(other, "t1")
    assert namespace_name(one) == namespace_name(one)  # found again by the next command


def test_a_namespace_name_stays_readable_and_short():
    assert namespace_name("WestNO_0").startswith("forewarn-WestNO_0-")
    assert namespace_name("i-0a1b2c3d4e5f60718", "t1").startswith("forewarn-t1-i-0a1b2c3d4e5f60718-")
    for identity in ["x", "rel x", "é" * 256, "a" * 303, "\t<>/", "."]:
        for tag in (None, "t1"):
            name = namespace_name(identity, tag)
            assert SHAPE.fullmatch(name) and len(name) < 100, name


@pytest.mark.parametrize("tag", ["", "a b", "x/y", "t" * 33])
def test_a_tag_is_a_short_plain_word(tag):
    with pytest.raises(SandboxError, match="a sandbox tag is 1-32 letters"):
        namespace_name("WestNO_0", tag)
