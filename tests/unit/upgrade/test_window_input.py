"""The window's input: ``max_unavailable`` as a count or a share of the whole fleet (``size_of``)."""

from __future__ import annotations

import re

import pytest
from ansible_collections.gpuops.cluster.plugins.module_utils.upgrade import window_input


def test_percentages_round_down_with_a_minimum_of_one():
    assert window_input.size_of("10%", 4) == 1
    assert window_input.size_of("10%", 25) == 2
    assert window_input.size_of("33%", 3) == 1
    assert window_input.size_of("100%", 7) == 7
    assert window_input.size_of("12.5%", 16) == 2
    assert window_input.size_of(" 3 ", 100) == 3
    assert window_input.size_of(12, 4) == 12  # a count is taken as given


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        (0, "max_unavailable size 0 must be at least 1"),
        (-2, "at least 1"),
        ("0%", "above 0%"),
        ("150%", "at most 100%"),
        ("ten", "neither a count"),
        ("x%", "neither a count"),
        (1.5, "neither a count"),
        (True, "boolean"),
    ],
)
def test_bad_sizes_raise_clear_errors(entry, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        window_input.size_of(entry, 10)
