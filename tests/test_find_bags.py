"""find_bags: the one rule for which bags a list of paths names (`arm-act train --data` and
`arm-act report`): bags at any depth, hidden directories and a bag's insides skipped,
.mcap files, incomplete bags found, sorted and unique, one-line errors."""
from __future__ import annotations

import pytest
from synthetic_bags import write_demo_bag

from arm_act.bags import MARKER_NAME, BagError, find_bags, is_bag

pytestmark = pytest.mark.unit


def test_bags_at_any_depth_hidden_skipped_sorted_and_unique(tmp_path):
    b = write_demo_bag(tmp_path / "run2" / "deep" / "ep_b", ticks=6)
    a = write_demo_bag(tmp_path / "run1" / "ep_a", ticks=6)
    write_demo_bag(tmp_path / ".cache" / "ep_hidden", ticks=6)
    write_demo_bag(a / "inner", ticks=6)  # inside a bag: not searched
    assert find_bags([tmp_path]) == [a, b]
    assert find_bags([a]) == [a]
    assert find_bags([b, tmp_path, a]) == [a, b]  # the argument order does not matter
    (mcap,) = a.glob("*.mcap")
    assert find_bags([mcap]) == [a]


def test_an_incomplete_bag_is_found(tmp_path):
    """A writer that died leaves its marker and no metadata.yaml: still a bag (the caller
    decides whether to use it)."""
    bag = tmp_path / "dead"
    bag.mkdir()
    (bag / MARKER_NAME).write_text("{}")
    assert is_bag(bag)
    assert find_bags([tmp_path]) == [bag]


@pytest.mark.parametrize("make, message", [
    (lambda root: root / "nope", "no such bag or directory"),
    (lambda root: (root / "empty").mkdir() or root / "empty", "not a bag and no bags under it"),
    (lambda root: (root / "notes.txt").write_text("x") and root / "notes.txt", "not a bag"),
])
def test_paths_that_name_no_bag_are_errors(tmp_path, make, message):
    with pytest.raises(BagError, match=message):
        find_bags([make(tmp_path)])
