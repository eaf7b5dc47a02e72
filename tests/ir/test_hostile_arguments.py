"""Arguments of `ir.run_reference` that are no bitstream are refused with the parameter's name,
never a raw NumPy error."""

from __future__ import annotations

import numpy as np
import pytest

from ir import run_reference
from ir.errors import InterpreterError
from ir.examples.vector_add import vector_add


@pytest.mark.parametrize("dtype", [object, str], ids=["object", "str"])
def test_run_reference_refuses_arrays_of_objects(dtype: type) -> None:
    buffers = [np.zeros(16, np.uint8) for _ in range(3)]
    buffers[0] = np.zeros(16, dtype)
    with pytest.raises(InterpreterError, match=r"argument 'x' is an array of .* plain data"):
        run_reference(vector_add(), 8, *buffers, grid=1)
