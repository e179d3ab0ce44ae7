"""Old import paths of renamed modules (issue 17) keep working: same objects, a DeprecationWarning naming the new
home, and ``from old import *`` gives the same names as from the new module."""

import subprocess
import sys

import pytest

from packwise._renamed import RENAMED

CHECK = r"""
import importlib, sys, warnings
old, new, home = sys.argv[1:4]
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    mod = importlib.import_module(old)
dep = [w for w in caught if w.category is DeprecationWarning]
assert len(dep) == 1 and f"import from {home}" in str(dep[0].message), [str(w.message) for w in caught]
real = importlib.import_module(new)
star_old, star_new = {}, {}
exec(f"from {old} import *", star_old)
exec(f"from {new} import *", star_new)
star_old.pop("__builtins__"); star_new.pop("__builtins__")
assert star_old.keys() == star_new.keys() and star_old, (sorted(star_old), sorted(star_new))
assert all(star_old[k] is star_new[k] for k in star_old)
print(len(star_old))
"""


@pytest.mark.parametrize("old", sorted(RENAMED))
def test_old_path_imports_warns_and_star_imports_the_same_names(old):
    new, home = RENAMED[old]
    out = subprocess.run(
        [sys.executable, "-c", CHECK, old, new, home], capture_output=True, text=True, timeout=300, check=False
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert int(out.stdout.strip()) > 0
