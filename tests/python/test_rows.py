"""rows= of load_safetensors and iter_safetensors: the rows read, and
bounds that cannot apply refused with one line naming the tensor."""

from __future__ import annotations

import numpy as np
import pytest

import phxio
from conftest import needs_host_views
from test_safetensors import reference, write_checkpoint


def _file(scratch, rng):
    f = scratch / "m.safetensors"
    write_checkpoint(f, rng, {"w": ("float32", (64, 300)),
                              "s": ("int32", ()), "z": ("int8", (0, 5)),
                              "b": ("bfloat16", (8,))})
    return f


@needs_host_views
def test_rows_read_the_slice(scratch, rng):
    f = _file(scratch, rng)
    ref = reference(f)
    got = phxio.load_safetensors(f, framework="numpy",
                                 rows={"w": (10, 20), "z": (0, 0),
                                       "b": (3, 3)})
    row = 300 * 4
    assert got["w"].tobytes()[10 * row:20 * row] == \
        ref["w"][2][10 * row:20 * row]
    assert got["z"].shape == (0, 5)
    assert got["s"].tobytes() == ref["s"][2]


@pytest.mark.parametrize("rows,match", [
    ({"w": (10, 100)}, r"'w': rows=\(10, 100\) are not rows of its 64"),
    ({"w": (20, 10)}, r"'w': rows=\(20, 10\) are not rows"),
    ({"w": (-5, 10)}, r"'w': rows=\(-5, 10\) are not rows"),
    ({"w": (0.0, 10)}, r"'w': rows=\(0.0, 10\) are not two integers"),
    ({"w": ("0", 10)}, "'w'.* are not two integers"),
    ({"w": 7}, "'w': rows=7 are not two integers"),
    ({"s": (0, 1)}, "'s'.* a scalar"),
    ({"z": (0, 1)}, r"'z': rows=\(0, 1\) are not rows of its 0"),
    ({"nope": (0, 1)}, "rows= names tensor 'nope', which is not in"),
])
def test_bad_rows_are_refused(dev, scratch, rng, rows, match):
    f = _file(scratch, rng)
    used = dev.query().used
    with pytest.raises(ValueError, match=match) as e:
        phxio.load_safetensors(f, dev, framework="phxio", rows=rows)
    assert "\n" not in str(e.value) and str(f) in str(e.value)
    assert dev.query().used == used
    with pytest.raises(ValueError, match=match):
        next(phxio.iter_safetensors(f, dev, rows=rows))


def test_rows_of_unselected_tensors_are_not_checked(scratch, rng):
    f = _file(scratch, rng)
    got = phxio.load_safetensors(f, framework="phxio", select=["w"],
                                 rows={"w": (0, 2), "elsewhere": (0, 1)})
    assert list(got) == ["w"]
