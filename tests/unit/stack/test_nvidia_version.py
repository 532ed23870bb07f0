"""Version parsing and ordering: NVIDIA driver, CUDA, NCCL and dpkg/rpm package versions."""

from __future__ import annotations

import pytest
from ansible_collections.gpuops.cluster.plugins.module_utils.stack.nvidia_version import (
    compare_versions,
    cuda_dashed,
    driver_branch,
    parse_cuda,
    parse_driver,
    parse_nccl,
    parse_package_version,
    version_matches,
)
from hypothesis import given
from hypothesis import strategies as st


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("550", (550,)),
        ("R550", (550,)),
        ("570.26", (570, 26)),
        ("550.127.08", (550, 127, 8)),
        (" 580.65.06 ", (580, 65, 6)),
        (535, (535,)),
    ],
)
def test_parse_driver(text, expected):
    assert parse_driver(text) == expected


@pytest.mark.parametrize("text", ["", "55", "550.", "550.1.2.3", "abc", "550-127", None, True, 550.1, "550.1234"])
def test_parse_driver_rejects_malformed(text):
    with pytest.raises(ValueError, match=r"driver version|version string|YAML float|empty"):
        parse_driver(text)


def test_float_hint_says_to_quote():
    with pytest.raises(ValueError, match=r"quote it"):
        parse_cuda(12.4)


def test_driver_branch():
    assert driver_branch("550.127.08") == 550


@pytest.mark.parametrize(("text", "expected"), [("12.4", (12, 4)), ("12.4.1", (12, 4, 1)), ("13.0", (13, 0))])
def test_parse_cuda(text, expected):
    assert parse_cuda(text) == expected


@pytest.mark.parametrize("text", ["12", "12.", "12.4.1.1", "v12.4", "twelve"])
def test_parse_cuda_rejects(text):
    with pytest.raises(ValueError, match=r"MAJOR.MINOR"):
        parse_cuda(text)


def test_cuda_dashed():
    assert cuda_dashed("12.4") == "12-4"
    assert cuda_dashed("13.0.2") == "13-0"


def test_parse_nccl():
    assert parse_nccl("2.21.5") == (2, 21, 5)
    with pytest.raises(ValueError, match=r"MAJOR.MINOR.PATCH"):
        parse_nccl("2.21")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("1:4.1.1-1", (1, "4.1.1", "1")),
        ("2.21.5-1+cuda12.4", (0, "2.21.5", "1+cuda12.4")),
        ("550.127.08-0ubuntu1", (0, "550.127.08", "0ubuntu1")),
        ("3:550.127.08-1.el9", (3, "550.127.08", "1.el9")),
        ("550.127.08", (0, "550.127.08", "")),
        ("1:3.3.6", (1, "3.3.6", "")),
        ("525.147.05-4~deb12u1", (0, "525.147.05", "4~deb12u1")),
    ],
)
def test_parse_package_version(text, expected):
    assert parse_package_version(text) == expected


@pytest.mark.parametrize("text", ["a:1.0", "1.0-", ":1.0", "x1.0", "1.0 -1", "1:", "1.0-1:2"])
def test_parse_package_version_rejects(text):
    with pytest.raises(ValueError, match=r"package version"):
        parse_package_version(text)


@pytest.mark.parametrize(
    ("lower", "higher"),
    [
        ("570.26", "570.124.06"),
        ("550.54.15", "550.127.08"),
        ("550", "550.54.15"),
        ("535.247.01", "550.54.14"),
        ("4.9-1", "1:4.1.1-1"),  # epoch wins
        ("1:4.5.1-1", "1:4.5.2-1"),
        ("1.0~rc1", "1.0"),  # ~ sorts before the end
        ("1.0~rc1", "1.0~rc2"),
        ("2.21.5-1+cuda12.4", "2.21.5-1+cuda12.10"),
        ("2.21.5-1+cuda12.4", "2.22.3-1+cuda12.4"),
        ("550.127.08-0ubuntu1", "550.127.08-1"),
        ("550.127.08-1", "550.127.08-1ubuntu1"),
        ("525.147.05-4~deb12u1", "525.147.05-4"),
        ("3:550.127.08-1.el9", "3:570.124.06-1.el9"),
        ("1.0a", "1.0b"),
        ("1.0", "1.0a"),
        ("1.0a", "1.0+"),  # letters sort before other symbols
        ("12.4", "12.4.1"),
    ],
)
def test_ordering(lower, higher):
    assert compare_versions(lower, higher) == -1
    assert compare_versions(higher, lower) == 1


@pytest.mark.parametrize(("left", "right"), [("550.127.08", "550.127.8"), ("0:1.0", "1.0"), ("01.0", "1.0")])
def test_equal(left, right):
    assert compare_versions(left, right) == 0


@pytest.mark.parametrize(
    ("left", "operator", "right", "expected"),
    [
        ("570.26", "<", "570.124.06", True),
        ("570.26", ">=", "570.124.06", False),
        ("550.127.08", "==", "550.127.8", True),
        ("550.127.08", "!=", "550.127.8", False),
        ("1:4.1.1-1", "gt", "4.9-1", True),
        ("580", "le", "580.65.06", True),
    ],
)
def test_version_matches(left, operator, right, expected):
    assert version_matches(left, operator, right) is expected


def test_version_matches_unknown_operator():
    with pytest.raises(ValueError, match=r"unknown version operator '=>'"):
        version_matches("1", "=>", "2")


_part = st.text(alphabet="0123456789abz.+~", min_size=0, max_size=6)
_version = st.builds(
    lambda epoch, first, rest, rev: (
        "%s%d%s%s" % ("%d:" % epoch if epoch else "", first, rest, "-" + rev if rev else "")
    ),
    st.integers(min_value=0, max_value=3),
    st.integers(min_value=0, max_value=999),
    _part,
    st.text(alphabet="0123456789abz.+~", min_size=0, max_size=5),
)


@given(_version, _version, _version)
def test_ordering_is_a_total_order(a, b, c):
    ab, ba = compare_versions(a, b), compare_versions(b, a)
    assert ab == -ba
    assert compare_versions(a, a) == 0
    if ab <= 0 and compare_versions(b, c) <= 0:
        assert compare_versions(a, c) <= 0


@given(
    st.lists(st.integers(min_value=0, max_value=999), min_size=1, max_size=3),
    st.lists(st.integers(min_value=0, max_value=999), min_size=1, max_size=3),
)
def test_numeric_versions_order_like_tuples(left, right):
    # Plain dotted numbers (driver, CUDA, NCCL) order like their integer tuples.
    expected = (left > right) - (left < right)
    assert compare_versions(".".join(map(str, left)), ".".join(map(str, right))) == expected
