"""bench/mutation_score.py's table still names what is in the tree: every module, definition and test file
(the run itself is not CI's: tens of minutes; bench/RESULTS.md keeps one)."""
import importlib.util
import sys

from common import ROOT


def test_the_mutation_targets_exist():
    spec = importlib.util.spec_from_file_location("mutation_score", ROOT / "bench" / "mutation_score.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    assert module.check_targets(ROOT) == []
    assert len(module.TARGETS) == len({t.path for t in module.TARGETS})
